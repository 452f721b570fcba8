//! TLS to what corecast calls (`rediss://`): a TCP stream that is
//! encrypted or not, with the same reads and writes either way, driven
//! over a [`rustls::ClientConnection`] made from the process's one client
//! configuration (`crate::tls::client`).
//!
//! A connection has a reader and a writer task on two descriptors of one
//! socket ([`ClientStream::dup`]); with TLS both share the rustls state,
//! and records leave it only under a lock held until they are written, so
//! they reach the socket in the order rustls made them. The reader sends
//! what rustls answers by itself (a key update) the same way.
//!
//! Bounded: ciphertext is read 16 KiB at a time and handed to rustls at
//! once; rustls holds at most [`crate::tls::BUFFER_LIMIT`] of records to
//! send (a write encrypts what fits, sends it, and goes on); the handshake
//! runs under the caller's connect timeout.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::poll_fn;
use std::io::{self, BufRead, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};

use bytes::{Bytes, BytesMut};
use monoio::net::TcpStream;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use crate::server::iovec::{advance_position, IoVecs};
use crate::server::sys;

/// Bytes read from the socket per `recv`.
const READ_CHUNK: usize = 16 * 1024;
/// Most slices handed to rustls in one vectored write.
const MAX_SLICES: usize = 64;

/// Why a TLS connection could not be set up.
#[derive(Debug)]
pub enum HandshakeError {
    /// The socket failed or closed during the handshake.
    Io(io::Error),
    /// rustls refused the peer: its certificate (unknown issuer, expired,
    /// not valid for the host name) or its protocol.
    Tls(rustls::Error),
    /// The host is neither a DNS name nor an IP address.
    BadName(String),
    /// The server did not finish the handshake in time (the caller's
    /// deadline): often a server that does not speak TLS.
    TimedOut,
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Io(e) => write!(f, "tls handshake: {e}"),
            HandshakeError::Tls(e) => write!(f, "tls handshake refused: {e}"),
            HandshakeError::BadName(h) => write!(f, "tls: {h:?} is not a valid server name"),
            HandshakeError::TimedOut => {
                f.write_str("tls handshake timed out (does the server speak TLS?)")
            }
        }
    }
}

/// The process's TLS client configurations, built at start: Redis's
/// (`--redis-tls-ca` or the system's roots) and the one for HTTP
/// (`https://` origin and webhooks: the system's roots). Without
/// `--redis-tls-ca` both are the same configuration.
#[derive(Clone, Default)]
pub struct ClientTls {
    /// For `rediss://` (set when a Redis URL is `rediss://`).
    pub redis: Option<Arc<ClientConfig>>,
    /// For `https://` (set when the origin or a webhook is `https://`).
    pub http: Option<Arc<ClientConfig>>,
}

/// A connection to a server corecast calls: plain TCP or TLS.
pub struct ClientStream {
    tcp: TcpStream,
    tls: Option<Rc<Shared>>,
}

/// The rustls state a connection's reader and writer share.
struct Shared {
    conn: RefCell<ClientConnection>,
    /// A task is writing records (see [`Shared::lock`]).
    writing: Cell<bool>,
    /// The other task, waiting for the lock.
    waiter: Cell<Option<Waker>>,
    /// The peer sent `close_notify`.
    closed: Cell<bool>,
}

impl ClientStream {
    /// An unencrypted stream.
    pub fn plain(tcp: TcpStream) -> ClientStream {
        ClientStream { tcp, tls: None }
    }

    /// Runs the TLS handshake over `tcp` for `host` (sent as SNI, and
    /// the name the certificate must be valid for). The caller bounds it
    /// in time.
    pub async fn handshake(
        tcp: TcpStream,
        cfg: Arc<ClientConfig>,
        host: &str,
    ) -> Result<ClientStream, HandshakeError> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| HandshakeError::BadName(host.to_string()))?;
        let mut conn = ClientConnection::new(cfg, name).map_err(HandshakeError::Tls)?;
        conn.set_buffer_limit(Some(crate::tls::BUFFER_LIMIT));
        let mut stream = ClientStream {
            tcp,
            tls: Some(Rc::new(Shared {
                conn: RefCell::new(conn),
                writing: Cell::new(false),
                waiter: Cell::new(None),
                closed: Cell::new(false),
            })),
        };
        stream.finish_handshake().await?;
        Ok(stream)
    }

    async fn finish_handshake(&mut self) -> Result<(), HandshakeError> {
        let tls = self.tls.clone().expect("a TLS stream");
        loop {
            tls.flush(&mut self.tcp).await.map_err(HandshakeError::Io)?;
            if !tls.conn.borrow().is_handshaking() {
                return Ok(());
            }
            let mut cipher = BytesMut::new();
            if recv(&self.tcp, &mut cipher)
                .await
                .map_err(HandshakeError::Io)?
                == 0
            {
                let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "closed by the server");
                return Err(HandshakeError::Io(eof));
            }
            // Plaintext cannot come before the handshake's end.
            let mut none = BytesMut::new();
            if let Err(e) = tls.feed(&cipher, &mut none) {
                // The alert rustls queued (best effort).
                let _ = tls.flush(&mut self.tcp).await;
                return Err(
                    match e.into_inner().map(|e| e.downcast::<rustls::Error>()) {
                        Some(Ok(e)) => HandshakeError::Tls(*e),
                        Some(Err(e)) => HandshakeError::Io(io::Error::other(e)),
                        None => HandshakeError::Io(io::ErrorKind::InvalidData.into()),
                    },
                );
            }
        }
    }

    /// A second stream over the same socket (and TLS session), for a
    /// writer task beside the reader.
    pub fn dup(&self) -> io::Result<ClientStream> {
        Ok(ClientStream {
            tcp: sys::dup_stream(&self.tcp)?,
            tls: self.tls.clone(),
        })
    }

    /// Appends what the peer sent to `buf`, waiting for it: `Ok(0)` at the
    /// end of its stream. With TLS the end is the peer's `close_notify`;
    /// TCP's end without it is an `UnexpectedEof` error (a cut-short
    /// read-to-close body must not pass for a whole one).
    pub async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        let Some(tls) = self.tls.clone() else {
            return recv(&self.tcp, buf).await;
        };
        let before = buf.len();
        while !tls.closed.get() {
            if tls.conn.borrow().wants_write() {
                tls.flush(&mut self.tcp).await?;
            }
            let mut cipher = BytesMut::new();
            if recv(&self.tcp, &mut cipher).await? == 0 {
                let cut = "closed without TLS close_notify";
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, cut));
            }
            tls.feed(&cipher, buf)?;
            if buf.len() > before {
                break;
            }
        }
        Ok(buf.len() - before)
    }

    /// Writes all of `data`.
    pub async fn write_all(&mut self, data: Bytes) -> io::Result<()> {
        self.write_batch(vec![data]).await.0
    }

    /// Writes every buffer of `batch` (one vectored write at a time when
    /// plain; as few records as fit when encrypted) and gives it back.
    pub async fn write_batch(&mut self, batch: Vec<Bytes>) -> (io::Result<()>, Vec<Bytes>) {
        let Some(tls) = self.tls.clone() else {
            return write_plain(&mut self.tcp, batch).await;
        };
        let res = tls.write(&mut self.tcp, &batch).await;
        (res, batch)
    }
}

impl AsRawFd for ClientStream {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp.as_raw_fd()
    }
}

impl Shared {
    /// Hands `cipher` to rustls, moving the plaintext it yields to `buf`.
    fn feed(&self, mut cipher: &[u8], buf: &mut BytesMut) -> io::Result<()> {
        let mut conn = self.conn.borrow_mut();
        while !cipher.is_empty() {
            if conn.read_tls(&mut cipher)? == 0 {
                break;
            }
            conn.process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let mut reader = conn.reader();
            loop {
                match reader.fill_buf() {
                    Ok([]) => {
                        self.closed.set(true);
                        return Ok(());
                    }
                    Ok(chunk) => {
                        let n = chunk.len();
                        buf.extend_from_slice(chunk);
                        reader.consume(n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // TCP's end without close_notify: the next read sees it.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Encrypts `bufs` and writes them, at most [`crate::tls::BUFFER_LIMIT`]
    /// of records at a time.
    async fn write(&self, tcp: &mut TcpStream, bufs: &[Bytes]) -> io::Result<()> {
        let (mut i, mut off) = advance_position(bufs, (0, 0), 0);
        while i < bufs.len() {
            let took = {
                let mut slices = Vec::with_capacity(MAX_SLICES.min(bufs.len() - i));
                slices.push(IoSlice::new(&bufs[i][off..]));
                let rest = bufs[i + 1..].iter().take(MAX_SLICES - 1);
                slices.extend(rest.map(|b| IoSlice::new(b)));
                let mut conn = self.conn.borrow_mut();
                io::Write::write_vectored(&mut conn.writer(), &slices)?
            };
            (i, off) = advance_position(bufs, (i, off), took);
            self.flush(tcp).await?;
        }
        Ok(())
    }

    /// Writes every record rustls holds, under the lock.
    async fn flush(&self, tcp: &mut TcpStream) -> io::Result<()> {
        let _held = self.lock().await;
        super::flush_records(&self.conn, tcp).await
    }

    /// Waits until no other task is writing records.
    async fn lock(&self) -> Held<'_> {
        poll_fn(|cx| {
            if self.writing.replace(true) {
                self.waiter.set(Some(cx.waker().clone()));
                return Poll::Pending;
            }
            Poll::Ready(Held(self))
        })
        .await
    }
}

/// The write lock; released when dropped (also when the holder's future
/// is dropped mid-write).
struct Held<'a>(&'a Shared);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.writing.set(false);
        if let Some(w) = self.0.waiter.take() {
            w.wake();
        }
    }
}

/// Readiness, then a nonblocking read of what the socket has.
async fn recv(tcp: &TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    let mut scratch = [0u8; READ_CHUNK];
    loop {
        match sys::recv_nonblocking(tcp.as_raw_fd(), &mut scratch) {
            Ok(n) => {
                buf.extend_from_slice(&scratch[..n]);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tcp.readable(false).await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Vectored writes until the whole batch is out.
async fn write_plain(tcp: &mut TcpStream, batch: Vec<Bytes>) -> (io::Result<()>, Vec<Bytes>) {
    let mut iov = IoVecs::new(batch);
    while iov.remaining() > 0 {
        let (res, back) = monoio::io::AsyncWriteRent::writev(tcp, iov).await;
        iov = back;
        match res {
            Ok(n) if n > 0 => iov.advance(n),
            Ok(_) => return (Err(io::ErrorKind::WriteZero.into()), iov.into_inner()),
            Err(e) => return (Err(e), iov.into_inner()),
        }
    }
    (Ok(()), iov.into_inner())
}
