//! Process and runtime set-up shared by the server and the load generator
//! (`corecast-bench`): the io_uring ring builder, driver detection, CPU
//! pinning, the descriptor limit and signals (SIGTERM/SIGINT, SIGHUP).
//!
//! Everything here runs before a monoio runtime exists (or builds it); no
//! protocol module imports this one.
//!
//! ```no_run
//! use corecast::runtime::{self, DriverKind};
//!
//! let cpu = runtime::first_allowed_cpu().unwrap_or(0);
//! runtime::pin_to_cpu(cpu)?;
//! let answer = match DriverKind::detect(false) {
//!     DriverKind::IoUring => runtime::uring_runtime_or_plain(true, 1024)?.block_on(async { 42 }),
//!     DriverKind::Legacy => runtime::legacy_runtime()?.block_on(async { 42 }),
//! };
//! assert_eq!(answer, 42);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use monoio::time::TimeDriver;
use monoio::{IoUringDriver, LegacyDriver, RuntimeBuilder};

/// A monoio runtime on io_uring, with timers.
pub type UringRuntime = monoio::Runtime<TimeDriver<IoUringDriver>>;
/// A monoio runtime on epoll, with timers.
pub type LegacyRuntime = monoio::Runtime<TimeDriver<LegacyDriver>>;

/// The I/O driver a worker runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverKind {
    /// io_uring.
    IoUring,
    /// epoll.
    Legacy,
}

impl DriverKind {
    /// io_uring when the kernel offers it and `force_legacy` is not set,
    /// epoll otherwise.
    pub fn detect(force_legacy: bool) -> DriverKind {
        if !force_legacy && monoio::utils::detect_uring() {
            DriverKind::IoUring
        } else {
            DriverKind::Legacy
        }
    }
}

/// An io_uring runtime with `entries` SQ entries and timers. With `defer`, completions
/// are not pushed to this thread as they happen — an inter-processor
/// interrupt and a task-work run per completion, paid partly by whichever
/// thread made the socket ready — but collected when the runtime next
/// waits for events (`IORING_SETUP_DEFER_TASKRUN`, which requires
/// `SINGLE_ISSUER`: only this thread touches the ring).
pub fn uring_runtime(defer: bool, entries: u32) -> io::Result<UringRuntime> {
    let mut urb = io_uring::IoUring::builder();
    if defer {
        urb.setup_single_issuer().setup_defer_taskrun();
    }
    RuntimeBuilder::<IoUringDriver>::new()
        .enable_timer()
        .with_entries(entries)
        .uring_builder(urb)
        .build()
}

/// [`uring_runtime`], retried without `defer` when the kernel refuses it
/// (DEFER_TASKRUN needs Linux 6.1).
pub fn uring_runtime_or_plain(defer: bool, entries: u32) -> io::Result<UringRuntime> {
    uring_runtime(defer, entries).or_else(|e| {
        if defer {
            uring_runtime(false, entries)
        } else {
            Err(e)
        }
    })
}

/// An epoll runtime with timers.
pub fn legacy_runtime() -> io::Result<LegacyRuntime> {
    RuntimeBuilder::<LegacyDriver>::new().enable_timer().build()
}

/// Pins the calling thread to `cpu`. Call it before the runtime is built,
/// so the ring and every allocation start on that CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    monoio::utils::bind_to_cpu_set([cpu])
        .map_err(|e| io::Error::other(format!("cannot pin to CPU {cpu}: {e:?}")))
}

/// The first CPU this process may run on.
pub fn first_allowed_cpu() -> Option<usize> {
    allowed_cpus().first().copied()
}

/// The CPUs the calling thread may run on, in ascending order (empty if
/// the kernel does not say).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set, and
    // sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// Raises the soft open-file limit to the hard limit; returns the new soft
/// limit. Every connection is a descriptor: a process that kept the
/// usual soft limit of 1,024 would turn connections away long before the
/// kernel or `--max-connections` does.
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

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNALLED.store(true, Ordering::SeqCst);
}

static RELOADS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_hangup(_: libc::c_int) {
    // Only an atomic add: async-signal-safe.
    RELOADS.fetch_add(1, Ordering::SeqCst);
}

/// Routes SIGTERM and SIGINT to [`signalled`] (a running
/// [`Server`](crate::Server) polls it and shuts down gracefully), and
/// SIGHUP to [`reloads`] (a running server with `--tls-cert` reads its
/// certificate files again).
pub fn install_signal_handlers() -> io::Result<()> {
    let handlers = [
        (libc::SIGTERM, on_signal as *const ()),
        (libc::SIGINT, on_signal as *const ()),
        (libc::SIGHUP, on_hangup as *const ()),
    ];
    for (sig, handler) in handlers {
        // SAFETY: both handlers are `extern "C" fn(c_int)` that perform
        // only an atomic operation, which is async-signal-safe.
        let prev = unsafe { libc::signal(sig, handler as libc::sighandler_t) };
        if prev == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// How many SIGHUPs arrived since [`install_signal_handlers`]: a worker
/// that saw a smaller number reloads (so every server in the process
/// does, once per signal or burst of signals).
pub fn reloads() -> u64 {
    RELOADS.load(Ordering::SeqCst)
}

/// Whether SIGTERM or SIGINT arrived since [`install_signal_handlers`].
pub fn signalled() -> bool {
    SIGNALLED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_runs_on_the_detected_driver() {
        let v = match DriverKind::detect(false) {
            DriverKind::IoUring => uring_runtime_or_plain(true, 64)
                .expect("ring")
                .block_on(async { 7 }),
            DriverKind::Legacy => legacy_runtime().expect("epoll").block_on(async { 7 }),
        };
        assert_eq!(v, 7);
        assert_eq!(DriverKind::detect(true), DriverKind::Legacy);
    }

    #[test]
    fn the_descriptor_limit_only_goes_up() {
        let first = raise_nofile_limit().expect("getrlimit");
        assert!(first >= 64, "soft limit {first}");
        assert_eq!(raise_nofile_limit().expect("again"), first);
        assert!(first_allowed_cpu().is_some());
    }
}
