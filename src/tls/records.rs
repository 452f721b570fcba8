//! What a server session does with the bytes a client sends, sans-I/O:
//! records handed to rustls, the plaintext they yield moved out, and the
//! end of the client's stream (`close_notify`) told apart from an error.
//! The edge (`server::tls::session`) calls [`feed`] with what it read;
//! the fuzz target `tls_session` calls it with arbitrary bytes.
//!
//! Every bad input ends in an `Err` rustls chose an alert for (queued in
//! the connection, for the caller to send): a record over 2^14 + 256
//! bytes of ciphertext (`record_overflow`), more than 32 key updates
//! without application data between them (BoringSSL's bound, rustls's
//! `TooManyKeyUpdateRequests`), garbage, a protocol version below 1.2.

use std::io::{self, BufRead};

use std::sync::Arc;

use bytes::BytesMut;
pub use rustls::{ServerConfig, ServerConnection};

/// What feeding a session came to, besides plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// The session goes on.
    Open,
    /// The client sent `close_notify`, the end of its stream; `discarded`
    /// bytes came after it and were not read.
    Closed {
        /// Bytes after `close_notify` in this call (ignored).
        discarded: usize,
    },
}

/// A fresh server session under `cfg`, its buffers bounded by
/// [`super::BUFFER_LIMIT`].
pub fn session(cfg: Arc<ServerConfig>) -> ServerConnection {
    // Fails only for a configuration rustls cannot serve (checked when
    // it was built: the same config made sessions before).
    let mut conn = ServerConnection::new(cfg).expect("a configuration that serves");
    conn.set_buffer_limit(Some(super::BUFFER_LIMIT));
    conn
}

/// Hands `cipher` to `conn`, appending the plaintext it yields to
/// `plain`. What rustls wants to send (handshake flights, alerts, key
/// updates) stays queued in `conn` for the caller. `Err`: the session is
/// over (rustls's error as `InvalidData`; its alert is queued).
pub fn feed(
    conn: &mut ServerConnection,
    mut cipher: &[u8],
    plain: &mut BytesMut,
) -> io::Result<Fed> {
    while !cipher.is_empty() {
        // One record at a time, so that what follows a close_notify is
        // still here to be told apart (rustls drops it silently).
        let mut record = &cipher[..first_record(cipher)];
        let len = record.len();
        if conn.read_tls(&mut record)? == 0 {
            return Ok(Fed::Closed {
                discarded: cipher.len(),
            });
        }
        cipher = &cipher[len - record.len()..];
        conn.process_new_packets()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if let Fed::Closed { .. } = take_plaintext(conn, plain)? {
            return Ok(Fed::Closed {
                discarded: cipher.len(),
            });
        }
    }
    Ok(Fed::Open)
}

/// The length of the record `cipher` starts with (its 5-byte header
/// included), or all of `cipher` when it holds less.
fn first_record(cipher: &[u8]) -> usize {
    match cipher {
        [_, _, _, hi, lo, ..] => {
            (5 + usize::from(u16::from_be_bytes([*hi, *lo]))).min(cipher.len())
        }
        _ => cipher.len(),
    }
}

/// Moves the plaintext rustls decrypted to `plain`.
fn take_plaintext(conn: &mut ServerConnection, plain: &mut BytesMut) -> io::Result<Fed> {
    let mut reader = conn.reader();
    loop {
        match reader.fill_buf() {
            Ok([]) => return Ok(Fed::Closed { discarded: 0 }),
            Ok(chunk) => {
                let n = chunk.len();
                plain.extend_from_slice(chunk);
                reader.consume(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Fed::Open),
            // TCP's end without close_notify: the read that sees it says so.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Fed::Open),
            Err(e) => return Err(e),
        }
    }
}

/// A server configuration with a throwaway P-256 key and a placeholder
/// certificate (the server never checks its own): for the fuzz target
/// and tests that drive [`feed`] without certificate files.
pub fn ephemeral_config() -> Arc<ServerConfig> {
    use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .expect("ring makes a P-256 key");
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8.as_ref().to_vec()));
    let signer = rustls::crypto::ring::sign::any_supported_type(&der).expect("a P-256 key");
    let cert = CertificateDer::from(vec![0x30, 0x00]);
    let key = Arc::new(rustls::sign::CertifiedKey::new(vec![cert], signer));
    let resolver = super::sni::Resolver::new(vec![key]).expect("one key");
    super::settings::config_with(Arc::new(resolver), None).expect("ring's versions")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_an_error_and_nothing_comes_out() {
        let mut conn = session(ephemeral_config());
        let mut plain = BytesMut::new();
        // A ClientHello record whose 4 bytes are no hello.
        let junk = [0x16, 3, 1, 0, 8, 1, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef];
        let e = feed(&mut conn, &junk, &mut plain).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(plain.is_empty());
        assert!(conn.wants_write(), "an alert is queued");
    }

    #[test]
    fn an_oversized_record_is_refused_before_its_body() {
        let mut conn = session(ephemeral_config());
        // A handshake record announcing 2^14 + 2049 bytes: refused from
        // its header alone.
        let len: u16 = (1 << 14) + 2049;
        let [hi, lo] = len.to_be_bytes();
        let e = feed(&mut conn, &[0x16, 3, 3, hi, lo, 1], &mut BytesMut::new()).unwrap_err();
        assert!(e.to_string().to_lowercase().contains("large"), "{e}");
    }
}
