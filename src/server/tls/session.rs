//! One TLS connection: its rustls state (the unbuffered API: the
//! connection owns every buffer), and the socket's write half behind a
//! lock once the connection is a WebSocket (its reader and its writer are
//! two tasks, and records must reach the socket in the order rustls made
//! them).
//!
//! Between records an idle session holds no buffer at all: ciphertext is
//! read through the worker's scratch-buffer reads (at most 64 KiB per
//! read) and kept here only while a record is incomplete; plaintext goes
//! straight to the caller's frame buffer; records to send are made into
//! a buffer that leaves with the write. What is left is rustls's own
//! state (keys, key schedule, the handshake's outcome), about 3.9 KB
//! (BENCHMARKS.md), against about 8 KB for rustls's buffered connection.
//!
//! Bounded: incomplete ciphertext at most [`MAX_INCOMING`] (rustls
//! refuses records over 16 KiB + 2 KiB and handshake messages over
//! 64 KiB first); a write encrypts at most [`crate::tls::BUFFER_LIMIT`] of
//! a batch before sending it; what rustls makes by itself (handshake
//! flights, alerts, key updates, tickets) is sent before the reader reads
//! again.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use monoio::io::AsyncWriteRentExt;
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use rustls::{HandshakeKind, ServerConfig};

use crate::log;
use crate::server::worker::Worker;
use crate::tls;

/// Most ciphertext kept while a record (or a handshake message spread
/// over records) is incomplete.
pub const MAX_INCOMING: usize = 96 * 1024;
/// Room for one record's header, content type, padding and tag.
const RECORD_OVERHEAD: usize = 64;
/// Largest plaintext in one record.
const RECORD_PAYLOAD: usize = 16 * 1024;

/// A TLS connection's state, shared by its reader and writer.
pub struct Session {
    conn: RefCell<UnbufferedServerConnection>,
    /// Ciphertext of a record not complete yet; empty, without capacity,
    /// between records.
    incoming: RefCell<BytesMut>,
    /// Records made and not sent yet, in the order rustls made them;
    /// taken whole by the task holding the write half.
    pending: RefCell<Vec<u8>>,
    /// The socket's write half, in a WebSocket: `None` while a task
    /// holds it ([`WrGuard`]) and during the HTTP phase (which owns it).
    wr: Cell<Option<TcpOwnedWriteHalf>>,
    /// The task waiting for the write half (the reader or the writer;
    /// the other one holds it).
    waiter: Cell<Option<Waker>>,
    /// The handshake is not over (counted once when it ends either way).
    handshaking: Cell<bool>,
    /// Bytes came from the peer (its first ones are checked for plain
    /// HTTP).
    greeted: Cell<bool>,
    /// The peer sent `close_notify`: its stream has ended.
    peer_closed: Cell<bool>,
}

/// What a read came to, besides plaintext.
enum Fed {
    /// Plaintext (or nothing yet) and the session goes on.
    Open,
    /// The peer sent `close_notify`: the end of its stream.
    Closed,
}

/// What one step of rustls's state machine asks for next.
enum Step {
    /// Call it again.
    Again,
    /// Nothing more to do without more bytes from the peer.
    Stop(Fed),
}

impl Session {
    /// A fresh server-side session under `cfg`.
    pub fn new(cfg: Arc<ServerConfig>) -> Rc<Session> {
        // Fails only for a configuration rustls cannot serve (checked when
        // it was built: the same config made sessions before).
        let conn = UnbufferedServerConnection::new(cfg).expect("a configuration that serves");
        Rc::new(Session {
            conn: RefCell::new(conn),
            incoming: RefCell::new(BytesMut::new()),
            pending: RefCell::new(Vec::new()),
            wr: Cell::new(None),
            waiter: Cell::new(None),
            handshaking: Cell::new(true),
            greeted: Cell::new(false),
            peer_closed: Cell::new(false),
        })
    }

    /// Appends the peer's plaintext to `buf`, waiting for it (and doing
    /// the handshake on the way): `Ok(0)` at the end of its stream. What
    /// rustls has to send meanwhile goes out through `wr` (the HTTP
    /// phase's own half), or through the lock when `wr` is `None`.
    pub async fn read(
        &self,
        w: &Worker,
        (rd, fd): (&mut TcpOwnedReadHalf, RawFd),
        buf: &mut BytesMut,
        mut wr: Option<&mut TcpOwnedWriteHalf>,
    ) -> io::Result<usize> {
        let before = buf.len();
        if self.peer_closed.get() {
            return Ok(0);
        }
        loop {
            let fed = self.feed(w, buf);
            if !self.pending.borrow().is_empty() {
                // After an error: the alert rustls made (best effort).
                let sent = self.send_pending(wr.as_deref_mut()).await;
                if fed.is_ok() {
                    sent?;
                }
            }
            match fed? {
                Fed::Open if buf.len() == before => {}
                Fed::Open => return Ok(buf.len() - before),
                Fed::Closed => {
                    self.peer_closed.set(true);
                    return Ok(buf.len() - before);
                }
            }
            let mut cipher = self.incoming.take();
            let read = w.read_more(rd, fd, &mut cipher).await;
            let first = !self.greeted.replace(true);
            let plain_http = first && tls::looks_like_plain_http(&cipher);
            self.incoming.replace(cipher);
            match read {
                Ok(0) => {
                    self.handshake_failed(w, "peer left");
                    return Ok(buf.len() - before);
                }
                Ok(_) if plain_http => {
                    self.handshake_failed(w, "plain HTTP");
                    let answer = tls::PLAIN_HTTP_ANSWER.to_vec();
                    if let Some(wr) = wr {
                        let _ = wr.write_all(answer).await;
                    }
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "plain HTTP"));
                }
                Ok(_) => {}
                Err(e) => {
                    self.handshake_failed(w, "read error");
                    return Err(e);
                }
            }
        }
    }

    /// Runs rustls over the ciphertext kept, moving the plaintext it
    /// yields to `buf` and the records it makes to `pending`.
    fn feed(&self, w: &Worker, buf: &mut BytesMut) -> io::Result<Fed> {
        let mut conn = self.conn.borrow_mut();
        let mut incoming = self.incoming.borrow_mut();
        let mut pending = self.pending.borrow_mut();
        loop {
            let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut incoming);
            let step = match state {
                Ok(state) => on_state(state, buf, &mut pending),
                Err(e) => Err(e),
            };
            incoming.advance(discard);
            let step = match step {
                Ok(step) => step,
                Err(e) => {
                    drop(incoming);
                    alert(&mut conn, &mut pending);
                    drop(conn);
                    self.handshake_failed(w, "refused");
                    log!(Debug, "tls error", error = e);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            };
            if self.handshaking.get() && !conn.is_handshaking() {
                self.handshake_done(w, &conn);
            }
            if let Step::Stop(fed) = step {
                if incoming.is_empty() {
                    // No capacity kept between records.
                    *incoming = BytesMut::new();
                } else if incoming.len() > MAX_INCOMING {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "tls: incomplete record too large",
                    ));
                }
                return Ok(fed);
            }
        }
    }

    /// Counts a completed handshake.
    fn handshake_done(&self, w: &Worker, conn: &UnbufferedServerConnection) {
        self.handshaking.set(false);
        let resumed = conn.handshake_kind() == Some(HandshakeKind::Resumed);
        let mut hub = w.hub.borrow_mut();
        hub.stats.tls_handshakes += 1;
        hub.stats.tls_resumed += resumed as u64;
        log!(
            Trace,
            "tls handshake",
            version = log::Dbg(conn.protocol_version()),
            suite = log::Dbg(conn.negotiated_cipher_suite().map(|s| s.suite())),
            resumed = resumed,
        );
    }

    /// Counts a connection that ended before its handshake completed.
    fn handshake_failed(&self, w: &Worker, why: &str) {
        if self.handshaking.replace(false) {
            w.hub.borrow_mut().stats.tls_handshake_failures += 1;
            log!(Debug, "tls handshake failed", reason = why);
        }
    }

    /// Sends the records made so far, through `wr` or the lock.
    async fn send_pending(&self, wr: Option<&mut TcpOwnedWriteHalf>) -> io::Result<()> {
        match wr {
            Some(wr) => self.flush(wr).await,
            None => self.lock().await.flush().await,
        }
    }

    /// Encrypts `bufs` and writes them, at most [`tls::BUFFER_LIMIT`] of
    /// plaintext at a time; a batch of frames becomes as few records as
    /// fit, not one per frame. `progressed` runs after each write but the
    /// last.
    pub async fn write(
        &self,
        wr: &mut TcpOwnedWriteHalf,
        bufs: &[Bytes],
        mut progressed: impl FnMut(),
    ) -> io::Result<()> {
        let (mut i, mut off) = (0, 0);
        while i < bufs.len() {
            STAGE.with_borrow_mut(|stage| {
                stage.clear();
                while i < bufs.len() && stage.len() < tls::BUFFER_LIMIT {
                    let rest = &bufs[i][off..];
                    let take = rest.len().min(tls::BUFFER_LIMIT - stage.len());
                    stage.extend_from_slice(&rest[..take]);
                    off += take;
                    if off == bufs[i].len() {
                        (i, off) = (i + 1, 0);
                    }
                }
                self.encrypt(stage)
            })?;
            self.flush(wr).await?;
            if i < bufs.len() {
                progressed();
            }
        }
        Ok(())
    }

    /// Appends the records carrying `plain` to `pending` (after what
    /// rustls queued by itself).
    fn encrypt(&self, plain: &[u8]) -> io::Result<()> {
        let mut conn = self.conn.borrow_mut();
        let mut pending = self.pending.borrow_mut();
        loop {
            let UnbufferedStatus { state, .. } = conn.process_tls_records(&mut []);
            match state.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))? {
                ConnectionState::EncodeTlsData(mut e) => encode(&mut e, &mut pending),
                ConnectionState::TransmitTlsData(t) => t.done(),
                ConnectionState::PeerClosed => self.peer_closed.set(true),
                ConnectionState::WriteTraffic(mut traffic) => {
                    let records = plain.len().div_ceil(RECORD_PAYLOAD).max(1);
                    let at = pending.len();
                    pending.resize(at + plain.len() + records * RECORD_OVERHEAD, 0);
                    return match traffic.encrypt(plain, &mut pending[at..]) {
                        Ok(n) => {
                            pending.truncate(at + n);
                            Ok(())
                        }
                        Err(e) => {
                            pending.truncate(at);
                            Err(encrypt_error(e))
                        }
                    };
                }
                other => {
                    let e = format!("tls: cannot write in state {other:?}");
                    return Err(io::Error::new(io::ErrorKind::BrokenPipe, e));
                }
            }
        }
    }

    /// Writes every record made so far.
    pub async fn flush(&self, wr: &mut TcpOwnedWriteHalf) -> io::Result<()> {
        loop {
            let out = self.pending.take();
            if out.is_empty() {
                return Ok(());
            }
            let (res, _) = wr.write_all(out).await;
            res?;
        }
    }

    /// Queues `close_notify` (sent by the next flush).
    pub fn close_notify(&self) {
        let mut conn = self.conn.borrow_mut();
        let mut pending = self.pending.borrow_mut();
        loop {
            let UnbufferedStatus { state, .. } = conn.process_tls_records(&mut []);
            match state {
                Ok(ConnectionState::EncodeTlsData(mut e)) => encode(&mut e, &mut pending),
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::WriteTraffic(mut traffic)) => {
                    let at = pending.len();
                    pending.resize(at + RECORD_OVERHEAD, 0);
                    let n = traffic.queue_close_notify(&mut pending[at..]).unwrap_or(0);
                    pending.truncate(at + n);
                    return;
                }
                // Closed already, or never established: nothing to say.
                _ => return,
            }
        }
    }

    /// [`Session::read`] whose wait may end quietly (`Ok(None)`: nothing
    /// came for `wait`, a `conn::sock::QuietWait`), so the connection can park; only a session with
    /// nothing in flight waits quietly.
    pub async fn read_or_quiet(
        &self,
        w: &Worker,
        (rd, fd): (&mut TcpOwnedReadHalf, RawFd),
        buf: &mut BytesMut,
        wait: (Duration, &dyn Fn() -> Option<Duration>),
    ) -> io::Result<Option<usize>> {
        if self.parkable() && self.incoming.borrow().is_empty() {
            let mut cipher = self.incoming.take();
            let got = w.read_more_or_quiet(rd, fd, &mut cipher, wait).await;
            self.incoming.replace(cipher);
            // Some(0), the end of the stream: `read` sees it again.
            if got?.is_none() {
                return Ok(None);
            }
        }
        self.read(w, (rd, fd), buf, None).await.map(Some)
    }

    /// Whether the connection may park with this session kept: its
    /// handshake is over, its peer has not closed, and no record waits to
    /// be sent.
    pub fn parkable(&self) -> bool {
        self.established() && !self.peer_closed.get() && self.pending.borrow().is_empty()
    }

    /// Takes the write half back (to park the connection); `None` while a
    /// task holds it.
    pub fn take_write_half(&self) -> Option<TcpOwnedWriteHalf> {
        self.wr.take()
    }

    /// Whether the handshake completed (a plain answer never goes out
    /// before it).
    pub fn established(&self) -> bool {
        !self.handshaking.get()
    }

    /// Hands the socket's write half to the session: from here the
    /// connection's tasks write through [`Session::lock`].
    pub fn own_write_half(&self, wr: TcpOwnedWriteHalf) {
        self.wr.set(Some(wr));
    }

    /// Waits for the write half (one write in flight at a time).
    pub async fn lock(&self) -> WrGuard<'_> {
        poll_fn(|cx| match self.wr.take() {
            Some(wr) => Poll::Ready(WrGuard {
                session: self,
                wr: Some(wr),
            }),
            None => {
                self.waiter.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }
}

thread_local! {
    /// The plaintext of one write, gathered from a batch of frames so that
    /// they share records (the worker is one thread; never held across an
    /// await).
    static STAGE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(tls::BUFFER_LIMIT));
}

/// Handles one state of rustls's machine while reading.
fn on_state(
    state: ConnectionState<'_, '_, rustls::server::ServerConnectionData>,
    buf: &mut BytesMut,
    pending: &mut Vec<u8>,
) -> Result<Step, rustls::Error> {
    Ok(match state {
        ConnectionState::ReadTraffic(mut traffic) => {
            while let Some(record) = traffic.next_record() {
                buf.extend_from_slice(record?.payload);
            }
            Step::Again
        }
        ConnectionState::EncodeTlsData(mut e) => {
            encode(&mut e, pending);
            Step::Again
        }
        // Sent before the next read (the caller's job).
        ConnectionState::TransmitTlsData(t) => {
            t.done();
            Step::Again
        }
        ConnectionState::BlockedHandshake | ConnectionState::WriteTraffic(_) => {
            Step::Stop(Fed::Open)
        }
        ConnectionState::PeerClosed | ConnectionState::Closed => Step::Stop(Fed::Closed),
        // Early data is off (`max_early_data_size` 0): never offered.
        other => {
            log!(Debug, "tls: unexpected state", state = log::Dbg(&other));
            return Err(rustls::Error::General("unexpected tls state".into()));
        }
    })
}

/// Appends a record rustls made by itself to `pending`.
fn encode(
    e: &mut rustls::unbuffered::EncodeTlsData<'_, rustls::server::ServerConnectionData>,
    pending: &mut Vec<u8>,
) {
    let at = pending.len();
    pending.resize(at + RECORD_PAYLOAD + RECORD_OVERHEAD, 0);
    loop {
        match e.encode(&mut pending[at..]) {
            Ok(n) => return pending.truncate(at + n),
            Err(EncodeError::InsufficientSize(s)) => pending.resize(at + s.required_size, 0),
            Err(_) => return pending.truncate(at),
        }
    }
}

/// After an error: the alert rustls queued, if any, to `pending`.
fn alert(conn: &mut UnbufferedServerConnection, pending: &mut Vec<u8>) {
    for _ in 0..4 {
        let UnbufferedStatus { state, .. } = conn.process_tls_records(&mut []);
        match state {
            Ok(ConnectionState::EncodeTlsData(mut e)) => encode(&mut e, pending),
            Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
            _ => return,
        }
    }
}

fn encrypt_error(e: EncryptError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("tls: {e}"))
}

/// The write half, held by one task; given back when dropped (also when
/// the holder's future is dropped mid-write).
pub struct WrGuard<'a> {
    session: &'a Session,
    wr: Option<TcpOwnedWriteHalf>,
}

impl WrGuard<'_> {
    /// The socket's write half.
    pub fn half(&mut self) -> &mut TcpOwnedWriteHalf {
        self.wr.as_mut().expect("held until dropped")
    }

    /// Writes every record made so far.
    pub async fn flush(&mut self) -> io::Result<()> {
        let session = self.session;
        session.flush(self.half()).await
    }
}

impl Drop for WrGuard<'_> {
    fn drop(&mut self) {
        self.session.wr.set(self.wr.take());
        if let Some(waker) = self.session.waiter.take() {
            waker.wake();
        }
    }
}
