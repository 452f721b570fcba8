//! What a server session does with the bytes a client sends and the
//! plaintext it is given to send, sans-I/O, on rustls's unbuffered API
//! (the caller owns every buffer, so an idle session holds none): records
//! handed to rustls, the plaintext they yield moved out, records made into
//! the caller's buffer, and the end of the client's stream
//! (`close_notify`) told apart from an error. The edge
//! (`server::tls::session`) calls [`feed`] with what it read; the fuzz
//! target `tls_session` calls it with arbitrary bytes.
//!
//! Every bad input ends in an `Err` rustls chose an alert for (appended to
//! the caller's output): a record over 2^14 + 256 bytes of ciphertext
//! (`record_overflow`), more than 32 key updates without application data
//! between them (BoringSSL's bound, rustls's `TooManyKeyUpdateRequests`),
//! garbage, a protocol version below 1.2; and ciphertext piling up
//! without completing a record past [`MAX_INCOMING`].

use std::io;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
pub use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, EncodeTlsData, UnbufferedStatus};
pub use rustls::ServerConfig;

/// Most ciphertext kept while a record (or a handshake message spread
/// over records) is incomplete.
pub const MAX_INCOMING: usize = 96 * 1024;
/// Room for one record's header, content type, padding and tag.
const RECORD_OVERHEAD: usize = 64;
/// Largest plaintext in one record.
const RECORD_PAYLOAD: usize = 16 * 1024;

/// What feeding a session came to, besides plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// The session goes on.
    Open,
    /// The client sent `close_notify`, the end of its stream; `discarded`
    /// bytes came after it and were not read.
    Closed {
        /// Bytes after `close_notify` (ignored).
        discarded: usize,
    },
}

/// What one step of rustls's state machine asks for next.
enum Step {
    /// Call it again.
    Again,
    /// Nothing more to do without more bytes from the peer.
    Stop(Fed),
}

/// A fresh server session under `cfg`.
pub fn session(cfg: Arc<ServerConfig>) -> UnbufferedServerConnection {
    // Fails only for a configuration rustls cannot serve (checked when
    // it was built: the same config made sessions before).
    UnbufferedServerConnection::new(cfg).expect("a configuration that serves")
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("tls: {e}"))
}

/// Runs rustls over `incoming` (the client's ciphertext; what it takes is
/// removed, an incomplete record stays), appending the plaintext it yields
/// to `plain` and the records it makes (handshake flights, tickets, key
/// updates) to `out`. `Err`: the session is over (its alert, if rustls
/// has one, appended to `out`): call nothing on it again.
pub fn feed(
    conn: &mut UnbufferedServerConnection,
    incoming: &mut BytesMut,
    plain: &mut BytesMut,
    out: &mut Vec<u8>,
) -> io::Result<Fed> {
    loop {
        let UnbufferedStatus { discard, state } = conn.process_tls_records(incoming);
        let step = state.and_then(|state| on_state(state, plain, out));
        incoming.advance(discard);
        match step {
            Ok(Step::Again) => {}
            Ok(Step::Stop(Fed::Closed { .. })) => {
                // rustls reads nothing after close_notify.
                let discarded = incoming.len();
                *incoming = BytesMut::new();
                return Ok(Fed::Closed { discarded });
            }
            Ok(Step::Stop(Fed::Open)) if incoming.len() > MAX_INCOMING => {
                return Err(invalid("incomplete record too large"));
            }
            Ok(Step::Stop(Fed::Open)) => {
                if incoming.is_empty() {
                    // No capacity kept between records.
                    *incoming = BytesMut::new();
                }
                return Ok(Fed::Open);
            }
            Err(e) => {
                alert(conn, incoming, out);
                return Err(invalid(e));
            }
        }
    }
}

/// Handles one state of rustls's machine while reading.
fn on_state(
    state: ConnectionState<'_, '_, ServerConnectionData>,
    plain: &mut BytesMut,
    out: &mut Vec<u8>,
) -> Result<Step, rustls::Error> {
    Ok(match state {
        ConnectionState::ReadTraffic(mut traffic) => {
            while let Some(record) = traffic.next_record() {
                plain.extend_from_slice(record?.payload);
            }
            Step::Again
        }
        ConnectionState::EncodeTlsData(mut e) => {
            encode(&mut e, out);
            Step::Again
        }
        // Sent by the caller before it reads again.
        ConnectionState::TransmitTlsData(t) => {
            t.done();
            Step::Again
        }
        ConnectionState::BlockedHandshake | ConnectionState::WriteTraffic(_) => {
            Step::Stop(Fed::Open)
        }
        ConnectionState::PeerClosed | ConnectionState::Closed => {
            Step::Stop(Fed::Closed { discarded: 0 })
        }
        // Early data is off (`max_early_data_size` 0): never offered.
        _ => return Err(rustls::Error::General("unexpected tls state".into())),
    })
}

/// Appends the records carrying `plain` to `out` (after what rustls
/// queued by itself). `Ok(true)` if the client's `close_notify` was seen
/// meanwhile. `incoming` is what [`feed`] kept: rustls's machine must see
/// the same buffer on every call (it may be part way through joining a
/// handshake message in it); it holds no complete record, so nothing is
/// read here.
pub fn encrypt(
    conn: &mut UnbufferedServerConnection,
    incoming: &mut BytesMut,
    plain: &[u8],
    out: &mut Vec<u8>,
) -> io::Result<bool> {
    let mut peer_closed = false;
    loop {
        let UnbufferedStatus { discard, state } = conn.process_tls_records(incoming);
        let state = state.map_err(invalid);
        let state = match state {
            Ok(state) => state,
            Err(e) => {
                incoming.advance(discard);
                return Err(e);
            }
        };
        let done = match state {
            ConnectionState::EncodeTlsData(mut e) => {
                encode(&mut e, out);
                None
            }
            ConnectionState::TransmitTlsData(t) => {
                t.done();
                None
            }
            ConnectionState::PeerClosed => {
                peer_closed = true;
                None
            }
            ConnectionState::WriteTraffic(mut traffic) => {
                let records = plain.len().div_ceil(RECORD_PAYLOAD).max(1);
                let at = out.len();
                out.resize(at + plain.len() + records * RECORD_OVERHEAD, 0);
                let res = traffic.encrypt(plain, &mut out[at..]);
                out.truncate(at + *res.as_ref().unwrap_or(&0));
                Some(res.map(|_| peer_closed).map_err(invalid))
            }
            other => {
                let e = format!("tls: cannot write in state {other:?}");
                Some(Err(io::Error::new(io::ErrorKind::BrokenPipe, e)))
            }
        };
        incoming.advance(discard);
        if let Some(res) = done {
            return res;
        }
    }
}

/// Appends `close_notify` to `out` (nothing if the session cannot send
/// it: closed already, or never established); `incoming` as for
/// [`encrypt`].
pub fn close_notify(
    conn: &mut UnbufferedServerConnection,
    incoming: &mut BytesMut,
    out: &mut Vec<u8>,
) {
    loop {
        let UnbufferedStatus { discard, state } = conn.process_tls_records(incoming);
        let again = match state {
            Ok(ConnectionState::EncodeTlsData(mut e)) => {
                encode(&mut e, out);
                true
            }
            Ok(ConnectionState::TransmitTlsData(t)) => {
                t.done();
                true
            }
            Ok(ConnectionState::WriteTraffic(mut traffic)) => {
                let at = out.len();
                out.resize(at + RECORD_OVERHEAD, 0);
                let n = traffic.queue_close_notify(&mut out[at..]).unwrap_or(0);
                out.truncate(at + n);
                false
            }
            _ => false,
        };
        incoming.advance(discard);
        if !again {
            return;
        }
    }
}

/// Appends a record rustls made by itself to `out`.
fn encode(e: &mut EncodeTlsData<'_, ServerConnectionData>, out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + RECORD_PAYLOAD + RECORD_OVERHEAD, 0);
    loop {
        match e.encode(&mut out[at..]) {
            Ok(n) => return out.truncate(at + n),
            Err(EncodeError::InsufficientSize(s)) => out.resize(at + s.required_size, 0),
            Err(_) => return out.truncate(at),
        }
    }
}

/// After an error: the alert rustls queued, if any, to `out`. One call
/// only: a second would deframe the bad record again and make a second
/// alert (a debug assertion in rustls). The session must not be used
/// again afterwards.
fn alert(conn: &mut UnbufferedServerConnection, incoming: &mut BytesMut, out: &mut Vec<u8>) {
    let UnbufferedStatus { discard, state } = conn.process_tls_records(incoming);
    if let Ok(ConnectionState::EncodeTlsData(mut e)) = state {
        encode(&mut e, out);
    }
    incoming.advance(discard);
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
        let (mut plain, mut out) = (BytesMut::new(), Vec::new());
        // A ClientHello record whose 4 bytes are no hello.
        let junk = [0x16, 3, 1, 0, 8, 1, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef];
        let mut incoming = BytesMut::from(&junk[..]);
        let e = feed(&mut conn, &mut incoming, &mut plain, &mut out).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(plain.is_empty());
        assert!(!out.is_empty(), "an alert is made");
    }

    #[test]
    fn an_oversized_record_is_refused_before_its_body() {
        let mut conn = session(ephemeral_config());
        // A handshake record announcing 2^14 + 2049 bytes: refused from
        // its header alone.
        let len: u16 = (1 << 14) + 2049;
        let [hi, lo] = len.to_be_bytes();
        let mut incoming = BytesMut::from(&[0x16, 3, 3, hi, lo, 1][..]);
        let e = feed(
            &mut conn,
            &mut incoming,
            &mut BytesMut::new(),
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(e.to_string().to_lowercase().contains("large"), "{e}");
    }

    #[test]
    fn an_incomplete_record_waits_and_a_fresh_session_says_nothing() {
        let mut conn = session(ephemeral_config());
        let (mut plain, mut out) = (BytesMut::new(), Vec::new());
        // The first 3 bytes of a record header: nothing to do yet.
        let mut incoming = BytesMut::from(&[0x16, 3, 1][..]);
        assert_eq!(
            feed(&mut conn, &mut incoming, &mut plain, &mut out).unwrap(),
            Fed::Open
        );
        assert_eq!(incoming.len(), 3, "kept for the rest of the record");
        assert!(plain.is_empty() && out.is_empty());
    }
}
