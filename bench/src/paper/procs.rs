//! The processes `paper` runs: redis-server and corecast instances on free
//! ports (stopped when dropped), and `corecast-bench` children whose JSON
//! reports it reads. Every wait has a deadline.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::tls::TlsTarget;

/// How long a server has to come up (listen, and be ready).
const START_DEADLINE: Duration = Duration::from_secs(20);
/// How long a stopped server has to exit before SIGKILL.
const STOP_DEADLINE: Duration = Duration::from_secs(5);
/// Interval between two polls of a starting server.
const POLL: Duration = Duration::from_millis(20);

/// A child process, stopped (SIGTERM, then SIGKILL after a deadline) and
/// reaped on drop.
pub struct Proc {
    child: Child,
}

impl Proc {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn exited(&mut self) -> Option<String> {
        self.child
            .try_wait()
            .ok()
            .flatten()
            .map(|status| status.to_string())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited().is_some() {
            return;
        }
        // SAFETY: kill(2) on our own unreaped child's pid: the pid cannot
        // have been reused while the child is a zombie at worst.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_DEADLINE;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            thread::sleep(POLL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Highest CPU number a `cpu_set_t` holds.
pub const MAX_CPU: usize = libc::CPU_SETSIZE as usize - 1;

/// Prepares `cmd`'s child: it gets SIGTERM if `paper` dies (a killed run
/// leaves no server or Redis behind), and with `cpu` it runs on that CPU
/// only, from before its first instruction (so every thread it starts
/// inherits the mask). `cpu` must be at most [`MAX_CPU`] (checked by the
/// options), so the child cannot panic between fork and exec.
fn child_setup(cmd: &mut Command, cpu: Option<usize>) {
    assert!(cpu.is_none_or(|c| c <= MAX_CPU), "CPU number out of range");
    // SAFETY: the closure runs in the forked child before exec. It only
    // fills a stack-local cpu_set_t (index checked above) and makes two
    // syscalls: no allocation, no locks, async-signal-safe.
    // `last_os_error` reads errno only.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(cpu) = cpu {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                let size = std::mem::size_of::<libc::cpu_set_t>();
                if libc::sched_setaffinity(0, size, &set) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// A free TCP port on 127.0.0.1 (free when checked: a server started on
/// it may still lose a race, so callers retry).
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `redis-server` without persistence on a free port, pinned to `cpu`,
/// answering PING. Its output goes to `log`.
pub fn start_redis(bin: &str, cpu: usize, log: &Path) -> Result<(Proc, u16), String> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"]);
        child_setup(&mut cmd, Some(cpu));
        let mut proc = match spawn_logged(cmd, log) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(format!(
                    "`{bin}` not found: the C2/C3 setups need Redis \
                     (apt-get install redis-server, or --redis-bin PATH)"
                ))
            }
            Err(e) => return Err(format!("cannot run {bin}: {e}")),
        };
        let deadline = Instant::now() + START_DEADLINE;
        while Instant::now() < deadline {
            if let Some(status) = proc.exited() {
                last = format!("redis-server exited ({status}); see {}", log.display());
                break;
            }
            if redis_pong(port) {
                return Ok((proc, port));
            }
            thread::sleep(POLL);
        }
        if last.is_empty() {
            last = format!("redis-server did not answer PING within {START_DEADLINE:?}");
        }
    }
    Err(last)
}

fn redis_pong(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// A corecast instance on 127.0.0.1:0 pinned with `--cpu`, plus `args`;
/// returns once it listens and `/readyz` answers 200.
pub fn start_corecast(
    bin: &Path,
    cpu: usize,
    args: &[String],
    log: &Path,
    tls: Option<&TlsTarget>,
) -> Result<(Proc, SocketAddr), String> {
    let mut cmd = Command::new(bin);
    cmd.args(["--listen", "127.0.0.1:0", "--log-level", "info"])
        .args(["--cpu", &cpu.to_string()])
        .args(args);
    child_setup(&mut cmd, None);
    let mut proc =
        spawn_logged(cmd, log).map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let deadline = Instant::now() + START_DEADLINE;
    let fail = |what: &str| format!("corecast {what}; see {}", log.display());
    let addr = loop {
        if let Some(addr) = logged_addr(log) {
            break addr;
        }
        if let Some(status) = proc.exited() {
            return Err(fail(&format!("exited ({status})")));
        }
        if Instant::now() > deadline {
            return Err(fail("did not log its address"));
        }
        thread::sleep(POLL);
    };
    loop {
        if matches!(http_get_tls(addr, "/readyz", tls), Ok((200, _))) {
            return Ok((proc, addr));
        }
        if let Some(status) = proc.exited() {
            return Err(fail(&format!("exited ({status})")));
        }
        if Instant::now() > deadline {
            return Err(fail("did not become ready (/readyz)"));
        }
        thread::sleep(POLL);
    }
}

/// One instance of a baseline server: `sh -c CMD` pinned to `cpu`, with
/// `PORT` (a free port) and `env`; returns once `/healthz` answers 200.
pub fn start_baseline(
    cmd_line: &str,
    cpu: usize,
    env: &[(&str, String)],
    log: &Path,
    tls: Option<&TlsTarget>,
) -> Result<(Proc, SocketAddr), String> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port().map_err(|e| e.to_string())?;
        let mut cmd = Command::new("sh");
        cmd.args(["-c", cmd_line]).env("PORT", port.to_string());
        for (k, v) in env {
            cmd.env(k, v);
        }
        child_setup(&mut cmd, Some(cpu));
        let mut proc = spawn_logged(cmd, log).map_err(|e| format!("cannot run sh: {e}"))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if matches!(http_get_tls(addr, "/healthz", tls), Ok((200, _))) {
                return Ok((proc, addr));
            }
            if let Some(status) = proc.exited() {
                // Most likely the port was taken meanwhile: try another.
                last = format!("`{cmd_line}` exited ({status}); see {}", log.display());
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "`{cmd_line}` did not answer /healthz on port {port}; see {}",
                    log.display()
                ));
            }
            thread::sleep(POLL);
        }
    }
    Err(last)
}

/// Makes the Node.js reference runnable: `node` must exist, and its
/// pinned dependencies are installed (`npm ci`) when missing.
pub fn prepare_node(dir: &Path) -> Result<(), String> {
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Err(
            "`--baseline node` needs Node.js: `node` was not found on PATH \
             (apt-get install nodejs npm)"
                .into(),
        );
    }
    if dir.join("node_modules").is_dir() {
        return Ok(());
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--silent"])
        .current_dir(dir)
        .status()
        .map_err(|e| format!("cannot run npm ci in {}: {e}", dir.display()))?;
    if !status.success() {
        return Err(format!("npm ci in {} failed ({status})", dir.display()));
    }
    Ok(())
}

/// The `addr=` of the "listening" log line.
fn logged_addr(log: &Path) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .filter(|l| l.contains("listening"))
        .flat_map(|l| l.split_whitespace())
        .find_map(|f| f.strip_prefix("addr="))
        .and_then(|a| a.parse().ok())
}

/// Starts `cmd` with stdin closed and stdout + stderr appended to `log`.
fn spawn_logged(mut cmd: Command, log: &Path) -> io::Result<Proc> {
    let out = File::create(log)?;
    let err = out.try_clone()?;
    let child = cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn()?;
    Ok(Proc { child })
}

/// One `GET path` with `Connection: close`: status and body.
pub fn http_get(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    http_get_tls(addr, path, None)
}

/// [`http_get`], over TLS with `tls`.
pub fn http_get_tls(
    addr: SocketAddr,
    path: &str,
    tls: Option<&TlsTarget>,
) -> io::Result<(u16, String)> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_secs(3)))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut raw = Vec::new();
    let read = match tls {
        None => {
            let mut s = s;
            s.write_all(request.as_bytes())?;
            s.take(1 << 20).read_to_end(&mut raw)
        }
        Some(t) => {
            let mut s = crate::tls::blocking(t, s)?;
            s.write_all(request.as_bytes())?;
            s.take(1 << 20).read_to_end(&mut raw)
        }
    };
    // A server that closes without close_notify still sent its answer.
    if let Err(e) = read {
        if raw.is_empty() {
            return Err(e);
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no status line"))?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_string()))
}

/// A `corecast-bench` child run with `--json --quiet`; killed if dropped
/// before its report was read (e.g. when another part of a cell failed).
pub struct BenchRun {
    child: Option<Child>,
    args: Vec<String>,
    stdout: PathBuf,
    stderr: PathBuf,
    deadline: Instant,
}

impl BenchRun {
    /// Starts `exe args… --json --quiet`, its report to `log` with
    /// `.json`, its stderr to `log`. The run must end within `limit`.
    pub fn spawn(
        exe: &Path,
        args: Vec<String>,
        log: &Path,
        limit: Duration,
    ) -> Result<BenchRun, String> {
        let stdout = log.with_extension("json");
        let open = |p: &Path| File::create(p).map_err(|e| format!("{}: {e}", p.display()));
        let mut cmd = Command::new(exe);
        cmd.args(&args)
            .args(["--json", "--quiet"])
            .stdin(Stdio::null())
            .stdout(open(&stdout)?)
            .stderr(open(log)?);
        child_setup(&mut cmd, None);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        Ok(BenchRun {
            child: Some(child),
            args,
            stdout,
            stderr: log.to_path_buf(),
            deadline: Instant::now() + limit,
        })
    }

    /// Waits for the report, at most until the deadline (then the child
    /// is killed and the run is an error).
    pub fn report(mut self) -> Result<Value, String> {
        let mut child = self.child.take().expect("report is read once");
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < self.deadline => thread::sleep(POLL),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "corecast-bench {} did not finish in time; killed",
                        self.args.join(" ")
                    ));
                }
                Err(e) => return Err(format!("corecast-bench: {e}")),
            }
        };
        let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        if !status.success() {
            return Err(format!(
                "corecast-bench {} failed ({status}): {}",
                self.args.join(" "),
                err.trim()
            ));
        }
        let out = std::fs::read(&self.stdout).map_err(|e| format!("corecast-bench report: {e}"))?;
        serde_json::from_slice(&out).map_err(|e| format!("corecast-bench report: {e}"))
    }
}

impl Drop for BenchRun {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_gives_the_address() {
        let dir = std::env::temp_dir().join(format!("corecast-paper-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("server.log");
        std::fs::write(
            &log,
            "t level=warn msg=\"descriptor limit\" limit=1\n\
             t level=info msg=\"corecast listening\" addr=127.0.0.1:4567 driver=IoUring\n",
        )
        .unwrap();
        assert_eq!(logged_addr(&log), Some("127.0.0.1:4567".parse().unwrap()));
        std::fs::write(&log, "nothing yet").unwrap();
        assert_eq!(logged_addr(&log), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
