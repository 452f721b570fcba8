//! Why TLS could not be configured: one variant per broken rule, each
//! naming the file, for the start-up error and the reload log line.

use std::fmt;
use std::path::PathBuf;

/// A TLS configuration error.
#[derive(Debug)]
pub enum TlsError {
    /// A file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A file is larger than the limit (`load::MAX_FILE_BYTES`).
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        max: u64,
    },
    /// A certificate file holds no `CERTIFICATE` section (or a broken one).
    NoCertificate {
        /// The file.
        path: PathBuf,
        /// The PEM parser's reason.
        reason: String,
    },
    /// A key file holds no private key (PKCS#8, RSA or EC) or a broken one.
    NoKey {
        /// The file.
        path: PathBuf,
        /// The PEM parser's reason.
        reason: String,
    },
    /// The key is of a kind ring cannot sign with, or does not belong to
    /// the certificate.
    BadKey {
        /// The key file.
        path: PathBuf,
        /// rustls's reason.
        error: rustls::Error,
    },
    /// The leaf certificate cannot be parsed.
    BadCertificate {
        /// The certificate file.
        path: PathBuf,
        /// The parser's reason.
        reason: String,
    },
    /// `--tls-cert` and `--tls-key` name different numbers of files.
    Unpaired {
        /// Certificate files given.
        certs: usize,
        /// Key files given.
        keys: usize,
    },
    /// More pairs than the limit (`load::MAX_PAIRS`).
    TooManyPairs {
        /// Pairs given.
        pairs: usize,
        /// The limit.
        max: usize,
    },
    /// No usable trust anchor among the system's certificates (for a
    /// TLS client without `--redis-tls-ca`).
    NoRoots(String),
    /// rustls refused the configuration.
    Rustls(rustls::Error),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Read { path, error } => write!(f, "{}: {error}", path.display()),
            TlsError::TooLarge { path, max } => {
                write!(f, "{}: larger than {max} bytes", path.display())
            }
            TlsError::NoCertificate { path, reason } => {
                write!(f, "{}: no PEM certificate ({reason})", path.display())
            }
            TlsError::NoKey { path, reason } => write!(
                f,
                "{}: no PEM private key, PKCS#8, RSA or EC ({reason})",
                path.display()
            ),
            TlsError::BadKey { path, error } => write!(f, "{}: {error}", path.display()),
            TlsError::BadCertificate { path, reason } => {
                write!(f, "{}: bad certificate ({reason})", path.display())
            }
            TlsError::Unpaired { certs, keys } => write!(
                f,
                "--tls-cert names {certs} files and --tls-key {keys}: one key per certificate, paired by position"
            ),
            TlsError::TooManyPairs { pairs, max } => {
                write!(f, "{pairs} certificate pairs; at most {max}")
            }
            TlsError::NoRoots(why) => write!(
                f,
                "no system CA certificates for TLS to Redis ({why}); install ca-certificates or give --redis-tls-ca"
            ),
            TlsError::Rustls(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TlsError {}
