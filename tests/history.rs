//! Message history in embedded mode: offsets on deliveries, resume with
//! `since` (exactly what was missed, then live), positions that cannot be
//! recovered, TTL expiry, the size / byte / memory-budget bounds, and
//! `GET /history/{channel}` with its limit and auth.

mod common;
mod history_support;

use common::*;
use corecast::auth::{sign_token, unix_now};
use corecast::config::{Config, Secret};
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

fn with_history(size: usize) -> impl FnOnce(&mut Config) {
    move |c| c.history.size = size
}

async fn call(ws: &mut Ws, request: Value) -> Value {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
    next_json(ws).await
}

/// Publishes `n` messages `prefix0..` from one path-mode connection and
/// waits until the server took them all.
async fn publish_many(addr: std::net::SocketAddr, channel: &str, prefix: &str, n: usize) {
    let before = counter(&stats(addr).await, "messages_in");
    let mut p = ws_connect(addr, &format!("/ws/{channel}")).await;
    for i in 0..n {
        p.send(Message::text(format!("{prefix}{i}")))
            .await
            .expect("publish");
    }
    let want = before + n as u64;
    wait_stat(addr, "messages_in", |m| m >= want).await;
}

async fn history(addr: std::net::SocketAddr, path: &str) -> Value {
    let r = get(addr, path).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn offsets(h: &Value) -> Vec<u64> {
    h["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["offset"].as_u64().unwrap())
        .collect()
}

/// Reads 10, disconnects, misses 100, resumes with `since`: exactly those
/// 100 in order with `recovered:true`, then live messages, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_gets_exactly_the_missed_messages_then_live_ones() {
    let srv = TestServer::start(with_history(1000));
    let addr = srv.addr;
    let mut ws = ws_connect(addr, "/ws").await;
    let r = call(&mut ws, json!({"op":"subscribe","channel":"c","id":1})).await;
    assert_eq!(r["type"], "subscribed");
    assert_eq!(r["offset"], 0);
    assert!(
        r.get("recovered").is_none(),
        "a plain subscribe does not resume"
    );
    let epoch = r["epoch"].as_str().expect("an epoch").to_string();
    publish_many(addr, "c", "m", 10).await;
    let mut last = 0;
    for i in 0..10 {
        let m = next_json(&mut ws).await;
        assert_eq!(
            (m["offset"].as_u64(), m["data"].as_str()),
            (Some(i + 1), Some(&*format!("m{i}")))
        );
        last = i + 1;
    }
    drop(ws);
    publish_many(addr, "c", "missed", 100).await;

    let mut ws = ws_connect(addr, "/ws").await;
    let since = json!({"epoch": epoch, "offset": last});
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"c","since":since}),
    )
    .await;
    assert_eq!(
        r,
        json!({"type":"subscribed","channel":"c","recovered":true,"epoch":epoch,"offset":110})
    );
    for i in 0..100u64 {
        let m = next_json(&mut ws).await;
        assert_eq!(m["offset"], 11 + i);
        assert_eq!(m["data"], format!("missed{i}"));
    }
    publish(addr, "c", "live").await;
    let m = next_json(&mut ws).await;
    assert_eq!(
        (m["offset"].as_u64(), m["data"].as_str()),
        (Some(111), Some("live"))
    );
    let s = stats(addr).await;
    assert_eq!(counter(&s, "recoveries"), 1);
    assert_eq!(counter(&s, "recovered_messages"), 100);
    let m = get(addr, "/metrics").await;
    let text = String::from_utf8_lossy(&m.body);
    assert!(
        text.contains("corecast_recovered_messages_total 100"),
        "{text}"
    );
    // Every worker keeps a copy of the ring; the total counts each.
    let held = format!(
        "corecast_history_messages {}",
        111 * common::default_workers()
    );
    assert!(text.contains(&held), "{text}");
}

/// A `since` older than what is kept, or from another epoch, is answered
/// `recovered:false` with the current position and no replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrecoverable_positions_say_so_with_the_current_position() {
    let srv = TestServer::start(with_history(20));
    let addr = srv.addr;
    publish_many(addr, "c", "m", 50).await;
    let epoch = history(addr, "/history/c").await["epoch"]
        .as_str()
        .unwrap()
        .to_string();
    let mut ws = ws_connect(addr, "/ws").await;
    let since = json!({"epoch": epoch, "offset": 10});
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"c","since":since}),
    )
    .await;
    assert_eq!(
        r,
        json!({"type":"subscribed","channel":"c","recovered":false,"epoch":epoch,"offset":50})
    );
    let mut other = ws_connect(addr, "/ws").await;
    let since = json!({"epoch": "not-the-epoch", "offset": 50});
    let r = call(
        &mut other,
        json!({"op":"subscribe","channel":"c","since":since}),
    )
    .await;
    assert_eq!(
        (r["recovered"].as_bool(), r["offset"].as_u64()),
        (Some(false), Some(50))
    );
    // No replay: the next message either gets is the live one.
    publish(addr, "c", "live").await;
    assert_eq!(next_json(&mut ws).await["offset"], 51);
    assert_eq!(next_json(&mut other).await["offset"], 51);
    // The edge of what is kept (offset 31..50) still recovers.
    let since = json!({"epoch": epoch, "offset": 30});
    let r = call(&mut other, json!({"op":"subscribe","channel":"d"})).await;
    assert_eq!(r["offset"], 0);
    let mut third = ws_connect(addr, "/ws").await;
    let r = call(
        &mut third,
        json!({"op":"subscribe","channel":"c","since":since}),
    )
    .await;
    assert_eq!(
        r["recovered"], false,
        "offset 31 was trimmed by the live publish"
    );
    assert_eq!(counter(&stats(addr).await, "recoveries_failed"), 3);
}

/// A channel's history expires after `--history-ttl` without publishes;
/// without subscribers it is forgotten, epoch included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_expires_after_its_ttl() {
    let srv = TestServer::start(|c| {
        c.history.size = 100;
        c.history.ttl_ms = 300;
    });
    let addr = srv.addr;
    publish_many(addr, "c", "m", 3).await;
    let h = history(addr, "/history/c").await;
    assert_eq!(offsets(&h), [1, 2, 3]);
    let epoch = h["epoch"].as_str().unwrap().to_string();
    // With several workers each copy of the ring expires on its own
    // worker's sweep (every 100 ms): wait for all of them.
    wait_until("the history to expire", || async {
        history(addr, "/history/c").await["epoch"].is_null()
            && counter(&stats(addr).await, "history_messages") == 0
    })
    .await;
    let mut ws = ws_connect(addr, "/ws").await;
    let since = json!({"epoch": epoch, "offset": 1});
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"c","since":since}),
    )
    .await;
    assert_eq!(r["recovered"], false);
    assert_eq!(r["offset"], 0);
    assert_ne!(r["epoch"], epoch.as_str(), "a lost history has a new epoch");
}

/// `--history-size` and `--history-max-bytes` trim the oldest messages;
/// all histories together stay within what `--max-total-outbound` leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_bytes_and_budget_bounds_trim_the_oldest() {
    let srv = TestServer::start(|c| {
        c.history.size = 5;
        c.history.max_bytes = 3 * (100 + 48);
        c.max_total_outbound = 64 * 1024;
    });
    let addr = srv.addr;
    publish_many(addr, "small", "m", 8).await;
    assert_eq!(
        offsets(&history(addr, "/history/small").await),
        [4, 5, 6, 7, 8]
    );
    let mut p = ws_connect(addr, "/ws/big").await;
    for _ in 0..6 {
        p.send(Message::text("x".repeat(100))).await.unwrap();
    }
    wait_stat(addr, "messages_in", |n| n >= 14).await;
    assert_eq!(offsets(&history(addr, "/history/big").await), [4, 5, 6]);
    // The memory budget: 200 messages of 248 bytes would need 48 KiB;
    // history only gets what the outbound frames leave of 16 KiB.
    let srv2 = TestServer::start(|c| {
        c.history.size = 1000;
        c.history.max_bytes = 1 << 20;
        c.max_total_outbound = 16 * 1024;
        // The publisher reads nothing: its own echoes would fill the budget.
        c.exclude_sender = true;
    });
    let mut b = ws_connect(srv2.addr, "/ws/budget").await;
    for _ in 0..200 {
        b.send(Message::text("z".repeat(200))).await.unwrap();
    }
    wait_stat(srv2.addr, "messages_in", |n| n >= 200).await;
    let s = stats(srv2.addr).await;
    // Each worker holds a copy of the ring within its own budget (with
    // several workers, `/stats` totals the copies).
    let bytes = counter(&s, "history_bytes");
    let workers = common::default_workers() as u64;
    assert!(
        bytes > 8 * 1024 && bytes <= 16 * 1024 * workers,
        "history_bytes {bytes}"
    );
    let h = history(srv2.addr, "/history/budget?limit=1000").await;
    let kept = offsets(&h);
    assert_eq!(*kept.last().unwrap(), 200);
    assert!(kept.len() < 100, "kept {}", kept.len());
}

/// `GET /history/{c}`: `since` and `limit` (default 100, at most 1000),
/// binary as base64, and the same auth as subscribing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_endpoint_is_bounded_and_authorized() {
    let srv = TestServer::start(|c| {
        c.history.size = 2000;
        c.auth.token_secret = Some(Secret("s3cret".into()));
    });
    let addr = srv.addr;
    let exp = unix_now() + 3600;
    let claims = format!(r#"{{"exp":{exp},"subscribe":["c"],"publish":["c"]}}"#);
    let token = sign_token(&claims, b"s3cret");
    publish_many_with(addr, &format!("/ws/c?token={token}"), 1200).await;
    let q = |extra: &str| format!("/history/c?token={token}{extra}");
    let h = history(addr, &q("")).await;
    assert_eq!(offsets(&h), (1..=100).collect::<Vec<_>>(), "default limit");
    assert_eq!(h["offset"], 1200);
    assert_eq!(
        offsets(&history(addr, &q("&limit=5000")).await).len(),
        1000,
        "max limit"
    );
    assert_eq!(
        offsets(&history(addr, &q("&since=1195")).await),
        [1196, 1197, 1198, 1199, 1200]
    );
    assert_eq!(
        history(addr, &q("&since=1199")).await["messages"][0]["data_base64"],
        "AAE="
    );
    assert_eq!(get(addr, &q("&limit=x")).await.status, 400);
    assert_eq!(get(addr, "/history/c").await.status, 401, "no token");
    assert_eq!(
        get(addr, &format!("/history/d?token={token}")).await.status,
        403
    );
}

async fn publish_many_with(addr: std::net::SocketAddr, path: &str, n: usize) {
    let mut p = ws_connect(addr, path).await;
    for i in 0..n - 1 {
        p.send(Message::text(format!("m{i}"))).await.unwrap();
    }
    p.send(Message::binary(vec![0u8, 1])).await.unwrap();
    wait_stat(addr, "messages_in", |m| m >= n as u64).await;
}

/// Without `--history-size` nothing changes: no offsets, no epochs, and
/// `/history` answers 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_off_changes_nothing() {
    let srv = TestServer::start(|_| {});
    let mut ws = ws_connect(srv.addr, "/ws").await;
    let r = call(&mut ws, json!({"op":"subscribe","channel":"c"})).await;
    assert_eq!(r, json!({"type":"subscribed","channel":"c"}));
    publish(srv.addr, "c", "x").await;
    assert_eq!(
        next_json(&mut ws).await,
        json!({"type":"message","channel":"c","data":"x"})
    );
    assert_eq!(get(srv.addr, "/history/c").await.status, 404);
}

/// The seam under concurrency: 50 clients resume while a publisher sends
/// 5,000 messages per second; every client's offsets run on without a
/// gap or a duplicate from the replay into the live messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_resume_under_a_steady_publisher() {
    let srv = TestServer::start(|c| {
        c.history.size = 100_000;
        c.history.max_bytes = 64 << 20;
        // A replay is bounded by 2 x this; on a loaded machine a client
        // may be 20,000 messages behind when it resumes.
        c.max_outbound_queue = 16 << 20;
    });
    history_support::seam(srv.addr, srv.addr, srv.addr, 50, 5_000).await;
    assert_eq!(counter(&stats(srv.addr).await, "recoveries"), 50);
}
