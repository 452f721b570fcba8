//! One TLS connection: its rustls state, and the socket's write half
//! behind a lock once the connection is a WebSocket (its reader and its
//! writer are two tasks, and records must reach the socket in the order
//! rustls made them).
//!
//! Every byte is bounded: ciphertext is read through the worker's
//! scratch-buffer reads (at most 64 KiB per read) and handed to rustls at
//! once; plaintext is moved to the caller's frame buffer as it is
//! decrypted (rustls holds at most 16 KiB of it); a write encrypts at most
//! [`crate::tls::BUFFER_LIMIT`] of a batch before sending it; what rustls
//! queues by itself (handshake flights, alerts, key updates, tickets) is
//! sent before the reader reads again.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use monoio::io::AsyncWriteRentExt;
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};
use rustls::{HandshakeKind, ServerConfig, ServerConnection};

use super::edge::HandshakeSlot;
use crate::log;
use crate::server::iovec::advance_position;
use crate::server::sys;
use crate::server::worker::Worker;
use crate::tls;
use crate::tls::records::{self, Fed};

/// Most slices handed to rustls in one vectored write (a batch longer
/// than this is encrypted in more calls).
const MAX_SLICES: usize = 64;

/// A TLS connection's state, shared by its reader and writer.
pub struct Session {
    conn: RefCell<ServerConnection>,
    /// The socket's write half, in a WebSocket: `None` while a task
    /// holds it ([`WrGuard`]) and during the HTTP phase (which owns it).
    wr: Cell<Option<TcpOwnedWriteHalf>>,
    /// The task waiting for the write half (the reader or the writer;
    /// the other one holds it).
    waiter: Cell<Option<Waker>>,
    /// The handshake is not over (counted once when it ends either way).
    handshaking: Cell<bool>,
    /// Its place among the worker's pending handshakes
    /// (`--tls-max-handshakes`), given back when the handshake ends.
    slot: Cell<Option<HandshakeSlot>>,
    /// Bytes came from the peer (its first ones are checked for plain
    /// HTTP).
    greeted: Cell<bool>,
    /// The peer sent `close_notify`: its stream has ended.
    peer_closed: Cell<bool>,
}

impl Session {
    /// A fresh server-side session under `cfg`, holding `slot` until its
    /// handshake ends.
    pub fn new(cfg: Arc<ServerConfig>, slot: HandshakeSlot) -> Rc<Session> {
        Rc::new(Session {
            conn: RefCell::new(records::session(cfg)),
            wr: Cell::new(None),
            waiter: Cell::new(None),
            handshaking: Cell::new(true),
            slot: Cell::new(Some(slot)),
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
            if self.conn.borrow().wants_write() {
                self.send_pending(wr.as_deref_mut()).await?;
            }
            let mut cipher = BytesMut::new();
            let n = match w.read_more(rd, fd, &mut cipher).await {
                Ok(n) => n,
                Err(e) => {
                    self.handshake_failed(w, "read error");
                    return Err(e);
                }
            };
            if n == 0 {
                self.handshake_failed(w, "peer left");
                return Ok(buf.len() - before);
            }
            if self.plain_http(w, &cipher) {
                let answer = tls::PLAIN_HTTP_ANSWER.to_vec();
                if let Some(wr) = wr {
                    let _ = wr.write_all(answer).await;
                }
                return Err(io::Error::new(io::ErrorKind::InvalidData, "plain HTTP"));
            }
            match self.feed(w, &cipher, buf) {
                Ok(Fed::Open) if buf.len() == before => continue,
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
                    // The alert rustls queued (best effort), and a close
                    // that does not lose it.
                    let _ = self.send_pending(wr).await;
                    drain_after_alert(w, (rd, fd)).await;
                    return Err(e);
                }
            }
        }
    }

    /// Whether the first bytes of a connection are plain HTTP, not a TLS
    /// record (counted as a failed handshake).
    fn plain_http(&self, w: &Worker, first: &[u8]) -> bool {
        if self.greeted.replace(true) || !tls::looks_like_plain_http(first) {
            return false;
        }
        self.handshake_failed(w, "plain HTTP");
        true
    }

    /// Hands `cipher` to rustls (`tls::records::feed`), moving the
    /// plaintext it yields to `buf`; counts the handshake's end and a TLS
    /// error.
    fn feed(&self, w: &Worker, cipher: &[u8], buf: &mut BytesMut) -> io::Result<Fed> {
        let mut conn = self.conn.borrow_mut();
        let fed = records::feed(&mut conn, cipher, buf);
        if self.handshaking.get() && !conn.is_handshaking() {
            self.handshake_done(w, &conn);
        }
        drop(conn);
        if let Err(e) = &fed {
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

    /// Counts a completed handshake.
    fn handshake_done(&self, w: &Worker, conn: &ServerConnection) {
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
            sni = conn.server_name().unwrap_or("-"),
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

    /// Sends what rustls queued by itself, through `wr` or the lock.
    async fn send_pending(&self, wr: Option<&mut TcpOwnedWriteHalf>) -> io::Result<()> {
        match wr {
            Some(wr) => self.flush(wr).await,
            None => self.lock().await.flush().await,
        }
    }

    /// Encrypts `bufs` and writes them, at most
    /// [`tls::BUFFER_LIMIT`] of ciphertext at a time; a batch of frames
    /// becomes as few records as fit, not one per frame. `progressed` runs
    /// after each write but the last.
    pub async fn write(
        &self,
        wr: &mut TcpOwnedWriteHalf,
        bufs: &[Bytes],
        mut progressed: impl FnMut(),
    ) -> io::Result<()> {
        let (mut i, mut off) = (0, 0);
        while i < bufs.len() {
            let took = {
                let mut slices = Vec::with_capacity(MAX_SLICES.min(bufs.len() - i));
                slices.push(IoSlice::new(&bufs[i][off..]));
                slices.extend(
                    bufs[i + 1..]
                        .iter()
                        .take(MAX_SLICES - 1)
                        .map(|b| IoSlice::new(b)),
                );
                let mut conn = self.conn.borrow_mut();
                io::Write::write_vectored(&mut conn.writer(), &slices)?
            };
            (i, off) = advance_position(bufs, (i, off), took);
            self.flush(wr).await?;
            if i < bufs.len() {
                progressed();
            }
        }
        Ok(())
    }

    /// Writes every record rustls holds.
    pub async fn flush(&self, wr: &mut TcpOwnedWriteHalf) -> io::Result<()> {
        super::flush_records(&self.conn, wr).await
    }

    /// Queues `close_notify` (sent by the next flush).
    pub fn close_notify(&self) {
        self.conn.borrow_mut().send_close_notify();
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

    /// Writes every record rustls holds.
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
