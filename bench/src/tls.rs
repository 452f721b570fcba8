//! `wss://` for the generator: a rustls client session per connection,
//! driven by hand over the generator's own nonblocking reads and writes, so
//! TLS runs go through the same receive loop (shared scratch buffer, kernel
//! timestamps) as plain ones. The server's certificate is checked against
//! `--tls-ca` (a PEM file, for test CAs) or the system's roots.
//!
//! Same library and provider as the server (rustls on ring): what a TLS
//! run adds on the generator's CPU is the client side of the same cipher
//! suite, whichever server is measured.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

/// Plaintext read out of a session per call while draining it.
const DRAIN_CHUNK: usize = 16 * 1024;

/// Where and how to speak TLS (one per target).
#[derive(Debug, Clone)]
pub struct TlsTarget {
    /// The client configuration (shared: it carries the session cache, so
    /// reconnects resume).
    pub config: Arc<ClientConfig>,
    /// SNI and the name the certificate must be valid for.
    pub name: ServerName<'static>,
}

/// Builds the client configuration: roots from `ca` (PEM) or the system;
/// with `insecure`, any certificate (`--tls-insecure`: a benchmark's
/// self-signed server; the handshake's signatures are still checked).
pub fn client_config(ca: Option<&Path>, insecure: bool) -> Result<Arc<ClientConfig>, String> {
    if insecure {
        return Ok(insecure_config());
    }
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("--tls-ca {}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("--tls-ca {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("--tls-ca {}: {e}", path.display()))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                // A system certificate rustls cannot read is not ours to fix.
                let _ = roots.add(cert);
            }
        }
    }
    if roots.is_empty() {
        return Err("no CA certificate to verify the server with (--tls-ca)".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A configuration that takes any server certificate.
fn insecure_config() -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyCertificate(provider.clone()));
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring's versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Arc::new(config)
}

/// `--tls-insecure`: every certificate is accepted (name, issuer and
/// dates unchecked); the handshake signatures are verified with the
/// provider's algorithms as usual.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One connection's TLS session.
pub struct Tls {
    conn: RefCell<ClientConnection>,
}

impl Tls {
    /// A fresh client session for `target`.
    pub fn new(target: &TlsTarget) -> io::Result<Tls> {
        let mut conn = ClientConnection::new(target.config.clone(), target.name.clone())
            .map_err(io::Error::other)?;
        // The generator writes whole batches; it bounds them itself.
        conn.set_buffer_limit(None);
        Ok(Tls {
            conn: RefCell::new(conn),
        })
    }

    /// Whether the handshake is still running.
    pub fn handshaking(&self) -> bool {
        self.conn.borrow().is_handshaking()
    }

    /// Whether rustls has records to send of its own (a key update).
    pub fn wants_write(&self) -> bool {
        self.conn.borrow().wants_write()
    }

    /// Encrypts `plain` and appends the records to `out`.
    pub fn encrypt(&self, plain: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let mut conn = self.conn.borrow_mut();
        if !plain.is_empty() {
            conn.writer().write_all(plain)?;
        }
        while conn.wants_write() {
            conn.write_tls(out)?;
        }
        Ok(())
    }

    /// Takes the records in `cipher` and appends the plaintext they carry
    /// to `plain`. `Ok(false)` once the server sent `close_notify`.
    pub fn decrypt(&self, mut cipher: &[u8], plain: &mut Vec<u8>) -> io::Result<bool> {
        let mut conn = self.conn.borrow_mut();
        let mut open = true;
        while !cipher.is_empty() {
            conn.read_tls(&mut cipher)?;
            let state = conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            open &= !state.peer_has_closed();
            drain(&mut conn, plain)?;
        }
        Ok(open)
    }
}

/// Moves the plaintext rustls holds into `plain`.
fn drain(conn: &mut ClientConnection, plain: &mut Vec<u8>) -> io::Result<()> {
    loop {
        let at = plain.len();
        plain.resize(at + DRAIN_CHUNK, 0);
        let got = conn.reader().read(&mut plain[at..]);
        match got {
            Ok(n) => {
                plain.truncate(at + n);
                if n == 0 {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                plain.truncate(at);
                return Ok(());
            }
            Err(e) => {
                plain.truncate(at);
                return Err(e);
            }
        }
    }
}

/// A blocking TLS stream for the publisher thread.
pub type BlockingTls = rustls::StreamOwned<ClientConnection, std::net::TcpStream>;

/// Opens a blocking TLS stream over `tcp` (the handshake runs at the first
/// write).
pub fn blocking(target: &TlsTarget, tcp: std::net::TcpStream) -> io::Result<BlockingTls> {
    let conn = ClientConnection::new(target.config.clone(), target.name.clone())
        .map_err(io::Error::other)?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}
