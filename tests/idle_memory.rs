//! What an idle WebSocket costs in heap, measured by a counting allocator
//! around the whole in-process server: live bytes per connection, and the
//! allocations that make them up by size (the breakdown issue 19 asks
//! for). A regression bound, not a benchmark: RSS figures are measured by
//! `corecast-bench connect` (BENCHMARKS.md, the perf gate).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

use common::*;

struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);
/// Live allocations by exact size (the last slot: 4 KiB and over).
static BY_SIZE: [AtomicI64; 4097] = [const { AtomicI64::new(0) }; 4097];

fn class(size: usize) -> usize {
    size.min(4096)
}

// SAFETY: forwards to the system allocator unchanged; the counters are
// atomics touched with no allocation of their own.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        BY_SIZE[class(l.size())].fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        BY_SIZE[class(l.size())].fetch_sub(1, Ordering::Relaxed);
        System.dealloc(p, l)
    }
}

#[global_allocator]
static A: Counting = Counting;

const N: usize = 400;

/// The counters are process-wide: one measurement at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An upgraded WebSocket on a blocking std socket: the client side
/// allocates nothing per connection, so every counted byte is the
/// server's.
fn idle_ws(addr: std::net::SocketAddr) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let req = b"GET /ws/idle HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
Sec-WebSocket-Version: 13\r\n\r\n";
    s.write_all(req).expect("upgrade request");
    let mut head = [0u8; 512];
    let mut n = 0;
    while !head[..n].ends_with(b"\r\n\r\n") {
        let got = s.read(&mut head[n..]).expect("read");
        assert!(got > 0 && n + got < head.len(), "no complete 101");
        n += got;
    }
    assert!(head.starts_with(b"HTTP/1.1 101 "), "not upgraded");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_websocket_costs_a_bounded_heap() {
    let _one = SERIAL.lock().await;
    let srv = TestServer::start(|c| {
        c.max_connections = 1000;
        // Measured before parking (the next test measures after).
        c.park_after = std::time::Duration::ZERO;
    });
    // Warm up everything that is allocated once (channel, tables).
    let addr = srv.addr;
    let warm: Vec<_> = (0..10).map(|_| idle_ws(addr)).collect();
    // `connections` counts the /stats request too.
    wait_stat(srv.addr, "connections", |n| n == 11).await;
    let before = LIVE.load(Ordering::Relaxed);
    let sizes0: Vec<i64> = BY_SIZE.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let mut conns = Vec::with_capacity(N);
    for _ in 0..N {
        conns.push(idle_ws(addr));
    }
    wait_stat(srv.addr, "connections", |n| n == (N + 11) as u64).await;
    let (per, breakdown) = heap_report(before, &sizes0);
    eprintln!("live heap per idle WebSocket: {per:.0} B\n{breakdown}");
    // 2026-12-02, before parking: 1,753 B — the WebSocket's task 1,288 B
    // (its future holds the reader's state, the pending one-byte read and
    // the park wait's), the writer task 152 B, the socket's shared halves
    // and the read op 56 + 64 + 96 B, the channel name, the read byte.
    // After `--park-after`, see the next test.
    assert!(per < 1900.0, "{per:.0} B per idle connection\n{breakdown}");
    drop(conns);
    drop(warm);
}

/// Live heap per connection since `before` (N connections), and the
/// allocations by size that changed by at least one per two connections.
fn heap_report(before: i64, sizes0: &[i64]) -> (f64, String) {
    let after = LIVE.load(Ordering::Relaxed);
    let per = (after - before) as f64 / N as f64;
    let mut breakdown = String::new();
    for (i, a) in BY_SIZE.iter().enumerate() {
        let d = a.load(Ordering::Relaxed) - sizes0[i];
        if d.unsigned_abs() as usize >= N / 2 {
            breakdown += &format!("  {i} B: {:+.2} per connection\n", d as f64 / N as f64);
        }
    }
    (per, breakdown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_websocket_costs_about_its_table_entry() {
    let _one = SERIAL.lock().await;
    let srv = TestServer::start(|c| {
        c.max_connections = 1000;
        c.park_after = std::time::Duration::from_millis(100);
    });
    let addr = srv.addr;
    let warm: Vec<_> = (0..10).map(|_| idle_ws(addr)).collect();
    wait_stat(addr, "parked_connections", |n| n == 10).await;
    let before = LIVE.load(Ordering::Relaxed);
    let sizes0: Vec<i64> = BY_SIZE.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let conns: Vec<_> = (0..N).map(|_| idle_ws(addr)).collect();
    wait_stat(addr, "parked_connections", |n| n == (N + 10) as u64).await;
    let (per, breakdown) = heap_report(before, &sizes0);
    eprintln!("live heap per parked WebSocket: {per:.0} B\n{breakdown}");
    // The hub's entry is allocated up front (the table is reserved at
    // start), so this is what parking keeps besides it: the parked slot
    // (a growing table), the channel name, the subscription and its place
    // in the channel's subscriber list. 2026-12-02: 217 B.
    assert!(per < 300.0, "{per:.0} B per parked connection\n{breakdown}");
    drop(conns);
    drop(warm);
}

/// A fresh server keeps no deflate state (about 350 KB per window size)
/// until a message is compressed: most servers never see a client that
/// negotiates permessage-deflate. Before, both compressors were made at
/// start (the fresh process's heap was 1.2 MB, now 0.7 MB of RSS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_server_makes_its_compressor_at_the_first_compressed_message() {
    let _one = SERIAL.lock().await;
    let before = LIVE.load(Ordering::Relaxed);
    let srv = TestServer::start(|c| {
        c.max_connections = 100;
        c.park_after = std::time::Duration::ZERO;
    });
    let ext = "Sec-WebSocket-Extensions: permessage-deflate\r\n";
    let (mut ws, _) = RawWs::connect_with(srv.addr, "/ws/z", ext).await;
    wait_stat(srv.addr, "connections", |n| n == 2).await;
    let fresh = LIVE.load(Ordering::Relaxed) - before;
    println!("fresh server with one compressed connection: {fresh} B live");
    assert!(fresh < 256 << 10, "{fresh} B live at start");

    let text = "compress me ".repeat(100);
    assert_eq!(publish(srv.addr, "z", &text).await, 1);
    assert_eq!(ws.next_frame().await.opcode, 0x1);
    let used = LIVE.load(Ordering::Relaxed) - before;
    println!("after the first compressed message: {used} B live");
    assert!(
        used > fresh + (128 << 10),
        "{used} B: no deflate state made?"
    );
}

/// An open Server-Sent Events stream (`GET /sse`) on a blocking std
/// socket, its first event read: as [`idle_ws`], nothing allocated on
/// the client's side per connection.
fn idle_sse(addr: std::net::SocketAddr) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(b"GET /sse?channel=idle HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut got = [0u8; 512];
    let mut n = 0;
    // The head, then the `subscribed` event's chunk.
    while !got[..n].ends_with(b"\n\n\r\n") {
        let k = s.read(&mut got[n..]).expect("read");
        assert!(k > 0 && n + k < got.len(), "no complete first event");
        n += k;
    }
    assert!(got.starts_with(b"HTTP/1.1 200 "), "not a stream");
    s
}

/// What an idle event stream costs, before and after it parks: the same
/// measure as a WebSocket's (issue 33's idle memory per SSE connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_event_stream_costs_about_a_websocket() {
    let _one = SERIAL.lock().await;
    for park_ms in [0, 100] {
        let srv = TestServer::start(|c| {
            c.max_connections = 1000;
            c.park_after = std::time::Duration::from_millis(park_ms);
        });
        let addr = srv.addr;
        let parked = if park_ms == 0 { 0 } else { N as u64 + 10 };
        let warm: Vec<_> = (0..10).map(|_| idle_sse(addr)).collect();
        wait_stat(addr, "parked_connections", |n| n == parked.min(10)).await;
        let before = LIVE.load(Ordering::Relaxed);
        let sizes0: Vec<i64> = BY_SIZE.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        let conns: Vec<_> = (0..N).map(|_| idle_sse(addr)).collect();
        wait_stat(addr, "sse_connections", |n| n == N as u64 + 10).await;
        wait_stat(addr, "parked_connections", |n| n == parked).await;
        let (per, breakdown) = heap_report(before, &sizes0);
        let what = if park_ms == 0 { "idle" } else { "parked" };
        eprintln!("live heap per {what} event stream: {per:.0} B\n{breakdown}");
        let bound = if park_ms == 0 { 1900.0 } else { 300.0 };
        assert!(per < bound, "{per:.0} B per {what} stream\n{breakdown}");
        drop(conns);
        drop(warm);
    }
}
