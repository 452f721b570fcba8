//! An accepted socket, split into its halves at accept, and the few ways
//! the worker reads from one: a nonblocking receive through a scratch
//! buffer, and a lingering close after a final response.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use monoio::io::Splitable;
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};
use monoio::net::TcpStream;

use crate::server::sys;

/// An accepted socket, split at accept into its halves: two 8-byte handles
/// instead of the 80-byte `TcpStream` that the nested async state machines
/// of a connection would otherwise each carry a copy of.
pub struct Sock {
    pub(crate) rd: TcpOwnedReadHalf,
    pub(crate) wr: TcpOwnedWriteHalf,
}

impl Sock {
    /// Splits an accepted stream.
    pub fn new(stream: TcpStream) -> Sock {
        let (rd, wr) = stream.into_split();
        Sock { rd, wr }
    }

    /// The stream, for readiness, its fd and socket options.
    pub(crate) fn stream(&self) -> &TcpStream {
        read_stream(&self.rd)
    }
}

/// The shared stream behind a read half.
pub(crate) fn read_stream(rd: &TcpOwnedReadHalf) -> &TcpStream {
    // SAFETY: the read half only lends `&TcpStream` to `readable()`,
    // `as_raw_fd()` and `set_nodelay()`; the write half's operations only
    // clone the fd into the submitted op. monoio's `Split` contract declares
    // reads and writes of a TcpStream independent, and both halves live on
    // this one thread.
    unsafe { &*rd.0.get() }
}

/// Appends what the socket has to `buf` through `scratch`: `Ok(0)` at end
/// of stream. Tries the socket first and waits for readiness only when it
/// is empty.
pub(crate) async fn recv_into(
    stream: &TcpStream,
    scratch: &std::cell::RefCell<Box<[u8]>>,
    buf: &mut BytesMut,
) -> io::Result<usize> {
    loop {
        let res = {
            let mut scratch = scratch.borrow_mut();
            let res = sys::recv_nonblocking(stream.as_raw_fd(), &mut scratch);
            if let Ok(n) = res {
                buf.extend_from_slice(&scratch[..n]);
            }
            res
        };
        match res {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.readable(false).await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Closes gracefully after a final response to a request we did not read:
/// half-close, then drain what the client sent (bounded in bytes and
/// time), so the kernel sends FIN rather than RST and the client can read
/// the response.
pub(crate) async fn linger_close(stream: &TcpStream) {
    drain_close(stream, 64 << 10, Duration::from_millis(200)).await;
}

/// Most input drained after a protocol-error close ([`drain_close`]).
pub(crate) const PROTOCOL_DRAIN_BYTES: usize = 256 << 10;
/// Longest wait for the peer's end of stream after a protocol-error close.
pub(crate) const PROTOCOL_DRAIN_TIME: Duration = Duration::from_secs(1);

/// Half-closes (our FIN goes out after what is queued), then reads and
/// discards input until end of stream, `max_bytes`, or `max_time`. Closing
/// a socket with unread input makes the kernel send an RST and drop what
/// it has not sent yet (our final response or close frame); after this,
/// the close is graceful unless the peer sends more than the bounds allow.
pub(crate) async fn drain_close(stream: &TcpStream, max_bytes: usize, max_time: Duration) {
    sys::shutdown_write(stream.as_raw_fd());
    let mut scratch = [0u8; 4096];
    let deadline = Instant::now() + max_time;
    let mut drained = 0;
    while drained < max_bytes {
        match sys::recv_nonblocking(stream.as_raw_fd(), &mut scratch) {
            Ok(0) => return,
            Ok(n) => drained += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if monoio::time::timeout(left, stream.readable(false))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}
