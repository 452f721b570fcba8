//! The bytes under a WebSocket's frames, and every call the connection's
//! tasks make on them: [`ReadHalf::read`] and [`ReadHalf::read_or_quiet`]
//! (the reader), [`WriteHalf::write`] (the writer), [`ReadHalf::shutdown`]
//! and [`ReadHalf::drain_close`] (the close), [`park`] and [`resume`]
//! (handing the connection to the parked set as a bare fd and back), and
//! [`send_parked`] (the close echo of a parked connection).
//!
//! Today there is one transport, plain TCP, and these are thin calls into
//! `conn::sock` and the worker's scratch-buffer reads. A transport that
//! carries the same frames over other bytes (TLS) implements these calls
//! — reads that append plaintext to the frame buffer, a write that takes
//! the outbox's batch of frames — and the rest of the connection stays as
//! it is; one that cannot park (its session state is more than an fd)
//! keeps `--park-after` off for its connections.

use std::future::Future;
use std::io;
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};

use crate::server::conn::sock::{
    drain_close, write_all_vectored, QuietWait, Sock, PROTOCOL_DRAIN_BYTES, PROTOCOL_DRAIN_TIME,
};
use crate::server::sys;
use crate::server::worker::Worker;

/// The reading side of a connection, and the socket's fd (for `recv`,
/// `shutdown` and the hub's deadline sweeps; owned by the halves).
pub struct ReadHalf {
    rd: TcpOwnedReadHalf,
    /// The socket's fd.
    pub fd: RawFd,
}

/// The writing side of a connection.
pub struct WriteHalf {
    wr: TcpOwnedWriteHalf,
}

/// Splits an accepted (or resumed) socket into the connection's halves.
pub fn split(sock: Sock) -> (ReadHalf, WriteHalf) {
    let Sock { rd, wr, fd } = sock;
    (ReadHalf { rd, fd }, WriteHalf { wr })
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
        w.read_more(&mut self.rd, self.fd, buf)
    }

    /// [`ReadHalf::read`] whose wait may end quietly (`Ok(None)`), with
    /// nothing taken from the socket, so the connection can park.
    pub fn read_or_quiet<'a>(
        &'a mut self,
        w: &'a Worker,
        buf: &'a mut BytesMut,
        wait: QuietWait<'a>,
    ) -> impl Future<Output = io::Result<Option<usize>>> + 'a {
        w.read_more_or_quiet(&mut self.rd, self.fd, buf, wait)
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
        write_all_vectored(&mut self.wr, batch, progressed)
    }
}

/// The connection as a bare fd for the parked set, which owns it from here.
pub fn park(rd: ReadHalf, wr: WriteHalf) -> RawFd {
    let Ok(stream) = rd.rd.reunite(wr.wr) else {
        unreachable!("the halves of one socket");
    };
    stream.into_raw_fd()
}

/// A parked connection's fd as a socket again; on error the fd is closed.
pub fn resume(fd: RawFd) -> io::Result<Sock> {
    // SAFETY: `fd` came out of the parked set, which owned it since
    // `into_raw_fd` (in [`park`]): it is open and nobody else owns or
    // closes it.
    let std = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    monoio::net::TcpStream::from_std(std).map(Sock::resumed)
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
