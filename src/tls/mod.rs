//! TLS for the listener, sans-I/O: the certificate files named by
//! `--tls-cert`/`--tls-key` read and checked ([`load`]), the certificate
//! chosen by the client's SNI name ([`sni`]), and the rustls
//! [`ServerConfig`] built from them ([`Settings::server_config`]), with the
//! session cache and ticket keys it keeps across reloads. The bytes go
//! through `server::tls`, the edge, which drives a
//! [`rustls::server::UnbufferedServerConnection`] over a socket.
//!
//! rustls on ring: TLS 1.3 and 1.2 only (1.0 and 1.1 are not
//! implemented by rustls at all), ALPN `http/1.1`, stateless tickets
//! (rustls's ring `Ticketer`, keys rotated every 6 hours) and a bounded
//! server-side session cache for clients without tickets; no 0-RTT
//! (early data is replayable), no client certificates.
//!
//! [`records`] is what a server session does with a client's bytes
//! (rustls fed, plaintext out, `close_notify` told from errors), the part
//! of the edge the fuzz target `tls_session` drives.
//!
//! [`client`] is the other direction: the one verifying client
//! configuration for the servers corecast connects to (`rediss://`).

pub mod client;
pub mod error;
pub mod load;
pub mod records;
mod settings;
pub mod sni;

pub use error::TlsError;
pub use settings::{
    looks_like_plain_http, Files, Settings, ALPN_HTTP11, BUFFER_LIMIT, PLAIN_HTTP_ANSWER,
    SESSION_CACHE_ENTRIES,
};
