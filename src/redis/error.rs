//! Why a Redis connection failed: one variant per cause, mapped to a log
//! line and a `/readyz` reason at the edge. RESP errors keep their type.

use std::fmt;
use std::io;

use super::resp::RespError;

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
}

impl fmt::Display for RedisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisError::Io(e) => write!(f, "{e}"),
            RedisError::Timeout => f.write_str("timed out"),
            RedisError::Refused(e) => write!(f, "refused by Redis: {e}"),
            RedisError::Resp(e) => write!(f, "{e}"),
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
