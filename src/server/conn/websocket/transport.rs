//! The bytes under a WebSocket's frames, and every call the connection's
//! tasks make on them: [`ReadHalf::read`] and [`ReadHalf::read_or_quiet`]
//! (the reader), [`WriteHalf::write`] (the writer), [`ReadHalf::shutdown`]
//! and [`ReadHalf::drain_close`] (the close), [`park`] and [`resume`]
//! (handing the connection to the parked set as a bare fd and back), and
//! [`send_parked`] (the close echo of a parked connection).
//!
//! Two transports: plain TCP (thin calls into `conn::sock` and the
//! worker's scratch-buffer reads) and TLS (`server::tls::Session`: reads
//! that append plaintext to the frame buffer, a write that encrypts the
//! outbox's batch; the write half behind the session's lock, since rustls
//! output must reach the socket in order from either task). A TLS
//! connection parks with its session (rustls's state, no buffer) kept
//! beside the fd: [`park`] hands both over, [`resume`] takes both back.

use std::any::Any;
use std::future::Future;
use std::io;
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};

use crate::server::conn::sock::{
    drain_close, write_all_vectored, QuietWait, Sock, PROTOCOL_DRAIN_BYTES, PROTOCOL_DRAIN_TIME,
};
use crate::server::conn::stream::Stream;
use crate::server::sys;
use crate::server::tls::session::Session;
use crate::server::worker::Worker;

/// The reading side of a connection, and the socket's fd (for `recv`,
/// `shutdown` and the hub's deadline sweeps; owned by the halves).
pub struct ReadHalf {
    rd: TcpOwnedReadHalf,
    /// The socket's fd.
    pub fd: RawFd,
    tls: Option<Rc<Session>>,
}

/// The writing side of a connection.
pub enum WriteHalf {
    /// Plain TCP: the socket's write half.
    Plain(TcpOwnedWriteHalf),
    /// TLS: the session, which holds the write half.
    Tls(Rc<Session>),
}

/// Splits an accepted (or resumed) connection into its halves.
pub fn split(stream: Stream) -> (ReadHalf, WriteHalf) {
    let Stream {
        sock: Sock { rd, wr, fd },
        tls,
    } = stream;
    let Some(tls) = tls else {
        return (ReadHalf { rd, fd, tls: None }, WriteHalf::Plain(wr));
    };
    tls.own_write_half(wr);
    let rd = ReadHalf {
        rd,
        fd,
        tls: Some(tls.clone()),
    };
    (rd, WriteHalf::Tls(tls))
}

/// A plain or a TLS operation as one future type: the plain one inline
/// (the size of every reader's task stays as it was), the TLS one boxed.
pub enum Either<'a, P, T> {
    /// Plain TCP's future.
    Plain(P),
    /// TLS's future.
    Tls(Pin<Box<dyn Future<Output = T> + 'a>>),
}

impl<P: Future> Future for Either<'_, P, P::Output> {
    type Output = P::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<P::Output> {
        // SAFETY: structural pinning of the variant's field: it is never
        // moved out of the pinned enum, which is never moved either.
        match unsafe { self.get_unchecked_mut() } {
            Either::Plain(p) => unsafe { Pin::new_unchecked(p) }.poll(cx),
            Either::Tls(t) => t.as_mut().poll(cx),
        }
    }
}

impl ReadHalf {
    /// Appends what the peer sent to `buf`, waiting for it: `Ok(0)` at end
    /// of stream (see [`Worker::read_more`]).
    /// (The worker's future itself: no wrapper state in every reader.)
    pub fn read<'a>(
        &'a mut self,
        w: &'a Worker,
        buf: &'a mut BytesMut,
    ) -> impl Future<Output = io::Result<usize>> + 'a {
        match &self.tls {
            None => Either::Plain(w.read_more(&mut self.rd, self.fd, buf)),
            Some(tls) => Either::Tls(Box::pin(tls.read(w, (&mut self.rd, self.fd), buf, None))),
        }
    }

    /// Whether the connection can park (plain TCP: its state is the fd;
    /// TLS: its session too, once nothing is in flight).
    pub fn parkable(&self) -> bool {
        self.tls.as_ref().is_none_or(|t| t.parkable())
    }

    /// [`ReadHalf::read`] whose wait may end quietly (`Ok(None)`), with
    /// nothing taken from the socket, so the connection can park.
    pub fn read_or_quiet<'a>(
        &'a mut self,
        w: &'a Worker,
        buf: &'a mut BytesMut,
        wait: QuietWait<'a>,
    ) -> impl Future<Output = io::Result<Option<usize>>> + 'a {
        let (rd, fd) = (&mut self.rd, self.fd);
        match &self.tls {
            None => Either::Plain(w.read_more_or_quiet(rd, fd, buf, wait)),
            Some(tls) => Either::Tls(Box::pin(tls.read_or_quiet(w, (rd, fd), buf, wait))),
        }
    }

    /// Ends both directions at once: a pending read or write completes.
    pub fn shutdown(&self) {
        sys::shutdown(self.fd);
    }

    /// After a protocol error: our close frame is queued in the kernel;
    /// closing with the peer's unread bytes would send an RST and lose it,
    /// so half-close and drain (bounded), then close. Boxed: its buffer
    /// would otherwise enlarge every connection's task.
    pub fn drain_close(mut self) -> Pin<Box<dyn Future<Output = ()>>> {
        Box::pin(async move {
            if let Some(tls) = &self.tls {
                // The writer is done: the lock is free.
                tls.close_notify();
                let _ = tls.lock().await.flush().await;
            }
            drain_close(
                &mut self.rd,
                self.fd,
                PROTOCOL_DRAIN_BYTES,
                PROTOCOL_DRAIN_TIME,
            )
            .await
        })
    }
}

impl WriteHalf {
    /// Writes a batch of frames (one vectored write where it can);
    /// `progressed` runs after each partial write. Hands the frames back.
    pub fn write<'a>(
        &'a mut self,
        batch: Vec<Bytes>,
        progressed: impl FnMut() + 'a,
    ) -> impl Future<Output = (io::Result<()>, Vec<Bytes>)> + 'a {
        match self {
            WriteHalf::Plain(wr) => Either::Plain(write_all_vectored(wr, batch, progressed)),
            WriteHalf::Tls(tls) => Either::Tls(Box::pin(async move {
                let mut wr = tls.lock().await;
                let res = tls.write(wr.half(), &batch, progressed).await;
                (res, batch)
            })),
        }
    }
}

/// What the parked set keeps of a connection: its bare fd, which it owns
/// from here, and its TLS session, if any.
pub use crate::server::conn::park::Kept as Parked;

/// The connection as a bare fd (and its TLS session) for the parked set.
pub fn park(rd: ReadHalf, wr: WriteHalf) -> Parked {
    let (wr, kept) = match wr {
        WriteHalf::Plain(wr) => (wr, None),
        WriteHalf::Tls(tls) => {
            // Parking waits for the writer: nobody holds the lock.
            let wr = tls
                .take_write_half()
                .expect("the write half, writer stopped");
            (wr, Some(tls as Rc<dyn Any>))
        }
    };
    let Ok(stream) = rd.rd.reunite(wr) else {
        unreachable!("the halves of one socket");
    };
    (stream.into_raw_fd(), kept)
}

/// A parked connection as a socket again (with its TLS session); on error
/// the fd is closed.
pub fn resume((fd, kept): Parked) -> io::Result<Stream> {
    // SAFETY: `fd` came out of the parked set, which owned it since
    // `into_raw_fd` (in [`park`]): it is open and nobody else owns or
    // closes it.
    let std = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    let sock = Sock::resumed(monoio::net::TcpStream::from_std(std)?);
    let tls = kept.and_then(|k| k.downcast::<Session>().ok());
    Ok(Stream { sock, tls })
}

/// Sends `frame` on a parked connection's fd without waiting: the bytes
/// the socket took (0 on any error).
pub fn send_parked(fd: RawFd, frame: &[u8]) -> usize {
    sys::send_nonblocking(fd, frame).unwrap_or(0)
}

/// Reads what a parked connection's fd has, without waiting (see
/// [`Worker::read_parked`]).
pub fn read_parked(w: &Worker, fd: RawFd, buf: &mut BytesMut) -> io::Result<usize> {
    w.read_parked(fd, buf)
}

/// Closes a parked connection's fd (which the parked set handed over).
pub fn close_parked(fd: RawFd) {
    // SAFETY: `fd` came out of the parked set, which owned it since
    // `into_raw_fd`; nobody else owns it, and it is closed once, here.
    unsafe { libc::close(fd) };
}
