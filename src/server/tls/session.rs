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
//! Bounded: incomplete ciphertext at most
//! [`crate::tls::records::MAX_INCOMING`] (rustls refuses records over
//! 16 KiB + 256 B and handshake messages over 64 KiB first); a write encrypts at most [`crate::tls::BUFFER_LIMIT`] of
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

use bytes::{Bytes, BytesMut};
use monoio::io::AsyncWriteRentExt;
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};
use rustls::{HandshakeKind, ServerConfig};

use super::edge::{begin_handshake, HandshakeSlot};
use crate::log;
use crate::server::sys;
use crate::server::worker::Worker;
use crate::tls;
use crate::tls::records::{self, Fed, UnbufferedServerConnection};

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
    /// Its place among the worker's pending handshakes, taken when the
    /// peer's first bytes arrive and given back when the handshake ends.
    slot: Cell<Option<HandshakeSlot>>,
    /// `--tls-max-handshakes` (0: unbounded).
    max_handshakes: usize,
    /// Bytes came from the peer (its first ones are checked for plain
    /// HTTP).
    greeted: Cell<bool>,
    /// The peer sent `close_notify`: its stream has ended.
    peer_closed: Cell<bool>,
    /// rustls refused the peer: the session is over, nothing may call it
    /// again (it would refuse the same bytes twice).
    failed: Cell<bool>,
}

impl Session {
    /// A fresh server-side session under `cfg`; it takes one of
    /// `max_handshakes` places (0: unbounded) when the peer's first
    /// bytes arrive, and holds it until its handshake ends.
    pub fn new(cfg: Arc<ServerConfig>, max_handshakes: usize) -> Rc<Session> {
        Rc::new(Session {
            conn: RefCell::new(records::session(cfg)),
            incoming: RefCell::new(BytesMut::new()),
            pending: RefCell::new(Vec::new()),
            wr: Cell::new(None),
            waiter: Cell::new(None),
            handshaking: Cell::new(true),
            slot: Cell::new(None),
            max_handshakes,
            greeted: Cell::new(false),
            peer_closed: Cell::new(false),
            failed: Cell::new(false),
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
        if self.failed.get() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "tls: refused"));
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
            match fed {
                Ok(Fed::Open) if buf.len() == before => {}
                Ok(Fed::Open) => return Ok(buf.len() - before),
                Ok(Fed::Closed { discarded }) => {
                    self.peer_closed.set(true);
                    if discarded > 0 {
                        // Writing after close_notify: not read, and the
                        // connection ends like any other at its close.
                        w.hub.borrow_mut().stats.tls_after_close_notify += 1;
                        log!(Debug, "tls data after close_notify", bytes = discarded);
                    }
                    return Ok(buf.len() - before);
                }
                Err(e) => {
                    // The alert went out above: a close that does not
                    // lose it.
                    drain_after_alert(w, (rd, fd)).await;
                    return Err(e);
                }
            }
            // Into a buffer of its own: the kept ciphertext stays in place
            // for the writer's calls meanwhile (rustls must see it).
            let mut cipher = BytesMut::new();
            let read = w.read_more(rd, fd, &mut cipher).await;
            let first = !self.greeted.replace(true);
            let plain_http = first && tls::looks_like_plain_http(&cipher);
            if first && !cipher.is_empty() && !plain_http && !self.take_slot(w) {
                return Err(io::Error::other("too many tls handshakes"));
            }
            self.keep(cipher);
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

    /// Runs rustls over the ciphertext kept (`tls::records::feed`),
    /// moving the plaintext it yields to `buf` and the records it makes
    /// to `pending`; counts the handshake's end and a TLS error.
    fn feed(&self, w: &Worker, buf: &mut BytesMut) -> io::Result<Fed> {
        let mut conn = self.conn.borrow_mut();
        let fed = records::feed(
            &mut conn,
            &mut self.incoming.borrow_mut(),
            buf,
            &mut self.pending.borrow_mut(),
        );
        if self.handshaking.get() && !conn.is_handshaking() {
            self.handshake_done(w, &conn);
        }
        drop(conn);
        if let Err(e) = &fed {
            self.failed.set(true);
            log!(Debug, "tls error", error = e);
            if self.handshaking.get() {
                self.handshake_failed(w, "refused");
            } else {
                // Bad records, an oversized one, a key-update flood:
                // rustls's alert goes out, then the close.
                w.hub.borrow_mut().stats.tls_errors += 1;
            }
        }
        fed
    }

    /// Takes a place among the handshakes under way for the ClientHello
    /// that arrived; over `--tls-max-handshakes` the session ends before
    /// any TLS work, counted and logged as refused.
    fn take_slot(&self, w: &Worker) -> bool {
        match begin_handshake(self.max_handshakes) {
            Some(slot) => {
                self.slot.set(Some(slot));
                true
            }
            None => {
                self.handshaking.set(false);
                self.failed.set(true);
                w.hub.borrow_mut().stats.tls_handshakes_refused += 1;
                log::refused(
                    log::Refusal::Tls,
                    "connection refused",
                    "too many tls handshakes",
                );
                false
            }
        }
    }

    /// Counts a completed handshake.
    fn handshake_done(&self, w: &Worker, conn: &UnbufferedServerConnection) {
        self.handshaking.set(false);
        self.slot.take();
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
            self.slot.take();
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
        if self.failed.get() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let mut conn = self.conn.borrow_mut();
        let mut incoming = self.incoming.borrow_mut();
        if records::encrypt(
            &mut conn,
            &mut incoming,
            plain,
            &mut self.pending.borrow_mut(),
        )? {
            self.peer_closed.set(true);
        }
        Ok(())
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
        if self.failed.get() {
            return;
        }
        records::close_notify(
            &mut self.conn.borrow_mut(),
            &mut self.incoming.borrow_mut(),
            &mut self.pending.borrow_mut(),
        );
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
            let mut cipher = BytesMut::new();
            let got = w.read_more_or_quiet(rd, fd, &mut cipher, wait).await;
            self.keep(cipher);
            // Some(0), the end of the stream: `read` sees it again.
            if got?.is_none() {
                return Ok(None);
            }
        }
        self.read(w, (rd, fd), buf, None).await.map(Some)
    }

    /// Adds ciphertext just read to what is kept (without a copy when
    /// nothing is: the usual case).
    fn keep(&self, cipher: BytesMut) {
        let mut incoming = self.incoming.borrow_mut();
        if incoming.is_empty() {
            *incoming = cipher;
        } else {
            incoming.extend_from_slice(&cipher);
        }
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

/// Most input read and dropped after an alert ([`drain_after_alert`]).
const DRAIN_BYTES: usize = 64 << 10;
/// Longest wait for the peer's end of stream after an alert.
const DRAIN_TIME: Duration = Duration::from_millis(200);

/// Half-closes after an alert, then reads and drops what the peer still
/// sends (within [`DRAIN_BYTES`] and [`DRAIN_TIME`]): closing with unread
/// input would make the kernel answer with an RST, which can take the
/// alert with it before the peer reads it.
async fn drain_after_alert(w: &Worker, (rd, fd): (&mut TcpOwnedReadHalf, RawFd)) {
    sys::shutdown_write(fd);
    let drain = async {
        let mut junk = BytesMut::new();
        let mut total = 0;
        while total < DRAIN_BYTES {
            match w.read_more(rd, fd, &mut junk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
            junk.clear();
        }
    };
    let _ = monoio::time::timeout(DRAIN_TIME, drain).await;
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
