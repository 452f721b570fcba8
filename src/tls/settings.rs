//! The TLS settings: the certificate files, the limits, and the rustls
//! [`ServerConfig`] built from them with the session cache and ticket
//! keys a reload keeps.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::ServerConfig;

use super::error::TlsError;
use super::{load, sni};

/// TLS sessions remembered for resumption by session id (TLS 1.2 clients
/// without ticket support): at most this many, the oldest evicted. An
/// entry is a few hundred bytes; tickets cost the server nothing.
pub const SESSION_CACHE_ENTRIES: usize = 4096;

/// Ciphertext waiting to be written per connection, at most
/// (`ServerConnection::set_buffer_limit`): a writer encrypts at most this
/// much of a batch, writes it, then encrypts the rest.
pub const BUFFER_LIMIT: usize = 32 * 1024;

/// The only application protocol offered in ALPN: WebSockets upgrade from
/// HTTP/1.1, and corecast speaks no HTTP/2.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// Whether a connection's first bytes are plain HTTP rather than TLS: a
/// TLS connection opens with a handshake record (`0x16`), an HTTP request
/// with a method in capitals. One byte is enough to tell.
pub fn looks_like_plain_http(first: &[u8]) -> bool {
    first.first().is_some_and(u8::is_ascii_uppercase)
}

/// The answer to plain HTTP on the TLS port (as nginx does), in plain
/// text so the client can show it; the connection then closes.
pub const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 57\r\nConnection: close\r\n\r\nthis port speaks TLS: use https:// or wss:// to reach it\n";

/// The certificate files: `--tls-cert` and `--tls-key`, comma-separated
/// lists paired by position (the first pair is the default certificate;
/// the others are chosen by SNI). Empty: TLS off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Files {
    /// PEM certificate chains, leaf first.
    pub certs: Vec<PathBuf>,
    /// PEM private keys (PKCS#8, PKCS#1 RSA or SEC1 EC), one per chain.
    pub keys: Vec<PathBuf>,
    /// `--tls-max-handshakes`: handshakes under way at once; more
    /// connections are closed before theirs (0 = unbounded).
    pub max_handshakes: usize,
}

impl Files {
    /// Whether TLS is on (`--tls-cert` given).
    pub fn enabled(&self) -> bool {
        !self.certs.is_empty() || !self.keys.is_empty()
    }

    /// The certificate and key paths paired by position, or why they
    /// cannot be.
    pub fn pairs(&self) -> Result<Vec<(PathBuf, PathBuf)>, TlsError> {
        if self.certs.len() != self.keys.len() {
            return Err(TlsError::Unpaired {
                certs: self.certs.len(),
                keys: self.keys.len(),
            });
        }
        if self.certs.len() > load::MAX_PAIRS {
            return Err(TlsError::TooManyPairs {
                pairs: self.certs.len(),
                max: load::MAX_PAIRS,
            });
        }
        Ok(self
            .certs
            .iter()
            .cloned()
            .zip(self.keys.iter().cloned())
            .collect())
    }
}

/// What a server's TLS keeps from one configuration to the next (a
/// reload): the files to read, the ticket keys and the session cache, so
/// sessions resumed across a reload stay resumed.
#[derive(Debug, Clone)]
pub struct Settings {
    files: Files,
    tickets: Arc<dyn ProducesTickets>,
    sessions: Arc<dyn StoresServerSessions>,
}

impl Settings {
    /// Settings for `files` (TLS must be on), with fresh ticket keys.
    pub fn new(files: Files) -> Result<Settings, TlsError> {
        let tickets = rustls::crypto::ring::Ticketer::new().map_err(TlsError::Rustls)?;
        Ok(Settings {
            files,
            tickets,
            sessions: ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES),
        })
    }

    /// Reads the certificate files now and builds the configuration new
    /// handshakes use. Blocking file reads, a few KiB each.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut keys = Vec::new();
        for (cert, key) in self.files.pairs()? {
            keys.push(load::certified_key(&cert, &key, &provider)?);
        }
        let resolver = sni::Resolver::new(keys)?;
        config_with(Arc::new(resolver), Some(self))
    }
}

/// The configuration handshakes get, choosing certificates with
/// `resolver`; `keep`: the settings whose ticket keys and session cache
/// it uses (`None`: rustls's defaults, for a throwaway configuration).
pub(super) fn config_with(
    resolver: Arc<sni::Resolver>,
    keep: Option<&Settings>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Rustls)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
    if let Some(s) = keep {
        cfg.ticketer = s.tickets.clone();
        cfg.session_storage = s.sessions.clone();
    }
    // Our cipher-suite order (AES-GCM, then ChaCha20-Poly1305), not
    // the client's: both are fast here with ring's assembly.
    cfg.ignore_client_order = true;
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_told_from_a_tls_record_by_its_first_byte() {
        assert!(looks_like_plain_http(b"G"));
        assert!(looks_like_plain_http(b"POST /publish/x HTTP/1.1"));
        assert!(!looks_like_plain_http(&[0x16, 3, 1]));
        assert!(!looks_like_plain_http(b""));
        assert!(!looks_like_plain_http(b"\x80garbage"));
    }

    #[test]
    fn the_plain_answer_has_the_length_it_says() {
        let text = std::str::from_utf8(PLAIN_HTTP_ANSWER).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{text}"
        );
    }

    #[test]
    fn certificates_and_keys_pair_by_position() {
        let files = |c: &[&str], k: &[&str]| Files {
            max_handshakes: 0,
            certs: c.iter().map(PathBuf::from).collect(),
            keys: k.iter().map(PathBuf::from).collect(),
        };
        assert!(!Files::default().enabled());
        let two = files(&["a.pem", "b.pem"], &["a.key", "b.key"])
            .pairs()
            .unwrap();
        assert_eq!(two[1], (PathBuf::from("b.pem"), PathBuf::from("b.key")));
        let e = files(&["a.pem", "b.pem"], &["a.key"]).pairs().unwrap_err();
        assert!(e.to_string().contains("2 files and --tls-key 1"), "{e}");
    }
}
