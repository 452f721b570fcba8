//! An accepted socket, split into its halves at accept, and the few ways
//! the worker reads from one: a nonblocking receive through a scratch
//! buffer, and a lingering close after a final response.
//!
//! Soundness: nothing here makes a `&TcpStream` out of a half. The halves
//! are used only through monoio's own safe API (`AsyncReadRent` on the read
//! half, `AsyncWriteRent` on the write half); the socket's raw fd, taken
//! once at accept, serves `recv(2)`, `shutdown(2)` and `setsockopt(2)`,
//! which take no Rust reference to the stream.
//!
//! Waiting for input is a read of one byte into an owned buffer (an
//! io_uring read, or readiness then `read` on the legacy driver); the rest
//! is then drained without blocking through the worker's scratch buffer,
//! so an idle connection still owns no read buffer. The caveat of a read as
//! the wait: a pending read that is dropped may have taken a byte that is
//! then lost. No client reader is dropped while its connection lives on:
//! deadlines (HTTP head timeout, idle and token sweeps, shutdown) end a
//! connection with `shutdown(2)`, which completes the pending read with end
//! of stream instead of dropping it; the WebSocket reader ends only when a
//! read returned; and the one read dropped by a timeout, in
//! [`drain_close`], discards its input anyway because the socket is being
//! closed.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, Splitable};
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};
use monoio::net::TcpStream;

use crate::server::iovec::IoVecs;
use crate::server::sys;

/// An accepted socket, split at accept into its halves: two 8-byte handles
/// instead of the 80-byte `TcpStream` that the nested async state machines
/// of a connection would otherwise each carry a copy of, plus its fd.
pub struct Sock {
    pub(crate) rd: TcpOwnedReadHalf,
    pub(crate) wr: TcpOwnedWriteHalf,
    /// The socket's fd, owned by the halves (valid while they live): for
    /// `recv`/`shutdown` and the hub's deadline sweeps.
    pub(crate) fd: RawFd,
}

impl Sock {
    /// Sets `TCP_NODELAY` (we batch writes ourselves) and splits an accepted
    /// stream.
    pub fn new(stream: TcpStream) -> Sock {
        let _ = stream.set_nodelay(true);
        let fd = stream.as_raw_fd();
        let (rd, wr) = stream.into_split();
        Sock { rd, wr, fd }
    }

    /// Splits a parked connection's stream (its options are already set).
    pub fn resumed(stream: TcpStream) -> Sock {
        let fd = stream.as_raw_fd();
        let (rd, wr) = stream.into_split();
        Sock { rd, wr, fd }
    }
}

/// Waits for input on `rd` by reading one byte: `None` at end of stream.
async fn read_one(rd: &mut TcpOwnedReadHalf) -> io::Result<Option<u8>> {
    let (res, byte) = rd.read(Box::new([0u8; 1])).await;
    Ok((res? > 0).then_some(byte[0]))
}

/// Appends what the socket has to `buf` through `scratch`: `Ok(0)` at end
/// of stream. Tries the socket first and waits (a one-byte read on `rd`,
/// see the module docs) only when it is empty. `fd` is `rd`'s socket.
pub(crate) async fn recv_into(
    rd: &mut TcpOwnedReadHalf,
    fd: RawFd,
    scratch: &std::cell::RefCell<Box<[u8]>>,
    buf: &mut BytesMut,
) -> io::Result<usize> {
    let got = recv_or_quiet(rd, fd, scratch, buf, None).await?;
    Ok(got.unwrap_or(0))
}

/// When a wait for input may end quietly: after `after` without input,
/// if `quiet()` then says so (`None`); `Some(d)`: check again after `d`.
pub(crate) type QuietWait<'a> = (Duration, &'a dyn Fn() -> Option<Duration>);

/// As [`recv_into`], but with `quiet` a wait that sees no input for its
/// duration ends with `Ok(None)`: the pending read is cancelled and waited
/// for (a byte it took is kept), so nothing was taken from the socket and
/// it can be handed to another waiter (parking).
pub(crate) async fn recv_or_quiet(
    rd: &mut TcpOwnedReadHalf,
    fd: RawFd,
    scratch: &std::cell::RefCell<Box<[u8]>>,
    buf: &mut BytesMut,
    quiet: Option<QuietWait<'_>>,
) -> io::Result<Option<usize>> {
    // The byte the wait took, already in `buf`.
    let mut got = 0;
    loop {
        let res = {
            let mut scratch = scratch.borrow_mut();
            let res = sys::recv_nonblocking(fd, &mut scratch);
            if let Ok(n) = res {
                buf.extend_from_slice(&scratch[..n]);
            }
            res
        };
        let waited = match res {
            Ok(n) => return Ok(Some(got + n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // End of stream or an error after the byte: the next call sees it.
            Err(_) if got > 0 => return Ok(Some(got)),
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            Err(_) => match quiet {
                None => read_one(rd).await?.map_or(Waited::End, Waited::Byte),
                // Boxed: its timer and canceller would otherwise enlarge
                // every reader's task.
                Some(q) => Box::pin(read_one_or_quiet(rd, q)).await?,
            },
        };
        match waited {
            Waited::End => return Ok(Some(0)),
            Waited::Quiet => return Ok(None),
            Waited::Byte(byte) => {
                buf.extend_from_slice(&[byte]);
                got = 1;
            }
        }
    }
}

/// What a wait for input came to.
enum Waited {
    Byte(u8),
    End,
    Quiet,
}

/// [`read_one`] that gives up once it saw no input for `after` and
/// `quiet()` agrees: the read is then cancelled and its completion awaited,
/// so a byte that raced the cancel is returned, not lost.
async fn read_one_or_quiet(
    rd: &mut TcpOwnedReadHalf,
    (after, quiet): QuietWait<'_>,
) -> io::Result<Waited> {
    use monoio::io::{CancelableAsyncReadRent, Canceller};
    use std::future::{poll_fn, Future};
    use std::task::Poll;
    let canceller = Canceller::new();
    let mut read = std::pin::pin!(rd.cancelable_read(Box::new([0u8; 1]), canceller.handle()));
    let mut timer = std::pin::pin!(monoio::time::sleep(after));
    let first = poll_fn(|cx| {
        if let Poll::Ready(r) = read.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        while timer.as_mut().poll(cx).is_ready() {
            let Some(again) = quiet() else {
                return Poll::Ready(None);
            };
            timer.as_mut().reset(monoio::time::Instant::now() + again);
        }
        Poll::Pending
    })
    .await;
    let (res, byte) = match first {
        Some(done) => done,
        None => {
            let _ = canceller.cancel();
            read.await
        }
    };
    match res {
        Ok(0) => Ok(Waited::End),
        Ok(_) => Ok(Waited::Byte(byte[0])),
        Err(e) if e.raw_os_error() == Some(libc::ECANCELED) => Ok(Waited::Quiet),
        Err(e) => Err(e),
    }
}

/// Writes a short answer (the `101`): straight to the socket with one
/// nonblocking `send` — a fresh socket's buffer takes it whole, with no
/// runtime op or wake-up — and whatever it did not take through the
/// runtime.
pub(crate) async fn write_small(sock: &mut Sock, mut bytes: Vec<u8>) -> io::Result<()> {
    let sent = match sys::send_nonblocking(sock.fd, &bytes) {
        Ok(n) => n,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            0
        }
        Err(e) => return Err(e),
    };
    if sent == bytes.len() {
        return Ok(());
    }
    bytes.drain(..sent);
    let (res, _) = sock.wr.write_all(bytes).await;
    res.map(|_| ())
}

/// Closes gracefully after a final response to a request we did not read:
/// half-close, then drain what the client sent (bounded in bytes and
/// time), so the kernel sends FIN rather than RST and the client can read
/// the response.
pub(crate) async fn linger_close(sock: &mut Sock) {
    drain_close(&mut sock.rd, sock.fd, 64 << 10, Duration::from_millis(200)).await;
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
/// `fd` is `rd`'s socket.
pub(crate) async fn drain_close(
    rd: &mut TcpOwnedReadHalf,
    fd: RawFd,
    max_bytes: usize,
    max_time: Duration,
) {
    sys::shutdown_write(fd);
    let mut scratch = [0u8; 4096];
    let deadline = Instant::now() + max_time;
    let mut drained = 0;
    while drained < max_bytes {
        match sys::recv_nonblocking(fd, &mut scratch) {
            Ok(0) => return,
            Ok(n) => drained += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                match monoio::time::timeout(left, read_one(rd)).await {
                    Ok(Ok(Some(_))) => drained += 1,
                    Ok(Ok(None) | Err(_)) => return,
                    Err(_) => {
                        // The timed-out read was dropped, not cancelled: on
                        // io_uring it stays in flight and holds the socket
                        // open past our close. Shutting the read side down
                        // completes it (its byte, if any, was to be
                        // discarded anyway).
                        sys::shutdown(fd);
                        return;
                    }
                }
            }
            Err(_) => return,
        }
    }
}

/// Largest batch of several frames copied into one buffer to go out as
/// a send rather than a vectored write. The copy lives while its write is
/// in flight — for a reader that stalls, until it reads — outside the
/// shared frames the outbound budget counts; a connection has one write
/// in flight at most, so this bounds what the copy adds per connection.
const SEND_COPY_MAX: usize = 2 * 1024;

/// Writes every byte of `bufs`, resubmitting after short writes, and gives
/// them back (for the memory budget, `Hub::release`); calls
/// `progressed` after each write that accepted bytes (a batch may take
/// long to write to a slow reader; it is slow only when no byte goes).
pub(crate) async fn write_all_vectored(
    wr: &mut TcpOwnedWriteHalf,
    bufs: Vec<Bytes>,
    mut progressed: impl FnMut(),
) -> (io::Result<()>, Vec<Bytes>) {
    let mut iov = IoVecs::new(bufs);
    while iov.remaining() > 0 {
        // As one buffer, a send (IORING_OP_SEND) goes straight to the
        // socket, where a writev takes the kernel's generic file-write
        // path (per-op file flags, kiocb completion): ~6 % of the
        // server's CPU in a 1,000-subscriber fan-out, where most batches
        // are one frame.
        let res = match iov.contiguous(SEND_COPY_MAX) {
            Some(one) => wr.write(one).await.0,
            None => {
                let (res, back) = wr.writev(iov).await;
                iov = back;
                res
            }
        };
        match res {
            Ok(0) => return (Err(io::ErrorKind::WriteZero.into()), iov.into_all()),
            Ok(n) => {
                iov.advance(n);
                if iov.remaining() > 0 {
                    progressed();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (Err(e), iov.into_all()),
        }
    }
    (Ok(()), iov.into_all())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn frame(len: usize, tag: u8) -> Bytes {
        (0..len).map(|i| tag.wrapping_add(i as u8)).collect()
    }

    /// Batches on either side of the copy bound — one frame, frames copied
    /// into one send, frames written vectored, one large frame — to a
    /// socket that is full at first: every byte arrives, in order, and
    /// each batch's frames come back untouched (for the outbound budget).
    #[test]
    fn batches_on_either_side_of_the_copy_bound_arrive_whole_and_in_order() {
        let copied = vec![frame(700, 2), frame(700, 3), frame(600, 4)];
        let vectored = vec![frame(1500, 5), frame(1500, 6)];
        assert!(copied.iter().map(Bytes::len).sum::<usize>() <= SEND_COPY_MAX);
        assert!(vectored.iter().map(Bytes::len).sum::<usize>() > SEND_COPY_MAX);
        let batches = [
            vec![frame(100, 1)],
            copied,
            vectored,
            vec![frame(200_000, 7)],
        ];
        let expected: Vec<u8> = batches.iter().flatten().flat_map(|b| b.to_vec()).collect();
        let mut rt = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .enable_timer()
            .build()
            .expect("io_uring (this machine and CI have it)");
        rt.block_on(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().unwrap();
            let mut sock = Sock::new(TcpStream::from_std(server).unwrap());
            let mut filled = 0;
            while let Ok(n) = sys::send_nonblocking(sock.fd, &[b'x'; 65536]) {
                filled += n;
            }
            let total = filled + expected.len();
            let reader = std::thread::spawn(move || {
                let mut got = vec![0u8; total];
                client.read_exact(&mut got).unwrap();
                got
            });
            for batch in &batches {
                let (res, back) = write_all_vectored(&mut sock.wr, batch.clone(), || {}).await;
                res.unwrap();
                assert_eq!(&back, batch);
            }
            let got = reader.join().unwrap();
            assert!(got[..filled].iter().all(|&b| b == b'x'));
            assert_eq!(&got[filled..], &expected[..]);
        });
    }

    /// A socket whose buffer cannot take the whole answer: the rest goes
    /// through the runtime, in order, once the peer reads.
    #[test]
    fn write_small_finishes_through_the_runtime_when_the_socket_is_full() {
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().unwrap();
            server.set_nonblocking(true).unwrap();
            let mut sock = Sock::new(TcpStream::from_std(server).unwrap());
            // Fill the socket (and the peer's receive buffer) until it refuses.
            let mut filled = 0;
            while let Ok(n) = sys::send_nonblocking(sock.fd, &[b'x'; 65536]) {
                filled += n;
            }
            let answer: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
            let reader = std::thread::spawn(move || {
                let mut got = vec![0u8; filled + 200_000];
                client.read_exact(&mut got).unwrap();
                got
            });
            write_small(&mut sock, answer.clone()).await.unwrap();
            let got = reader.join().unwrap();
            assert!(got[..filled].iter().all(|&b| b == b'x'));
            assert_eq!(&got[filled..], &answer[..]);
        });
    }
}
