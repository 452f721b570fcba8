//! Thin, checked wrappers over the few syscalls monoio does not offer.

use std::io;
use std::os::fd::RawFd;

/// Reads what the socket has without blocking: `Ok(0)` is end of stream,
/// `ErrorKind::WouldBlock` means nothing is there yet.
///
/// The wait for input comes from monoio (a one-byte read on a client's read
/// half, `readable()` on a whole stream); the read itself goes into a
/// per-worker scratch buffer so an idle connection owns no read buffer.
pub fn recv_nonblocking(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid, exclusively borrowed region of `buf.len()`
    // bytes for the duration of the call; recv writes at most that many.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `send(2)` without blocking (and without SIGPIPE): how many bytes the
/// socket took.
pub fn send_nonblocking(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    // SAFETY: `buf` is a valid region of `buf.len()` bytes for the duration
    // of the call; send only reads it.
    let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Sets the socket's send buffer (`SO_SNDBUF`: Linux doubles the
/// request), which turns the kernel's autotuning off for it.
pub fn set_send_buffer(fd: RawFd, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: `v` is a live c_int and its size is passed; the kernel only
    // reads it. An `fd` that is no longer a socket fails with an error.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// `shutdown(2)` both directions: wakes any pending read or write on the
/// socket with EOF/EPIPE, which is how deadlines end a connection's tasks.
/// Errors (already closed, not connected) are of no interest.
pub fn shutdown(fd: RawFd) {
    // SAFETY: shutdown takes no pointers; a stale or invalid fd yields
    // EBADF/ENOTCONN, never undefined behaviour. The hub only holds fds of
    // connections still in its table, so the fd cannot have been reused.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}

/// `shutdown(2)` of the write side only: our FIN goes out, reads go on.
pub fn shutdown_write(fd: RawFd) {
    // SAFETY: as in `shutdown`: no pointers, errors are harmless.
    unsafe {
        libc::shutdown(fd, libc::SHUT_WR);
    }
}

/// Raises the listen backlog of a bound listener (std uses 128, too small
/// for a burst of thousands of connects).
pub fn set_backlog(fd: RawFd, backlog: i32) -> io::Result<()> {
    // SAFETY: listen takes no pointers; calling it again on a listening
    // socket only updates the backlog.
    if unsafe { libc::listen(fd, backlog) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A second stream over `stream`'s socket (its fd `dup`ed): the reader and
/// the writer of a long-lived connection as two distinct monoio streams, so
/// neither is reached through the other (no `&` and `&mut` to one stream at
/// once) and a read that a timeout drops takes no byte from anyone else.
pub fn dup_stream(stream: &monoio::net::TcpStream) -> io::Result<monoio::net::TcpStream> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: dup takes no pointers; `stream`'s fd is open while borrowed.
    let fd = unsafe { libc::dup(stream.as_raw_fd()) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by dup: open, and owned by nobody else.
    let std = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    // O_NONBLOCK lives on the shared file description; set it regardless.
    std.set_nonblocking(true)?;
    monoio::net::TcpStream::from_std(std)
}

/// CPU time the process has used (user + system), in milliseconds.
pub fn cpu_time_ms() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole `rusage` into the pointer it is
    // given, which points at one; on failure it is left zeroed.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

/// The process's resident memory in bytes (`/proc/self/statm`; 0 where
/// it cannot be read).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = (statm.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
    pages * page
}
