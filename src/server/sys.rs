//! Thin, checked wrappers over the few syscalls monoio does not offer.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// Reads what the socket has without blocking: `Ok(0)` is end of stream,
/// `ErrorKind::WouldBlock` means nothing is there yet.
///
/// Readiness comes from monoio (`readable()`); the read itself goes into a
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

/// The first CPU this process may run on.
pub fn first_allowed_cpu() -> Option<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set, and
    // sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        (0..libc::CPU_SETSIZE as usize).find(|&cpu| libc::CPU_ISSET(cpu, &set))
    }
}

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// Routes SIGTERM and SIGINT to [`signalled`]; workers poll it.
pub fn install_signal_handlers() -> io::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that performs only
        // an atomic store, which is async-signal-safe.
        let prev = unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
        if prev == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether SIGTERM or SIGINT arrived.
pub fn signalled() -> bool {
    SIGNALLED.load(Ordering::SeqCst)
}

/// Raises the soft open-file limit to the hard limit; returns the new soft
/// limit. Every connection is a descriptor: a server that kept the
/// usual soft limit of 1,024 would turn clients away long before the kernel
/// or `--max-connections` does.
pub fn raise_nofile_limit() -> io::Result<u64> {
    // SAFETY: `rlimit` is plain data; getrlimit/setrlimit read or write
    // exactly one `rlimit` through the pointer, which is valid for both.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(io::Error::last_os_error());
        }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(lim.rlim_cur)
    }
}
