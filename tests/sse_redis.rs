//! Server-Sent Events beside WebSockets in Redis mode, with a real
//! redis-server: a stream and a JSON WebSocket on different instances get
//! the same messages with the same positions (Redis's offsets and epoch,
//! in the stream's ids); a stream resumed on another instance with
//! `Last-Event-ID` gets exactly what it missed; without history, a
//! stream's `subscribed` waits for Redis to confirm the channel.

mod common;
mod redis_support;
mod sse_support;

use common::*;
use futures_util::SinkExt;
use redis_support::*;
use serde_json::json;
use sse_support::*;
use tokio_tungstenite::tungstenite::Message;

async fn pair(redis: &RedisServer, history: usize) -> (TestServer, TestServer) {
    let a = instance(redis.url("", ""), |c| c.history.size = history);
    let b = instance(redis.url("", ""), |c| c.history.size = history);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_and_websockets_share_positions_and_resume_across_instances() {
    let redis = RedisServer::start(&[]).await;
    let (a, b) = pair(&redis, 1000).await;
    let mut rc = RespConn::open(redis.port, None).await;
    let mut ws = ws_connect(a.addr, "/ws").await;
    ws.send(Message::text(
        json!({"op":"subscribe","channel":"c"}).to_string(),
    ))
    .await
    .unwrap();
    let r = next_json(&mut ws).await;
    let epoch = r["epoch"].as_str().expect("epoch").to_string();
    let mut sse = Sse::open(b.addr, "/sse?channel=c", &[]).await;
    let sub = sse.next_event().await;
    assert_eq!(sub.id, Some(format!("c:{epoch}:0")), "one epoch: Redis's");
    rc.wait_numsub("c", 2).await;

    let mut http = HttpConn::connect(a.addr).await;
    for i in 1..=5 {
        http.publish("c", &format!("m{i}")).await;
    }
    for i in 1..=5u64 {
        let m = next_json(&mut ws).await;
        assert_eq!(
            (m["offset"].as_u64(), m["data"].as_str()),
            (Some(i), Some(&*format!("m{i}")))
        );
        let e = sse.next_event().await;
        assert_eq!(e.id, Some(format!("c:{epoch}:{i}")));
        assert_eq!(e.json()["data"], format!("m{i}"));
    }
    // The stream leaves after 5; 3 more are published; it comes back on
    // the other instance with its Last-Event-ID.
    drop(sse);
    wait_stat(b.addr, "sse_connections", |n| n == 0).await;
    for i in 6..=8 {
        http.publish("c", &format!("m{i}")).await;
    }
    let last = format!("c:{epoch}:5");
    let mut sse = Sse::open(a.addr, "/sse?channel=c", &[("Last-Event-ID", &last)]).await;
    let sub = sse.next_event().await;
    assert_eq!(
        (sub.name.as_str(), sub.id.clone()),
        ("subscribed", Some(format!("c:{epoch}:8")))
    );
    assert_eq!(sub.json()["recovered"], true);
    for i in 6..=8u64 {
        let e = sse.next_event().await;
        assert_eq!(e.id, Some(format!("c:{epoch}:{i}")));
        assert_eq!(e.json()["data"], format!("m{i}"));
    }
    let mut from_b = HttpConn::connect(b.addr).await;
    from_b.publish("c", "m9").await;
    let e = sse.next_event().await;
    assert_eq!(
        (e.id.clone(), e.json()["data"].clone()),
        (Some(format!("c:{epoch}:9")), json!("m9"))
    );
    for i in 6..=9u64 {
        assert_eq!(next_json(&mut ws).await["offset"].as_u64(), Some(i));
    }
    // A position Redis's epoch does not know is one gap.
    let mut sse = Sse::open(b.addr, "/sse?channel=c", &[("Last-Event-ID", "c:feed:3")]).await;
    let gap = sse.next_event().await;
    assert_eq!(
        (gap.name.as_str(), gap.id),
        ("gap", Some(format!("c:{epoch}:9")))
    );
    assert!(counter(&stats(a.addr).await, "recovered_messages") >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_history_a_stream_is_subscribed_once_redis_confirms() {
    one_worker_per_server("counts instances as Redis subscribers");
    let redis = RedisServer::start(&[]).await;
    let (a, b) = pair(&redis, 0).await;
    let mut rc = RespConn::open(redis.port, None).await;
    let mut sse = Sse::open(b.addr, "/sse?channel=n&channel=m", &[]).await;
    // (Each as Redis confirms it: in either order.)
    let mut confirmed = Vec::new();
    for _ in 0..2 {
        let sub = sse.next_event().await;
        assert_eq!((sub.name.as_str(), sub.id.clone()), ("subscribed", None));
        confirmed.push(sub.json()["channel"].as_str().unwrap().to_string());
    }
    confirmed.sort();
    assert_eq!(confirmed, ["m", "n"]);
    // `subscribed` came after Redis confirmed: a publish on the other
    // instance right after it arrives.
    assert_eq!(rc.numsub("n").await, 1);
    let mut ws = ws_connect(b.addr, "/ws/n").await;
    rc.wait_numsub("n", 1).await;
    let mut http = HttpConn::connect(a.addr).await;
    http.publish("n", "hello").await;
    let e = sse.next_event().await;
    assert_eq!((e.name.as_str(), e.id.clone()), ("message", None));
    assert_eq!(
        e.json(),
        json!({"type":"message","channel":"n","data":"hello"})
    );
    assert_eq!(next_text(&mut ws).await, "hello");
}

/// Redis restarted without persistence: a stream that stayed is told with
/// one `gap` at offset 0 of the new epoch (its id moves there, so its next
/// reconnect resumes in the new epoch), then gets the new messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_epoch_in_redis_is_a_gap_event() {
    let mut redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), |c| c.history.size = 100);
    wait_readyz(a.addr, 200).await;
    let mut sse = Sse::open(a.addr, "/sse?channel=c", &[]).await;
    let old = epoch_of(&sse.next_event().await.id.expect("an id"));
    let mut http = HttpConn::connect(a.addr).await;
    http.publish("c", "before").await;
    assert_eq!(sse.next_event().await.id, Some(format!("c:{old}:1")));
    redis.kill();
    redis.restart().await;
    wait_readyz(a.addr, 200).await;
    HttpConn::connect(a.addr).await.publish("c", "after").await;
    let gap = sse.next_event().await;
    assert_eq!(gap.name, "gap");
    let new = epoch_of(gap.id.as_deref().expect("an id"));
    assert_ne!(new, old);
    assert_eq!(gap.id, Some(format!("c:{new}:0")));
    let m = sse.next_event().await;
    assert_eq!(
        (m.id.clone(), m.json()["data"].clone()),
        (Some(format!("c:{new}:1")), json!("after"))
    );
}
