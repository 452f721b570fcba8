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
use std::io::{self, BufRead, IoSlice};
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};

use bytes::{Bytes, BytesMut};
use monoio::io::AsyncWriteRentExt;
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};
use rustls::{HandshakeKind, ServerConfig, ServerConnection};

use crate::log;
use crate::server::iovec::advance_position;
use crate::server::worker::Worker;
use crate::tls;

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

impl Session {
    /// A fresh server-side session under `cfg`.
    pub fn new(cfg: Arc<ServerConfig>) -> Rc<Session> {
        // Fails only for a configuration rustls cannot serve (checked when
        // it was built: the same config made sessions before).
        let mut conn = ServerConnection::new(cfg).expect("a configuration that serves");
        conn.set_buffer_limit(Some(tls::BUFFER_LIMIT));
        Rc::new(Session {
            conn: RefCell::new(conn),
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
                Ok(Fed::Closed) => {
                    self.peer_closed.set(true);
                    return Ok(buf.len() - before);
                }
                Err(e) => {
                    // The alert rustls queued (best effort).
                    let _ = self.send_pending(wr).await;
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

    /// Hands `cipher` to rustls, moving the plaintext it yields to `buf`.
    fn feed(&self, w: &Worker, mut cipher: &[u8], buf: &mut BytesMut) -> io::Result<Fed> {
        let mut conn = self.conn.borrow_mut();
        while !cipher.is_empty() {
            if conn.read_tls(&mut cipher)? == 0 {
                // After close_notify rustls takes no more; the rest is
                // discarded.
                break;
            }
            if let Err(e) = conn.process_new_packets() {
                drop(conn);
                self.handshake_failed(w, "refused");
                log!(Debug, "tls error", error = e);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            if self.handshaking.get() && !conn.is_handshaking() {
                self.handshake_done(w, &conn);
            }
            if let Fed::Closed = take_plaintext(&mut conn, buf)? {
                return Ok(Fed::Closed);
            }
        }
        Ok(Fed::Open)
    }

    /// Counts a completed handshake.
    fn handshake_done(&self, w: &Worker, conn: &ServerConnection) {
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
            sni = conn.server_name().unwrap_or("-"),
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

/// Moves the plaintext rustls decrypted to `buf`.
fn take_plaintext(conn: &mut ServerConnection, buf: &mut BytesMut) -> io::Result<Fed> {
    let mut reader = conn.reader();
    loop {
        match reader.fill_buf() {
            Ok([]) => return Ok(Fed::Closed),
            Ok(chunk) => {
                let n = chunk.len();
                buf.extend_from_slice(chunk);
                reader.consume(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Fed::Open),
            // TCP's end without close_notify: the read that sees it says so.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Fed::Open),
            Err(e) => return Err(e),
        }
    }
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
