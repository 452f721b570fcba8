//! The syscalls the generator needs that std and monoio do not offer:
//! bind-before-connect, nonblocking `recvmsg` with kernel receive
//! timestamps, resource limits and usage, and `/proc` sampling.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `SO_TIMESTAMPING` (`SO_TIMESTAMPING_OLD` in asm-generic/socket.h; the
/// libc crate does not export it for gnu targets). On 64-bit targets the
/// old and new layouts are the same three 64-bit `timespec`s.
const SO_TIMESTAMPING: libc::c_int = 37;
/// The control message carrying the timestamps has the option's number.
const SCM_TIMESTAMPING: libc::c_int = SO_TIMESTAMPING;

/// Shared with the server binary.
pub use corecast::runtime::raise_nofile_limit;

/// Starts a nonblocking TCP connect to `dst`, first binding to `src` (port
/// chosen at connect time) if given. The connect is usually still in
/// progress on return: wait for writability, then [`take_socket_error`].
pub fn start_connect(dst: SocketAddr, src: Option<Ipv4Addr>) -> io::Result<std::net::TcpStream> {
    let family = match dst {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket takes no pointers.
    let raw = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if let Some(ip) = src {
        // Without this, bind(ip, 0) reserves a port for every destination
        // and runs out at the ephemeral range; with it the kernel picks the
        // port at connect time, per 4-tuple.
        set_int_opt(raw, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)?;
        sys_bind(raw, SocketAddr::from((ip, 0)))?;
    }
    let (addr, len) = sockaddr(dst);
    // SAFETY: `addr` is a sockaddr_storage holding a valid address of
    // `len` bytes for this family.
    let rc = unsafe { libc::connect(raw, (&addr as *const libc::sockaddr_storage).cast(), len) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(err);
        }
    }
    Ok(std::net::TcpStream::from(fd))
}

fn sys_bind(fd: RawFd, at: SocketAddr) -> io::Result<()> {
    let (addr, len) = sockaddr(at);
    // SAFETY: as for connect above.
    if unsafe { libc::bind(fd, (&addr as *const libc::sockaddr_storage).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data for which all-zero is valid.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for every
            // sockaddr type, so writing a sockaddr_in at its start is valid.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn set_int_opt(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: the pointer and length describe one live `c_int`.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The pending error of a socket (`SO_ERROR`), which is how a nonblocking
/// connect reports refusal or timeout once the socket turns writable.
pub fn take_socket_error(fd: RawFd) -> io::Result<()> {
    let mut err: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the pointers describe one live `c_int` and its length.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err));
    }
    Ok(())
}

/// Asks the kernel to stamp every received segment with CLOCK_REALTIME in
/// software (when it enters the network stack) and to report the stamps on
/// `recvmsg`.
pub fn enable_rx_timestamps(fd: RawFd) -> io::Result<()> {
    let flags = libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
    set_int_opt(fd, libc::SOL_SOCKET, SO_TIMESTAMPING, flags as libc::c_int)
}

/// Room for one `SCM_TIMESTAMPING` message (a `cmsghdr` + 3 `timespec`s)
/// and then some; `u64`s keep it aligned for `cmsghdr`.
type CmsgBuf = [u64; 16];

/// Reads what the socket holds without blocking, like `recv(MSG_DONTWAIT)`,
/// and returns the kernel's software receive timestamp (ns since the
/// epoch) when one came with the data. For TCP the stamp is that of the
/// last segment the call read.
pub fn recv_timestamped(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf: CmsgBuf = [0; 16];
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<CmsgBuf>();
    // SAFETY: `msg` points at one iovec covering `buf` (exclusively borrowed
    // for the call) and at `cbuf` with its true length; recvmsg writes
    // within those bounds only.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, rx_timestamp(&msg)))
}

/// The software timestamp in the control messages of `msg`, if any.
fn rx_timestamp(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: `msg` was filled by recvmsg, so its control pointer and length
    // describe initialised control messages inside our buffer; the CMSG_*
    // helpers stay within `msg_controllen`, and each SCM_TIMESTAMPING
    // payload is three `timespec`s, read unaligned in case the payload
    // offset is not 8-aligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            let h = &*cmsg;
            if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == SCM_TIMESTAMPING {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                if ts.tv_sec != 0 || ts.tv_nsec != 0 {
                    return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

/// `send(MSG_DONTWAIT | MSG_NOSIGNAL)`: writes what fits now.
pub fn send_nonblocking(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid region of `buf.len()` bytes for the call.
    let n = unsafe {
        libc::send(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Waits until `fd` is writable or `timeout` passes; true if writable.
pub fn wait_writable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd, count 1.
    match unsafe { libc::poll(&mut pfd, 1, ms) } {
        n if n < 0 => Err(io::Error::last_os_error()),
        0 => Ok(false),
        _ => Ok(true),
    }
}

/// Lets this thread's sleeps end within `ns` of their deadline (the default
/// slack is 50 µs), so a schedule of sub-millisecond intervals holds.
pub fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument, no pointers.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0);
    }
}

/// Makes the calling thread real-time (SCHED_FIFO, lowest priority), so a
/// wake-up preempts the receiving thread on the same CPU at once. Returns
/// false where that is not permitted.
pub fn make_thread_realtime() -> bool {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a valid sched_param; 0 is the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Busy and total time so far, in clock ticks, of all CPUs together
/// (first) and then of each CPU, from the `cpu` lines of /proc/stat (user
/// nice system idle iowait irq softirq steal ...). Busy excludes idle and
/// iowait.
pub fn cpu_ticks() -> io::Result<Vec<(u64, u64)>> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let v: Vec<_> = stat
        .lines()
        .take_while(|l| l.starts_with("cpu"))
        .filter_map(parse_cpu_line)
        .collect();
    if v.is_empty() {
        return Err(io::Error::other("bad /proc/stat"));
    }
    Ok(v)
}

fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let total: u64 = fields.iter().sum();
    let idle = fields.get(3)? + fields.get(4)?;
    Some((total - idle, total))
}

/// Clock ticks per second (`_SC_CLK_TCK`).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf takes no pointers.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64
}

/// CLOCK_REALTIME in nanoseconds since the epoch (the clock the kernel
/// receive timestamps use).
#[inline]
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// CPU time (user + system) this process has used so far.
pub fn process_cpu_time() -> Duration {
    // SAFETY: rusage is plain data; getrusage writes exactly one.
    let ru = unsafe {
        let mut ru: libc::rusage = zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Resident set size of process `pid` in KiB (`VmRSS` of /proc/PID/status).
pub fn rss_kib(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_vmrss(&status).ok_or_else(|| io::Error::other("no VmRSS in /proc/PID/status"))
}

fn parse_vmrss(status: &str) -> Option<u64> {
    status_kib(status, "VmRSS:")
}

/// Anonymous resident memory of process `pid` in KiB (`RssAnon`): the
/// heap and stacks, without the code and data pages mapped from files,
/// which the kernel may page out and back in at any time (e.g. DAMON's
/// proactive reclaim) and which connections do not own.
pub fn rss_anon_kib(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status_kib(&status, "RssAnon:")
        .ok_or_else(|| io::Error::other("no RssAnon in /proc/PID/status"))
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time (utime + stime) process `pid` has used, from /proc/PID/stat.
pub fn process_cpu_time_of(pid: u32) -> io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_stat_ticks(&stat).ok_or_else(|| io::Error::other("bad /proc/PID/stat"))?;
    let hz = clock_ticks_per_second();
    Ok(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// utime + stime (fields 14 and 15) of a /proc/PID/stat line. The command
/// name (field 2) may hold spaces and parentheses, so fields are counted
/// after its last `)`.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = after.split_whitespace().skip(11); // fields 3..=13
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_parsers() {
        let status = "Name:\tcorecast\nVmPeak:\t  100 kB\nVmRSS:\t   5120 kB\nRssAnon:\t 700 kB\n";
        assert_eq!(status_kib(status, "RssAnon:"), Some(700));
        assert_eq!(parse_vmrss(status), Some(5120));
        let stat = "123 (core cast) S 1 2 3 4 5 6 7 8 9 10 250 17 0 0 20";
        assert_eq!(parse_stat_ticks(stat), Some(267));
        assert_eq!(parse_stat_ticks("garbage"), None);
        assert_eq!(
            parse_cpu_line("cpu  100 5 50 1000 20 1 2 3 0 0"),
            Some((161, 1181))
        );
        assert_eq!(parse_cpu_line("cpu0 1 2 x"), None);
        let all = cpu_ticks().unwrap();
        assert!(all.len() >= 2, "aggregate and at least one CPU");
    }

    #[test]
    fn own_process_is_measurable() {
        let pid = std::process::id();
        assert!(rss_kib(pid).unwrap() > 0);
        assert!(process_cpu_time_of(pid).is_ok());
        assert!(realtime_ns() > 1_600_000_000_000_000_000);
    }

    #[test]
    fn timestamps_arrive_with_received_data() {
        use std::io::Write as _;
        use std::os::fd::AsRawFd as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        enable_rx_timestamps(server.as_raw_fd()).unwrap();
        server.set_nonblocking(false).unwrap();
        // The kernel turns receive timestamping on through a deferred
        // static-key update the first time any socket asks for it, so the
        // first segments may arrive unstamped: resend until one is stamped
        // (bounded), as the load generator's warm-up does.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let (before, ts) = loop {
            let before = realtime_ns();
            client.write_all(b"hello").unwrap();
            let mut buf = [0u8; 16];
            let (mut n, mut ts) = (0, None);
            // MSG_DONTWAIT may run ahead of loopback delivery: wait for
            // readability with a blocking peek first.
            while n == 0 {
                let _ = server.peek(&mut buf);
                (n, ts) = recv_timestamped(server.as_raw_fd(), &mut buf).unwrap();
            }
            assert_eq!(&buf[..n], b"hello");
            if let Some(ts) = ts {
                break (before, ts);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "SO_TIMESTAMPING never delivered a stamp"
            );
        };
        assert!(ts >= before && ts <= realtime_ns(), "{before} {ts}");
    }
}
