//! Why a Redis connection failed: one variant per cause, mapped to a log
//! line and a `/readyz` reason at the edge. RESP errors keep their type:
//! [`RespError`] lives here, a leaf both the decoder (`resp`) and its
//! bounded pre-scan (`scan`) import.

use std::fmt;
use std::io;

/// Errors of the RESP layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespError {
    /// The bytes are not RESP2.
    Protocol(String),
    /// A reply arrived with no command waiting for it.
    UnexpectedReply,
    /// A subscriber connection got something that is not a pub/sub event.
    NotPubSub,
    /// Arrays nested deeper than any reply we use (see `scan`).
    TooDeep {
        /// Deepest nesting accepted.
        max: usize,
    },
    /// A reply (or the part of it buffered so far) is over
    /// `--redis-max-reply-size`.
    TooLarge {
        /// Bytes declared or buffered.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// An array declares more elements than accepted.
    TooManyElements {
        /// Declared elements.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl fmt::Display for RespError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespError::Protocol(e) => write!(f, "RESP protocol error: {e}"),
            RespError::UnexpectedReply => f.write_str("reply without a pending command"),
            RespError::NotPubSub => f.write_str("unexpected reply on a subscriber connection"),
            RespError::TooDeep { max } => write!(f, "reply nested deeper than {max} arrays"),
            RespError::TooLarge { size, max } => {
                write!(f, "reply of {size} bytes over the {max}-byte limit")
            }
            RespError::TooManyElements { len, max } => {
                write!(f, "array of {len} elements over the {max}-element limit")
            }
        }
    }
}

impl std::error::Error for RespError {}

/// A Redis connection's failure.
#[derive(Debug)]
pub enum RedisError {
    /// The socket failed (refused, reset, closed).
    Io(io::Error),
    /// Connecting, or a reply, took longer than its timeout.
    Timeout,
    /// Redis answered with an error where the connection cannot go on
    /// (bad password, unknown database, refused subscription).
    Refused(String),
    /// The bytes were not the RESP we expect here.
    Resp(RespError),
    /// The host name did not resolve.
    Resolve(String),
    /// The TLS handshake failed (`rediss://`): the server's certificate
    /// was refused (unknown issuer, expired, wrong name) or it does not
    /// speak TLS.
    Tls(String),
    /// Redis no longer knows our scripts (`NOSCRIPT`, e.g. after `SCRIPT
    /// FLUSH`): reconnect, load them again, resend what was unanswered.
    NoScript,
    /// Sentinel mode: the server reached says (`ROLE`) it is not a master
    /// (a replica, a demoted master): not used, the Sentinels asked again.
    NotMaster,
}

impl fmt::Display for RedisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisError::Io(e) => write!(f, "{e}"),
            RedisError::Timeout => f.write_str("timed out"),
            RedisError::Refused(e) => write!(f, "refused by Redis: {e}"),
            RedisError::Resp(e) => write!(f, "{e}"),
            RedisError::Resolve(e) => f.write_str(e),
            RedisError::Tls(e) => f.write_str(e),
            RedisError::NoScript => f.write_str("redis lost our scripts (NOSCRIPT)"),
            RedisError::NotMaster => f.write_str("not a master (ROLE): asking the Sentinels again"),
        }
    }
}

impl std::error::Error for RedisError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedisError::Io(e) => Some(e),
            RedisError::Resp(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for RedisError {
    fn from(e: io::Error) -> Self {
        RedisError::Io(e)
    }
}

impl From<RespError> for RedisError {
    fn from(e: RespError) -> Self {
        RedisError::Resp(e)
    }
}
