//! Resource exhaustion and leaks, against the real `corecast` binary in its
//! own process (its own descriptor limit and RSS): running out of file
//! descriptors, and 10,000 connect/disconnect cycles.

mod common;

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use common::*;
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

/// `nofile`: (soft, hard) RLIMIT_NOFILE of the child.
fn spawn(args: &[&str], nofile: Option<(u64, u64)>) -> BinServer {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_corecast"));
    cmd.args(["--listen", "127.0.0.1:0", "--log-level", "info"])
        .args(args);
    if let Some((soft, hard)) = nofile {
        // SAFETY: runs in the forked child before exec; setrlimit is
        // async-signal-safe and touches only the child's own limits.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    BinServer::start(cmd)
}

/// A field of `/proc/{pid}/status` in KiB (`VmRSS`, `RssAnon`, ...).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// "Max open files" soft and hard limits of a process.
fn nofile_of(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("proc limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files line");
    let mut nums = line.split_whitespace().filter_map(|w| w.parse().ok());
    (nums.next().expect("soft"), nums.next().expect("hard"))
}

#[test]
fn the_binary_raises_its_soft_descriptor_limit_to_the_hard_one() {
    // A typical login shell's 1,024 would cap the server near 1,000
    // connections; it must use what the hard limit allows.
    let hard = nofile_of(std::process::id()).1.min(8192);
    let srv = spawn(&[], Some((64, hard)));
    assert_eq!(nofile_of(srv.child.id()), (hard, hard));
}

#[tokio::test]
async fn running_out_of_descriptors_backs_off_logs_once_and_recovers() {
    let srv = spawn(&[], Some((48, 48)));
    let addr = srv.addr;
    // Far more connections than the server has descriptors for.
    let mut hogs = Vec::new();
    for _ in 0..80 {
        hogs.push(
            tokio::net::TcpStream::connect(addr)
                .await
                .expect("backlog accepts"),
        );
    }
    let warn = srv
        .logs
        .recv_timeout(DEADLINE)
        .expect("a warning about accept");
    assert!(warn.contains("accept failed, backing off"), "{warn}");
    assert!(warn.contains("Too many open files"), "{warn}");
    // Once per interval, not once per failed accept (it retries every 100 ms).
    let more: Vec<String> = srv
        .logs
        .recv_timeout(Duration::from_millis(500))
        .into_iter()
        .collect();
    assert!(
        more.iter().all(|l| !l.contains("accept failed")),
        "{more:?}"
    );
    drop(hogs);
    // Descriptors free up: a new client is served again.
    let mut ws = within("reconnect after EMFILE", async {
        loop {
            let url = format!("ws://{addr}/ws/back");
            if let Ok((ws, _)) = tokio_tungstenite::connect_async(url.as_str()).await {
                return ws;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    ws.send(Message::text("alive")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "alive");
}

#[tokio::test]
async fn ten_thousand_connect_disconnect_cycles_leak_nothing() {
    let srv = spawn(&[], None);
    let addr = srv.addr;
    let pid = srv.child.id();
    // Warm up allocator pools and the connection slab first, at the
    // concurrency of the run (the slab and the allocator's arenas grow to
    // the peak number of connections once; that is not a leak).
    churn(addr, 50, 4).await;
    wait_stat(addr, "subscriptions", |n| n == 0).await;
    let baseline = status_kib(pid, "RssAnon");
    let vm_baseline = status_kib(pid, "VmRSS");
    churn(addr, 50, 200).await;
    let s = wait_stat(addr, "websockets_closed", |n| n >= 10_200).await;
    let s = if counter(&s, "connections") > 1 {
        wait_stat(addr, "connections", |n| n <= 1).await
    } else {
        s
    };
    assert_eq!(counter(&s, "subscriptions"), 0, "{s}");
    assert_eq!(counter(&s, "channels"), 0, "{s}");
    // The heap (anonymous memory) is what a leak grows; VmRSS also counts
    // code pages of the binary mapped the first time a path runs, which
    // depend on the build and its layout, not on what is retained.
    let after = status_kib(pid, "RssAnon");
    let vm_after = status_kib(pid, "VmRSS");
    eprintln!(
        "RssAnon baseline {baseline} KiB, after 10,000 cycles {after} KiB \
         (VmRSS {vm_baseline} -> {vm_after} KiB)"
    );
    assert!(
        after <= baseline + 1024,
        "anonymous RSS grew from {baseline} KiB to {after} KiB over 10,000 cycles"
    );
}

/// `clients` concurrent clients, each connecting `cycles` times to one of
/// seven channels, sending one message and closing.
async fn churn(addr: std::net::SocketAddr, clients: usize, cycles: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        tasks.spawn(async move {
            for i in 0..cycles {
                let mut ws = ws_connect(addr, &format!("/ws/churn-{}", i % 7)).await;
                ws.send(Message::text("x")).await.unwrap();
                ws.close(None).await.unwrap();
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("client task");
    }
}

/// Sizes (bytes) of the process's anonymous read-write mappings.
fn anon_mapping_sizes(pid: u32) -> Vec<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("proc maps");
    maps.lines()
        .filter(|l| l.split_whitespace().count() == 5 && l.contains(" rw-p "))
        .filter_map(|l| {
            let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
            Some(u64::from_str_radix(hi, 16).ok()? - u64::from_str_radix(lo, 16).ok()?)
        })
        .collect()
}

#[test]
fn the_allocator_reserves_64_mib_arenas_unless_told_otherwise() {
    // A 1 GiB first arena wrote 168 KiB of bitmaps in a fresh process
    // (BENCHMARKS, "Fresh RSS"); the binary makes 64 MiB the default.
    const MIB: u64 = 1 << 20;
    let srv = spawn(&[], None);
    let sizes = anon_mapping_sizes(srv.child.id());
    assert!(sizes.contains(&(64 * MIB)), "{sizes:?}");
    assert!(!sizes.contains(&(1024 * MIB)), "{sizes:?}");
    drop(srv);
    // mimalloc's own variable still wins.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_corecast"));
    cmd.args(["--listen", "127.0.0.1:0", "--log-level", "info"])
        .env("MIMALLOC_ARENA_RESERVE", "256MiB");
    let srv = BinServer::start(cmd);
    let sizes = anon_mapping_sizes(srv.child.id());
    assert!(sizes.contains(&(256 * MIB)), "{sizes:?}");
    assert!(!sizes.contains(&(64 * MIB)), "{sizes:?}");
}
