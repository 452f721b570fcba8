//! [`BenchError`]: why a run could not produce a report. A leaf every
//! subcommand imports.

use std::fmt;
use std::io;
use std::net::SocketAddr;

/// Why a run could not produce a report.
#[derive(Debug)]
pub enum BenchError {
    /// The target did not accept a TCP connection.
    Unreachable {
        /// Where we tried to connect.
        addr: SocketAddr,
        /// What the kernel said.
        cause: io::Error,
    },
    /// The URL's host did not resolve.
    Resolve(String, io::Error),
    /// The run could not be set up as asked (e.g. not every subscriber
    /// connected).
    Setup(String),
    /// Pinning or starting the runtime failed.
    Runtime(String),
    /// Any other I/O error.
    Io(io::Error),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable { addr, cause } => {
                write!(f, "cannot reach {addr}: {cause} (is the server running?)")
            }
            Self::Resolve(host, e) => write!(f, "cannot resolve {host}: {e}"),
            Self::Setup(msg) | Self::Runtime(msg) => f.write_str(msg),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<io::Error> for BenchError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}
