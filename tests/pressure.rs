//! Delivery under pressure: what happens to the frames of a connection
//! that is closing, to healthy subscribers during a publisher's burst,
//! and to peers whose writes stall.

mod common;

use std::time::{Duration, Instant};

use common::*;
use corecast::hub::HARD_CAP_FACTOR;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

const OP_TEXT: u8 = 0x1;

/// Once the server has sent its close frame, a data frame the peer still
/// sends is not silently dropped: it is counted in
/// `messages_not_delivered`, and the server stops reading (the connection
/// ends after its close frame without waiting for the close timeout).
async fn data_after_our_close_is_counted_and_reading_stops(legacy: bool) {
    let srv = TestServer::start_on(legacy, |c| {
        // Every subscription is refused: the server closes at once.
        c.max_subscriptions = 0;
        c.close_timeout = Duration::from_secs(60);
    });
    let addr = srv.addr;
    let mut ws = RawWs::connect(addr, "/ws/closing").await;
    let f = ws.next_frame().await;
    assert_eq!(f.close_code(), Some(1008), "{f:?}");
    let before = counter(&stats(addr).await, "messages_not_delivered");
    let mut three = Vec::new();
    for _ in 0..3 {
        three.extend(masked(0x80 | OP_TEXT, b"too late"));
    }
    ws.send_raw(&three).await;
    let s = wait_stat(addr, "messages_not_delivered", |n| n > before).await;
    // Reading stopped at the first one: the rest were never parsed.
    assert_eq!(counter(&s, "messages_not_delivered"), before + 1, "{s}");
    // The server ends the connection now, not at the 60 s close timeout.
    ws.expect_eof().await;
}

on_both_drivers!(data_after_our_close_is_counted_and_reading_stops);

/// Message `i` of a burst: its index in 8 bytes, padded to 64 KiB.
fn burst_msg(i: usize) -> Vec<u8> {
    let mut m = vec![b'.'; BURST_MSG];
    m[..8].copy_from_slice(&(i as u64).to_be_bytes());
    m
}

const BURST_MSG: usize = 64 << 10;

/// Reads `n` burst messages and checks they are 0..n in order.
async fn read_burst(ws: &mut Ws, n: usize, who: &str) {
    for i in 0..n {
        let m = match next_msg(ws).await {
            Message::Binary(b) => b,
            other => panic!("{who}: message {i} is {other:?}"),
        };
        assert_eq!(m.len(), BURST_MSG, "{who}: message {i}");
        let idx = u64::from_be_bytes(m[..8].try_into().expect("8 bytes"));
        assert_eq!(idx, i as u64, "{who}: out of order");
    }
}

/// A publisher on `/ws/<ch>` (it gets its own messages too, and reads
/// them) sends `n` messages of 64 KiB as fast as TCP lets it, while one
/// other subscriber reads at line rate and one never reads: the healthy
/// subscriber and the publisher get every message in order, the silent
/// one is cut with 1008 and counted, the publisher is slowed (not cut),
/// and the server's queues stay bounded.
async fn burst(legacy: bool, n: usize) {
    // The silent peer's close frame waits behind a write it never reads:
    // keep it until the test reads it.
    let srv = TestServer::start_on(legacy, |c| c.close_timeout = LONG);
    let addr = srv.addr;
    let mut silent = RawWs::connect_small_rcvbuf(addr, "/ws/burst", 4096).await;
    let mut healthy = ws_connect(addr, "/ws/burst").await;
    let publisher = ws_connect(addr, "/ws/burst").await;
    wait_stat(addr, "subscriptions", |s| s == 3).await;
    let (mut tx, rx) = publisher.split();
    let started = Instant::now();
    let send = tokio::spawn(async move {
        for i in 0..n {
            tx.feed(Message::binary(burst_msg(i))).await.expect("send");
        }
        tx.flush().await.expect("flush");
        tx
    });
    let echo = tokio::spawn(async move {
        let mut rx = rx;
        for i in 0..n {
            let m = within_for(LONG, "publisher's echo", rx.next())
                .await
                .expect("publisher's stream ended")
                .expect("publisher's stream failed");
            let Message::Binary(m) = m else {
                panic!("publisher: message {i} is {m:?}")
            };
            let idx = u64::from_be_bytes(m[..8].try_into().expect("8 bytes"));
            assert_eq!(idx, i as u64, "publisher's echo out of order");
        }
        rx
    });
    within_for(
        LONG,
        "healthy subscriber",
        read_burst(&mut healthy, n, "healthy"),
    )
    .await;
    let took = started.elapsed();
    let _tx = send.await.expect("sender");
    let _rx = echo.await.expect("echo reader");
    let sent = (n * BURST_MSG) as u64;
    // A small burst may fit in the silent peer's socket buffers; a large
    // one cannot, and it is cut.
    let s = if sent >= 16 << 20 {
        let s = wait_stat(addr, "slow_consumer_disconnects", |c| c >= 1).await;
        let (frames, ending) = silent.read_until_close().await;
        assert_eq!(ending, Ending::Close(Some(1008)), "silent subscriber");
        assert!(
            frames.len() < n,
            "the silent subscriber read nothing, got all"
        );
        // Everything written: the memory budget got every byte back.
        wait_stat(addr, "outbound_memory_bytes", |m| m == 0).await;
        s
    } else {
        stats(addr).await
    };
    // Only the silent one may have been cut (the others got everything).
    assert!(counter(&s, "slow_consumer_disconnects") <= 1, "{s}");
    let peak = counter(&s, "outbound_bytes_peak");
    eprintln!(
        "burst of {n} x 64 KiB: delivered in {took:?}, queue peak {peak} B, \
         publisher paused {} times",
        counter(&s, "publish_backpressure")
    );
    // Memory: at most the bound per connection (plus the memory guard and
    // one message each), never the burst.
    let bound = 3 * (HARD_CAP_FACTOR * (1 << 20) + BURST_MSG) as u64;
    assert!(peak <= bound, "queues held {peak} B of a {sent} B burst");
    if sent > bound {
        assert!(
            counter(&s, "publish_backpressure") > 0,
            "publisher never slowed: {s}"
        );
    }
}

const LONG: Duration = Duration::from_secs(120);

async fn a_burst_of_16_does_not_cut_healthy_subscribers(legacy: bool) {
    burst(legacy, 16).await;
}

async fn a_burst_of_64_mib_does_not_cut_healthy_subscribers(legacy: bool) {
    burst(legacy, 1024).await;
}

on_both_drivers!(
    a_burst_of_16_does_not_cut_healthy_subscribers,
    a_burst_of_64_mib_does_not_cut_healthy_subscribers
);

/// A subscriber that never reads, sent large messages while far under
/// `--max-outbound-queue`: its write stalls, and after
/// `--write-stall-timeout` it is cut as slow (close 1008 attempted,
/// counted). Its stuck bytes stop counting towards
/// `--publish-backpressure` at once, so publishers are not held until its
/// close timeout.
async fn a_stalled_write_is_cut_after_the_write_stall_timeout(legacy: bool) {
    let srv = TestServer::start_on(legacy, |c| {
        c.write_stall_timeout = Duration::from_millis(500);
        c.max_outbound_queue = 64 << 20;
        c.publish_backpressure = 32 << 10;
        c.close_timeout = LONG;
    });
    let addr = srv.addr;
    let mut silent = RawWs::connect_small_rcvbuf(addr, "/ws/stall", 4096).await;
    wait_stat(addr, "subscriptions", |s| s == 1).await;
    let big = "x".repeat(512 << 10);
    // More than the kernel takes for a peer that does not read.
    for _ in 0..8 {
        let resp = post(addr, "/publish/stall", big.as_bytes()).await;
        assert_eq!(resp.status, 200, "publish: {resp:?}");
    }
    let s = wait_stat(addr, "write_stall_timeouts", |n| n == 1).await;
    assert_eq!(counter(&s, "slow_consumer_disconnects"), 1, "{s}");
    // The stalled connection no longer holds publishers back, though its
    // last write is still stuck (its close timeout is long).
    let t = Instant::now();
    let resp = post(addr, "/publish/stall", b"after").await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "publish held {:?} by a cut connection",
        t.elapsed()
    );
    let (_, ending) = within_for(LONG, "silent peer", silent.read_until_close()).await;
    assert_eq!(ending, Ending::Close(Some(1008)));
}

on_both_drivers!(a_stalled_write_is_cut_after_the_write_stall_timeout);

const OP_BINARY: u8 = 0x2;
const INBOUND_BUDGET: u64 = 1 << 20;
/// What each hog sends of its declared 1,000,000-byte frame.
const HOG_PART: usize = 300 << 10;

/// `--max-total-inbound`: clients each holding a large partial frame
/// cannot make the worker hold more input than the budget (plus one
/// connection's last read): a connection whose input grows while the
/// worker is over it is closed with 1013 and counted, ordinary traffic
/// flows meanwhile, and every byte held is given back when they go.
async fn partial_frames_are_bounded_by_the_inbound_budget(legacy: bool) {
    let srv = TestServer::start_on(legacy, |c| c.max_total_inbound = INBOUND_BUDGET as usize);
    let addr = srv.addr;
    let mut calm = ws_connect(addr, "/ws/calm").await;
    let frame = masked(0x80 | OP_BINARY, &vec![b'x'; 1_000_000]);
    let mut hogs = Vec::new();
    for _ in 0..8 {
        let before = stats(addr).await;
        let (held, refused) = (
            counter(&before, "inbound_bytes"),
            counter(&before, "inbound_budget_refusals"),
        );
        let mut ws = RawWs::connect(addr, "/ws/hog").await;
        ws.send_raw(&frame[..HOG_PART]).await;
        // The server either holds this hog's input or refused it.
        let s = wait_until_stat(addr, |s| {
            counter(s, "inbound_bytes") >= held + HOG_PART as u64 - 64
                || counter(s, "inbound_budget_refusals") > refused
        })
        .await;
        let now_refused = counter(&s, "inbound_budget_refusals") > refused;
        hogs.push((ws, now_refused));
    }
    let s = stats(addr).await;
    let refused = hogs.iter().filter(|(_, r)| *r).count() as u64;
    assert!(
        refused >= 4,
        "2.4 MB of partial frames vs a 1 MiB budget: {s}"
    );
    assert_eq!(counter(&s, "inbound_budget_refusals"), refused, "{s}");
    assert!(counter(&s, "inbound_bytes") <= 2 * INBOUND_BUDGET, "{s}");
    for (ws, was_refused) in &mut hogs {
        if *was_refused {
            assert_eq!(ws.next_frame().await.close_code(), Some(1013));
        }
    }
    // Ordinary traffic is untouched.
    publish(addr, "calm", "still here").await;
    assert_eq!(next_text(&mut calm).await, "still here");
    drop(hogs);
    wait_stat(addr, "inbound_bytes", |n| n == 0).await;
}

on_both_drivers!(partial_frames_are_bounded_by_the_inbound_budget);

/// HTTP request bodies count towards `--max-total-inbound` too: bodies
/// arriving slowly past the budget are answered 503 (with Retry-After)
/// and counted; the held input is given back.
async fn slow_request_bodies_are_bounded_by_the_inbound_budget(legacy: bool) {
    let srv = TestServer::start_on(legacy, |c| c.max_total_inbound = INBOUND_BUDGET as usize);
    let addr = srv.addr;
    let mut clients = Vec::new();
    let mut refused = 0;
    for _ in 0..8 {
        let before = stats(addr).await;
        let (held, was) = (
            counter(&before, "inbound_bytes"),
            counter(&before, "inbound_budget_refusals"),
        );
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = "POST /publish/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n";
        use tokio::io::AsyncWriteExt;
        c.write_all(head.as_bytes()).await.unwrap();
        c.write_all(&vec![b'x'; HOG_PART]).await.unwrap();
        let s = wait_until_stat(addr, |s| {
            counter(s, "inbound_bytes") >= held + HOG_PART as u64 - 64
                || counter(s, "inbound_budget_refusals") > was
        })
        .await;
        if counter(&s, "inbound_budget_refusals") > was {
            refused += 1;
            let r = read_response(&mut c, &mut Vec::new()).await.unwrap();
            assert_eq!(r.status, 503, "{r:?}");
            assert_eq!(r.header("retry-after"), Some("1"));
        }
        clients.push(c);
    }
    assert!(
        refused >= 4,
        "2.4 MB of bodies vs a 1 MiB budget: {refused} refused"
    );
    let s = stats(addr).await;
    assert!(counter(&s, "inbound_bytes") <= 2 * INBOUND_BUDGET, "{s}");
    drop(clients);
    wait_stat(addr, "inbound_bytes", |n| n == 0).await;
}

on_both_drivers!(slow_request_bodies_are_bounded_by_the_inbound_budget);
