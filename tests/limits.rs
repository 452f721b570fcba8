//! Resource limits: slow consumers, connection cap, slowloris, keepalive,
//! ping floods.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use corecast::config::SlowConsumerPolicy;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

const QUEUE: usize = 64 << 10;
/// Messages per publishing round (the counters are checked between rounds).
const ROUND: usize = 256;
/// Give up after this many (16 MiB); a multiple of the window.
const MAX_MESSAGES: usize = 64 * ROUND;
/// Messages in flight per healthy subscriber: 16 KiB, a quarter of the bound.
const WINDOW: usize = 16;

/// Message `i`: its index in six digits, padded to 1 KiB.
fn payload(i: usize) -> String {
    let mut s = format!("{i:06}");
    s.extend(std::iter::repeat_n('.', 1024 - 6));
    s
}

fn index_of(payload: &[u8]) -> usize {
    assert_eq!(payload.len(), 1024, "unexpected message size");
    std::str::from_utf8(&payload[..6])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a numbered message: {:?}", &payload[..6]))
}

/// Reads numbered messages until "done"; checks they are 0..n in order
/// and returns n with the client and when each message arrived.
async fn read_all_in_order(mut ws: Ws) -> (usize, Ws, Vec<Instant>) {
    let mut arrived = Vec::new();
    loop {
        let t = next_text(&mut ws).await;
        if t == "done" {
            return (arrived.len(), ws, arrived);
        }
        assert_eq!(
            index_of(t.as_bytes()),
            arrived.len(),
            "healthy subscriber out of order"
        );
        arrived.push(Instant::now());
    }
}

/// The healthy subscribers' p99 delivery latency must stay under this
/// while a slow consumer is being cut off in the same test (generous: a
/// debug build on a shared 2-CPU machine; the release figures are in
/// BENCHMARKS.md).
const HEALTHY_P99_BOUND: Duration = Duration::from_millis(500);

/// The 99th percentile of arrival minus send time, message by message.
fn p99_latency(sent: &[Instant], arrived: &[Instant]) -> Duration {
    let mut lat: Vec<Duration> = sent
        .iter()
        .zip(arrived)
        .map(|(s, a)| a.saturating_duration_since(*s))
        .collect();
    lat.sort();
    lat[(lat.len() * 99 / 100).min(lat.len() - 1)]
}

/// Publishes messages `from..from + ROUND` from `publisher` (a subscriber
/// of the same channel) a window at a time, waiting for its own copies
/// before sending more. The pacing keeps the healthy subscribers' queues
/// far below the bound, so only a peer that does not read can exceed it.
async fn publish_round(publisher: &mut Ws, from: usize, sent: &mut Vec<Instant>) {
    for start in (from..from + ROUND).step_by(WINDOW) {
        for i in start..start + WINDOW {
            sent.push(Instant::now());
            publisher.feed(Message::text(payload(i))).await.unwrap();
        }
        publisher.flush().await.unwrap();
        for i in start..start + WINDOW {
            let t = next_text(publisher).await;
            assert_eq!(index_of(t.as_bytes()), i, "publisher's own copy");
        }
    }
}

/// Publishes rounds of [`ROUND`] messages until the counter `key` moves;
/// returns how many were published. The kernel absorbs a few MiB into
/// the socket buffers of a peer that does not read (loopback's large MSS
/// lets the send buffer autotune up to `tcp_wmem`'s maximum) before the
/// server's own queue starts to grow, so the count is not known up front.
async fn publish_until(
    addr: std::net::SocketAddr,
    publisher: &mut Ws,
    key: &str,
    sent_at: &mut Vec<Instant>,
) -> usize {
    let mut sent = 0;
    while sent < MAX_MESSAGES {
        publish_round(publisher, sent, sent_at).await;
        sent += ROUND;
        // The publisher got its own copies: the server handled them all.
        if counter(&stats(addr).await, key) > 0 {
            return sent;
        }
    }
    panic!("{key} still 0 after {sent} messages of 1 KiB");
}

/// A peer that upgrades and never reads is cut off with 1008 once its
/// queue passes `max_outbound_queue`; the healthy subscribers miss nothing.
async fn slow_consumer_is_disconnected_and_others_get_everything(legacy: bool) {
    let srv = TestServer::start_on(legacy, |c| c.max_outbound_queue = QUEUE);
    let addr = srv.addr;
    let mut slow = RawWs::connect_small_rcvbuf(addr, "/ws/feed", 4096).await;
    let healthy = ws_connect(addr, "/ws/feed").await;
    let mut publisher = ws_connect(addr, "/ws/feed").await;
    wait_stat(addr, "subscriptions", |n| n == 3).await;

    let reader = tokio::spawn(read_all_in_order(healthy));
    let mut sent_at = Vec::new();
    let sent = publish_until(
        addr,
        &mut publisher,
        "slow_consumer_disconnects",
        &mut sent_at,
    )
    .await;
    let s = stats(addr).await;
    assert_eq!(counter(&s, "slow_consumer_disconnects"), 1);
    assert_eq!(counter(&s, "messages_in"), sent as u64);
    assert_eq!(publish(addr, "feed", "done").await, 2);
    let (got, mut healthy, arrived) = within("healthy subscriber", reader).await.unwrap();
    assert_eq!(got, sent, "the healthy subscriber missed messages");
    assert!(counter(&s, "messages_not_delivered") > 0);
    let p99 = p99_latency(&sent_at, &arrived);
    eprintln!("healthy subscriber p99 latency while a slow consumer was cut: {p99:?}");
    assert!(
        p99 <= HEALTHY_P99_BOUND,
        "healthy p99 {p99:?} over {HEALTHY_P99_BOUND:?}"
    );

    // What reached the slow peer is a gap-free prefix of the stream,
    // followed by close 1008 (or the end, if its close deadline passed
    // while it was not reading).
    let (frames, ending) = slow.read_until_close().await;
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f.opcode, OP_TEXT);
        assert_eq!(index_of(&f.payload), i, "slow peer's stream has a gap");
    }
    assert!(frames.len() < sent, "slow peer got everything: not slow?");
    assert!(
        matches!(ending, Ending::Close(Some(1008)) | Ending::Gone),
        "{ending:?}"
    );
    if ending == Ending::Close(Some(1008)) {
        slow.send(0x80 | OP_CLOSE, &close_body(1000, "")).await;
        slow.expect_eof().await;
    }
    // The healthy ones are still connected and served.
    assert_eq!(publish(addr, "feed", "after").await, 2);
    assert_eq!(next_text(&mut publisher).await, "done");
    assert_eq!(next_text(&mut publisher).await, "after");
    assert_eq!(next_text(&mut healthy).await, "after");
}

/// The slow peer's close deadline starts when its close frame is queued,
/// not when it connected: a peer that reads again within `close_timeout`
/// of being cut off finds close 1008 at the end of its stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_consumer_close_deadline_starts_at_the_cut() {
    let close_timeout = Duration::from_secs(2);
    let srv = TestServer::start(|c| {
        c.max_outbound_queue = QUEUE;
        c.close_timeout = close_timeout;
    });
    let addr = srv.addr;
    let mut slow = RawWs::connect_small_rcvbuf(addr, "/ws/feed", 4096).await;
    let connected = Instant::now();
    let mut publisher = ws_connect(addr, "/ws/feed").await;
    wait_stat(addr, "subscriptions", |n| n == 2).await;
    // Precondition, not synchronisation: the connection must be older than
    // the close timeout when it is cut off.
    tokio::time::sleep_until((connected + close_timeout + Duration::from_millis(200)).into()).await;
    publish_until(
        addr,
        &mut publisher,
        "slow_consumer_disconnects",
        &mut Vec::new(),
    )
    .await;
    // The peer comes back to read well within its close timeout (but after
    // a few sweeps of the server's deadline checks).
    let cut = Instant::now();
    tokio::time::sleep_until((cut + close_timeout / 4).into()).await;
    let (frames, ending) = slow.read_until_close().await;
    assert!(cut.elapsed() < close_timeout);
    assert!(!frames.is_empty());
    assert_eq!(
        ending,
        Ending::Close(Some(1008)),
        "cut without its close frame; stats: {}",
        stats(addr).await
    );
    slow.send(0x80 | OP_CLOSE, &close_body(1000, "")).await;
    slow.expect_eof().await;
    assert_eq!(counter(&stats(addr).await, "close_timeouts"), 0);
}

/// Under `drop-oldest` the slow peer stays connected and gets an in-order
/// subsequence; every message it did not get is counted as a drop.
async fn drop_oldest_counts_drops_and_keeps_the_connection(legacy: bool) {
    let srv = TestServer::start_on(legacy, |c| {
        c.max_outbound_queue = QUEUE;
        c.slow_consumer = SlowConsumerPolicy::DropOldest;
    });
    let addr = srv.addr;
    let mut slow = RawWs::connect_small_rcvbuf(addr, "/ws/feed", 4096).await;
    let healthy = ws_connect(addr, "/ws/feed").await;
    let mut publisher = ws_connect(addr, "/ws/feed").await;
    wait_stat(addr, "subscriptions", |n| n == 3).await;

    let reader = tokio::spawn(read_all_in_order(healthy));
    let sent = publish_until(addr, &mut publisher, "slow_consumer_drops", &mut Vec::new()).await;
    // Nothing more is published until the slow peer has left, so the drop
    // count is final.
    let s = stats(addr).await;
    let drops = counter(&s, "slow_consumer_drops") as usize;
    assert!(drops < sent, "everything dropped: {s}");
    assert_eq!(counter(&s, "slow_consumer_disconnects"), 0);
    assert_eq!(counter(&s, "messages_not_delivered") as usize, drops);

    let mut last = None;
    for _ in 0..sent - drops {
        let f = slow.next_frame().await;
        assert_eq!(f.opcode, OP_TEXT);
        let i = index_of(&f.payload);
        assert!(last < Some(i), "out of order: {i} after {last:?}");
        last = Some(i);
    }
    // Still open: a close is answered, with no data frame left before it.
    slow.send(0x80 | OP_CLOSE, &close_body(1000, "")).await;
    slow.expect_close(1000).await;
    slow.expect_eof().await;

    wait_stat(addr, "subscriptions", |n| n == 2).await;
    assert_eq!(publish(addr, "feed", "done").await, 2);
    let (got, _, _) = within("healthy subscriber", reader).await.unwrap();
    assert_eq!(got, sent, "the healthy subscriber missed messages");
}

/// At `max_connections` the next connection is answered 503 before it can
/// upgrade, and a freed slot can be used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_get_503() {
    let srv = TestServer::start(|c| c.max_connections = 3);
    let addr = srv.addr;
    let first = ws_connect(addr, "/ws/c").await;
    let _second = ws_connect(addr, "/ws/c").await;
    let _third = ws_connect(addr, "/ws/c").await;

    // The answer comes unprompted: nothing is sent on this socket.
    let mut extra = TcpStream::connect(addr).await.unwrap();
    let mut all = Vec::new();
    within("503 and EOF", extra.read_to_end(&mut all))
        .await
        .unwrap();
    let text = String::from_utf8(all).unwrap();
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    assert!(text.contains("\"error\""), "{text}");
    let url = format!("ws://{addr}/ws/c");
    assert!(
        tokio_tungstenite::connect_async(url.as_str())
            .await
            .is_err(),
        "a fourth WebSocket was accepted"
    );

    drop(first);
    wait_until("a slot to free up", || async move {
        let req = get_request("/healthz", false);
        try_http_raw(addr, req.as_bytes())
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    // With several workers the probe's own connection may still be
    // counted for a moment (its worker releases it): ask until answered.
    let s = within("/stats answers", async {
        loop {
            if let Ok(v) = try_stats(addr).await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(counter(&s, "connections_rejected") >= 2, "{s}");
    assert_eq!(counter(&s, "websockets_opened"), 3);
}

/// A client trickling its request head is cut off at `handshake_timeout`,
/// and so is an idle keep-alive connection.
async fn slowloris_is_cut_off_at_the_handshake_timeout(legacy: bool) {
    let srv = TestServer::start_on(legacy, |c| c.handshake_timeout = Duration::from_secs(1));
    let addr = srv.addr;
    let head = b"GET /healthz HTTP/1.1\r\nHost: slowloris.example\r\nX-Pad: trickle\r\n\r\n";
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    let (mut rd, mut wr) = stream.split();
    // One byte per 100 ms: the head would take ~6.5 s, far past the deadline.
    let trickle = async {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        for b in head {
            tick.tick().await;
            if wr.write_all(&[*b]).await.is_err() {
                return;
            }
        }
        panic!("the whole head was sent without being cut off");
    };
    let mut answer = Vec::new();
    tokio::select! {
        r = rd.read_to_end(&mut answer) => {
            // EOF, or a reset if a trickled byte crossed the shutdown.
            let _ = r;
        }
        () = trickle => unreachable!(),
    }
    let elapsed = started.elapsed();
    assert!(answer.is_empty(), "{:?}", String::from_utf8_lossy(&answer));
    assert!(
        elapsed >= Duration::from_millis(800),
        "cut too early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(4),
        "cut too late: {elapsed:?}"
    );
    let s = wait_stat(addr, "handshake_timeouts", |n| n >= 1).await;
    assert_eq!(counter(&s, "http_requests"), 1, "only this /stats request");

    // Keep-alive: the same deadline applies while waiting for the next request.
    let mut conn = HttpConn::connect(addr).await;
    let r = conn.request(get_request("/healthz", true).as_bytes()).await;
    assert_eq!(r.status, 200);
    let idle_since = Instant::now();
    let mut rest = Vec::new();
    let _ = within("idle keep-alive cut", conn.stream().read_to_end(&mut rest)).await;
    assert!(rest.is_empty());
    assert!(idle_since.elapsed() >= Duration::from_millis(800));
    wait_stat(addr, "handshake_timeouts", |n| n >= 2).await;
}

/// With pings every 200 ms and a 1 s idle timeout, a peer that never
/// answers is closed, while one that answers pings stays.
async fn unresponsive_peers_time_out_responsive_ones_stay(legacy: bool) {
    let srv = TestServer::start_on(legacy, |c| {
        c.ping_interval = Duration::from_millis(200);
        c.idle_timeout = Duration::from_secs(1);
    });
    let addr = srv.addr;
    let pings = Arc::new(AtomicUsize::new(0));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut good = ws_connect(addr, "/ws/ka").await;
    let good_since = Instant::now();
    let counted = pings.clone();
    // tokio-tungstenite answers pings as long as it is being read.
    let reader = tokio::spawn(async move {
        while let Some(m) = good.next().await {
            match m.expect("responsive client") {
                Message::Ping(_) => {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                Message::Text(t) => tx.send(t).unwrap(),
                other => panic!("unexpected {other:?}"),
            }
        }
    });

    let mut mute = RawWs::connect(addr, "/ws/ka").await;
    let mute_since = Instant::now();
    let (frames, ending) = mute.read_until_close().await;
    let lived = mute_since.elapsed();
    assert!(!frames.is_empty(), "the mute peer was never pinged");
    assert!(frames.iter().all(|f| f.opcode == OP_PING), "{frames:?}");
    assert!(
        matches!(ending, Ending::Gone | Ending::Close(_)),
        "{ending:?}"
    );
    assert!(
        lived >= Duration::from_millis(800),
        "closed early: {lived:?}"
    );
    let s = wait_stat(addr, "idle_timeouts", |n| n >= 1).await;
    assert_eq!(counter(&s, "idle_timeouts"), 1);

    // The responsive client has outlived the idle timeout and still works.
    assert!(good_since.elapsed() > Duration::from_secs(1));
    wait_stat(addr, "subscriptions", |n| n == 1).await;
    assert_eq!(publish(addr, "ka", "still here").await, 1);
    let t = within("message to the responsive client", rx.recv()).await;
    assert_eq!(t.as_deref(), Some("still here"));
    assert!(pings.load(Ordering::SeqCst) >= 2, "pinged repeatedly");
    assert_eq!(counter(&stats(addr).await, "idle_timeouts"), 1);
    reader.abort();
}

/// 10,000 pings from a peer that does not read: the server keeps reading,
/// its control queue stays bounded (older pongs are replaced), the latest
/// ping is answered, and everyone else is served meanwhile.
async fn ping_flood_does_not_grow_server_state(legacy: bool) {
    const PINGS: u32 = 10_000;
    let srv = TestServer::start_on(legacy, |_| {});
    let addr = srv.addr;
    let mut other = ws_connect(addr, "/ws/other").await;
    let mut flood = RawWs::connect_small_rcvbuf(addr, "/ws/flood", 4096).await;
    let bytes: Vec<u8> = (0..PINGS)
        .flat_map(|i| {
            let mut p = i.to_be_bytes().to_vec();
            p.resize(125, b'.');
            masked(0x80 | OP_PING, &p)
        })
        .collect();
    // 1.3 MB of pings, answered with as many bytes of pongs that we do not
    // read: the write only completes if the server keeps reading.
    within("sending the flood", flood.send_raw(&bytes)).await;
    let sent = bytes.len() as u64;
    wait_stat(addr, "bytes_in", |n| n >= sent).await;

    assert_eq!(get(addr, "/healthz").await.status, 200);
    wait_stat(addr, "subscriptions", |n| n == 2).await;
    assert_eq!(publish(addr, "other", "unaffected").await, 1);
    assert_eq!(next_text(&mut other).await, "unaffected");

    let mut pongs = 0u32;
    let mut last = None;
    loop {
        let f = flood.next_frame().await;
        assert_eq!(f.opcode, OP_PONG);
        assert_eq!(f.payload.len(), 125);
        let i = u32::from_be_bytes(f.payload[..4].try_into().unwrap());
        assert!(last < Some(i), "pong {i} after {last:?}");
        last = Some(i);
        pongs += 1;
        if i == PINGS - 1 {
            break;
        }
    }
    assert!(pongs <= PINGS);
    let s = stats(addr).await;
    assert_eq!(counter(&s, "protocol_errors"), 0);
    assert_eq!(counter(&s, "slow_consumer_disconnects"), 0);
    // The flooder is still a working connection.
    flood.send(0x80 | OP_CLOSE, &close_body(1000, "")).await;
    flood.expect_close(1000).await;
}

/// Whether bytes are waiting in `stream`'s receive queue right now.
fn has_data_now(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    // SAFETY: recv(2) writes at most 1 byte into the valid local `byte`;
    // MSG_PEEK leaves the data in place, MSG_DONTWAIT never blocks.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// A fan-out to thousands of subscribers does not hold other connections
/// up (the event-loop blocking of a plain O(N) fan-out loop): with a small
/// `--fanout-window`, a request sent once the publish was answered is
/// itself answered while most subscribers still wait for their frame —
/// and every subscriber still gets the message.
async fn a_big_fan_out_does_not_stall_other_requests(legacy: bool) {
    const N: usize = 2000;
    let srv = TestServer::start_on(legacy, |c| c.fanout_window = 8);
    let addr = srv.addr;
    let mut subs: Vec<RawWs> = futures_util::stream::iter(0..N)
        .map(|_| RawWs::connect(addr, "/ws/big"))
        .buffer_unordered(64)
        .collect()
        .await;
    wait_stat(addr, "subscriptions", |n| n == N as u64).await;
    let mut publisher = HttpConn::connect(addr).await;
    let mut probe = HttpConn::connect(addr).await;
    assert_eq!(publisher.publish("big", "hello").await, N as u64);
    let health = probe
        .request(get_request("/healthz", true).as_bytes())
        .await;
    assert_eq!(health.status, 200);
    // Which subscribers can read their frame already? One non-blocking
    // peek each, straight to the kernel (tokio's own peek would consult its
    // readiness cache, which may not have seen the data yet).
    let arrived = subs.iter().filter(|s| has_data_now(&s.stream)).count();
    assert!(
        arrived < N / 2,
        "{arrived} of {N} subscribers had the frame before /healthz was answered"
    );
    for s in &mut subs {
        let f = s.next_frame().await;
        assert_eq!(f.payload, b"hello");
    }
    let s = stats(addr).await;
    // The window is per worker (each paces its own subscribers).
    let window = 8 * default_workers();
    assert!(counter(&s, "fanout_paced") >= (N - window) as u64, "{s}");
}

/// Writes to subscribers that never read never complete. More of them
/// than the fan-out window holds must not stall everyone else: the window
/// is handed on (counted as `fanout_window_stalls`), the healthy
/// subscriber gets every message, and the stalled ones stay connected
/// (their queue bound is far away).
async fn stalled_readers_do_not_hold_the_fan_out_window(legacy: bool) {
    const STALLED: usize = 8;
    // 16 MiB per subscriber: more than any socket send buffer (tcp_wmem's
    // maximum is 4 MiB by default) takes, so the stalled writes block.
    const MESSAGES: usize = 256;
    const SIZE: usize = 64 << 10;
    let srv = TestServer::start_on(legacy, |c| {
        c.fanout_window = 4;
        c.max_outbound_queue = 64 << 20;
    });
    let addr = srv.addr;
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(RawWs::connect_small_rcvbuf(addr, "/ws/s", 4096).await);
    }
    let mut healthy = ws_connect(addr, "/ws/s").await;
    wait_stat(addr, "subscriptions", |n| n == STALLED as u64 + 1).await;
    let mut publisher = HttpConn::connect(addr).await;
    for i in 0..MESSAGES {
        let mut body = format!("{i:06}");
        body.extend(std::iter::repeat_n('.', SIZE - 6));
        assert_eq!(publisher.publish("s", &body).await, STALLED as u64 + 1);
        let got = next_text(&mut healthy).await;
        assert_eq!(&got[..6], &body[..6], "healthy subscriber in order");
    }
    let s = stats(addr).await;
    assert!(counter(&s, "fanout_window_stalls") >= 1, "{s}");
    assert_eq!(counter(&s, "slow_consumer_disconnects"), 0, "{s}");
    assert_eq!(counter(&s, "connections"), STALLED as u64 + 3, "{s}");
    drop(stalled);
}

on_both_drivers!(
    a_big_fan_out_does_not_stall_other_requests,
    stalled_readers_do_not_hold_the_fan_out_window,
    slow_consumer_is_disconnected_and_others_get_everything,
    drop_oldest_counts_drops_and_keeps_the_connection,
    slowloris_is_cut_off_at_the_handshake_timeout,
    unresponsive_peers_time_out_responsive_ones_stay,
    ping_flood_does_not_grow_server_state,
);

/// Issue 12 item 13: one address may hold at most
/// `--max-connections-per-ip` connections (503 past it, answered before
/// anything else) and start at most `--handshake-rate-per-ip` upgrades
/// (429 past it). Loopback is exempt by default, so the test empties the
/// exempt list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_ip_connection_and_handshake_limits() {
    let srv = TestServer::start(|c| {
        c.peers.exempt.clear();
        c.peers.max_connections_per_ip = 3;
        c.peers.handshake_rate = 1;
        c.peers.handshake_burst = 4;
    });
    let a = srv.addr;
    // Three held connections (one of them an upgraded WebSocket).
    let ws = ws_connect(a, "/ws/c").await;
    let mut held = vec![HttpConn::connect(a).await, HttpConn::connect(a).await];
    wait_stat_via(&mut held[0], "connections", |n| n == 3).await;
    let r = try_http_raw(a, get_request("/healthz", false).as_bytes()).await;
    assert_eq!(r.expect("an answer, not a reset").status, 503);
    let s = held[0]
        .request(get_request("/stats", true).as_bytes())
        .await
        .json();
    assert_eq!(counter(&s, "per_ip_connections_rejected"), 1, "{s}");
    // Closing one makes room again.
    drop(ws);
    held.pop();
    wait_stat_via(&mut held[0], "connections", |n| n == 1).await;
    // Handshakes: the burst (4, one used above) then 429.
    let mut ok = 0;
    let mut limited = 0;
    for _ in 0..6 {
        match upgrade_once(a).await {
            101 => ok += 1,
            429 => limited += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(
        (3..=4).contains(&ok) && ok + limited == 6,
        "{ok} ok, {limited} limited"
    );
    let s = held[0]
        .request(get_request("/stats", true).as_bytes())
        .await
        .json();
    assert_eq!(counter(&s, "per_ip_handshakes_limited"), limited, "{s}");
    // Plain requests are not handshakes.
    assert_eq!(get(a, "/healthz").await.status, 200);
}

/// Loopback is exempt by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_is_exempt_from_per_ip_limits_by_default() {
    let srv = TestServer::start(|c| {
        c.peers.max_connections_per_ip = 1;
        c.peers.handshake_rate = 1;
        c.peers.handshake_burst = 1;
    });
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(ws_connect(srv.addr, "/ws/c").await);
    }
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "per_ip_connections_rejected"), 0, "{s}");
    assert_eq!(counter(&s, "per_ip_tracked"), 0, "{s}");
}

async fn wait_stat_via(conn: &mut HttpConn, key: &str, pred: impl Fn(u64) -> bool) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let s = conn
            .request(get_request("/stats", true).as_bytes())
            .await
            .json();
        if pred(counter(&s, key)) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out: {key} in {s}"
        );
        tokio::task::yield_now().await;
    }
}

/// Status of one upgrade on a fresh connection (which then closes).
async fn upgrade_once(addr: std::net::SocketAddr) -> u16 {
    let req = format!(
        "GET /ws/c HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {RFC_KEY}\r\n\r\n"
    );
    let r = http_raw(addr, req.as_bytes()).await;
    if r.status == 429 {
        // When a token is due again (the bucket refills in well under 60 s).
        let after: u64 = r
            .header("retry-after")
            .expect("429 with Retry-After")
            .parse()
            .unwrap();
        assert!((1..=60).contains(&after), "Retry-After: {after}");
    }
    r.status
}
