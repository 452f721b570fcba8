//! Latest-value channels end to end (a namespace's `conflate = true`): a
//! subscriber that does not read while thousands of messages are
//! published stays connected and, when it reads, gets the newest value
//! of each key after whatever its socket buffers already held — where its
//! twin on a plain channel is cut as a slow consumer; offsets jump and
//! the replaced messages are counted.

mod common;

use common::*;
use futures_util::SinkExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

fn server() -> TestServer {
    TestServer::start(|c| {
        c.namespaces
            .specs
            .add_compact("px:conflate=true", "test")
            .unwrap();
        c.max_outbound_queue = 64 * 1024;
        c.history.size = 10_000;
    })
}

/// Publishes `n` messages of `size` bytes alternating keys BTC and ETH
/// (`seq,key,padding`) on `channel` over one keep-alive connection.
async fn publish_keyed(http: &mut HttpConn, channel: &str, n: usize, size: usize) {
    for i in 0..n {
        let key = if i % 2 == 0 { "BTC" } else { "ETH" };
        let mut body = format!("{i:06},{key},");
        body.extend(std::iter::repeat_n('.', size - body.len()));
        let req = post_request(
            &format!("/publish/{channel}?key={key}"),
            body.as_bytes(),
            true,
        );
        let r = http.request(&req).await;
        assert_eq!(r.status, 200, "publish {i}: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_subscriber_keeps_the_newest_value_and_its_plain_twin_is_cut() {
    let srv = server();
    let addr = srv.addr;
    // Small receive buffers: the kernel holds little, the queues the rest.
    let mut latest = RawWs::connect_small_rcvbuf(addr, "/ws/px:t", 4096).await;
    let mut plain = RawWs::connect_small_rcvbuf(addr, "/ws/plain", 4096).await;
    wait_stat(addr, "subscriptions", |n| n == 2).await;
    let (n, size) = (3000, 1000);
    let mut http = HttpConn::connect(addr).await;
    let mut http2 = HttpConn::connect(addr).await;
    let (a, b) = tokio::join!(
        publish_keyed(&mut http, "px:t", n, size),
        publish_keyed(&mut http2, "plain", n, size)
    );
    let _ = (a, b);
    let s = wait_stat(addr, "slow_consumer_disconnects", |n| n >= 1).await;
    assert_eq!(
        counter(&s, "slow_consumer_disconnects"),
        1,
        "only the plain twin"
    );
    assert!(counter(&s, "messages_conflated") > 2000, "{s}");
    // The plain twin gets what its buffers held, then close 1008.
    let (_, ending) = plain.read_until_close().await;
    assert!(matches!(ending, Ending::Close(Some(1008))), "{ending:?}");

    // The stalled subscriber reads now: what its buffers held (old), then
    // the newest value of each key, in publish order (never an older
    // message after a newer one).
    let mut last = std::collections::HashMap::new();
    let mut prev_seq = None;
    let mut frames = 0;
    while last.get("BTC") != Some(&(n - 2)) || last.get("ETH") != Some(&(n - 1)) {
        let f = latest.next_frame().await;
        frames += 1;
        let text = String::from_utf8(f.payload).unwrap();
        let mut parts = text.split(',');
        let seq: usize = parts.next().unwrap().parse().unwrap();
        let key = parts.next().unwrap().to_string();
        assert!(prev_seq < Some(seq), "{seq} after {prev_seq:?}");
        prev_seq = Some(seq);
        last.insert(key, seq);
    }
    assert!(
        frames < 200,
        "{frames} frames of {n}: the queue held the newest, not a backlog"
    );
    // Still connected and live.
    http.publish("px:t", "fresh").await;
    assert_eq!(latest.next_frame().await.payload, b"fresh");
}

/// JSON subscribers see the jump in offsets, and resume from the last one
/// they read as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_jump_over_replaced_messages_and_resume_still_works() {
    let srv = server();
    let addr = srv.addr;
    let mut ws = ws_connect(addr, "/ws").await;
    ws.send(Message::text(
        json!({"op":"subscribe","channel":"px:j","id":1}).to_string(),
    ))
    .await
    .unwrap();
    let r = next_json(&mut ws).await;
    assert_eq!(r["type"], "subscribed", "{r}");
    let epoch = r["epoch"].as_str().unwrap().to_string();
    // Published while the client does not read: ws's socket buffers take
    // some, the queue conflates the rest.
    let mut http = HttpConn::connect(addr).await;
    publish_keyed(&mut http, "px:j", 3000, 1000).await;
    let mut offsets = Vec::new();
    loop {
        let m = next_json(&mut ws).await;
        let o = m["offset"].as_u64().unwrap();
        offsets.push(o);
        if o == 3000 {
            break;
        }
    }
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "in order");
    assert!(
        offsets.len() < 3000,
        "some were replaced: {}",
        offsets.len()
    );
    assert!(counter(&stats(addr).await, "messages_conflated") > 0);
    // Resuming from an offset the client skipped over replays from there.
    let mut again = ws_connect(addr, "/ws").await;
    let since = json!({"epoch": epoch, "offset": 2997});
    again
        .send(Message::text(
            json!({"op":"subscribe","channel":"px:j","since":since}).to_string(),
        ))
        .await
        .unwrap();
    let r = next_json(&mut again).await;
    assert_eq!(r["recovered"], true, "{r}");
    for want in [2998, 2999, 3000] {
        assert_eq!(next_json(&mut again).await["offset"], want);
    }
}
