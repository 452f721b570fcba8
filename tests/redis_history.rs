//! History in Redis mode, with real redis-servers: resume on another
//! instance (offsets are Redis's, the same everywhere), a Redis restarted
//! without persistence (new epoch: not recovered), the subscriber
//! connection killed while messages flow (backfilled in order, nothing
//! lost, nothing twice), and a flushed script cache (NOSCRIPT: reloaded).

mod common;
mod history_support;
mod redis_support;

use common::*;
use futures_util::SinkExt;
use redis_support::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

fn with_history(c: &mut corecast::Config) {
    c.history.size = 2000;
}

async fn pair(redis: &RedisServer) -> (TestServer, TestServer) {
    let a = instance(redis.url("", ""), with_history);
    let b = instance(redis.url("", ""), with_history);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    (a, b)
}

async fn call(ws: &mut Ws, request: Value) -> Value {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
    next_json(ws).await
}

/// Publishes `data` over HTTP (keep-alive), checking each is accepted.
async fn publish_range(http: &mut HttpConn, channel: &str, range: std::ops::Range<usize>) {
    for i in range {
        let req = post_request(
            &format!("/publish/{channel}"),
            format!("m{i}").as_bytes(),
            true,
        );
        let r = http.request(&req).await;
        assert_eq!(r.status, 200, "publish {i}: {r:?}");
    }
}

/// The resume test: subscribe on A, read 10, disconnect; 100 are
/// published on B; resume on B with `since` → exactly those 100 in order,
/// `recovered:true`, then live ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_on_another_instance_gets_exactly_the_missed_messages() {
    let redis = RedisServer::start(&[]).await;
    let (a, b) = pair(&redis).await;
    let mut rc = RespConn::open(redis.port, None).await;
    let mut ws = ws_connect(a.addr, "/ws").await;
    let r = call(&mut ws, json!({"op":"subscribe","channel":"c"})).await;
    assert_eq!(
        (r["type"].as_str(), r["offset"].as_u64()),
        (Some("subscribed"), Some(0))
    );
    let epoch = r["epoch"].as_str().expect("epoch").to_string();
    rc.wait_numsub("c", 1).await;
    let mut http = HttpConn::connect(b.addr).await;
    publish_range(&mut http, "c", 0..10).await;
    for i in 0..10u64 {
        let m = next_json(&mut ws).await;
        assert_eq!(
            (m["offset"].as_u64(), m["data"].as_str()),
            (Some(i + 1), Some(&*format!("m{i}")))
        );
    }
    drop(ws);
    rc.wait_numsub("c", 0).await;
    publish_range(&mut http, "c", 10..110).await;

    let mut ws = ws_connect(b.addr, "/ws").await;
    let since = json!({"epoch": epoch, "offset": 10});
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"c","since":since,"id":7}),
    )
    .await;
    assert_eq!(
        r,
        json!({"type":"subscribed","channel":"c","recovered":true,"epoch":epoch,"offset":110,"id":7})
    );
    for i in 10..110u64 {
        let m = next_json(&mut ws).await;
        assert_eq!(
            (m["offset"].as_u64(), m["data"].as_str()),
            (Some(i + 1), Some(&*format!("m{i}")))
        );
    }
    rc.wait_numsub("c", 1).await;
    let mut from_a = HttpConn::connect(a.addr).await;
    publish_range(&mut from_a, "c", 110..111).await;
    let m = next_json(&mut ws).await;
    assert_eq!(
        (m["offset"].as_u64(), m["data"].as_str()),
        (Some(111), Some("m110"))
    );
    assert_eq!(counter(&stats(b.addr).await, "recovered_messages"), 100);
    // The endpoint reads the same stream, from any instance.
    let h = get(a.addr, "/history/c?since=105&limit=3").await.json();
    assert_eq!(h["offset"], 111);
    let offsets: Vec<u64> = h["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(offsets, [106, 107, 108]);
    // A channel without history: answered, and no key is created.
    let h = get(a.addr, "/history/never").await.json();
    assert_eq!(
        (h["epoch"].is_null(), h["offset"].as_u64()),
        (true, Some(0))
    );
    assert_eq!(rc.cmd(&["EXISTS", "corecast:!h{never}:m"]).await.int(), 0);
    // Too old (trimmed would be the same): a wrong epoch is not recovered.
    let mut other = ws_connect(a.addr, "/ws").await;
    let since = json!({"epoch": "nope", "offset": 10});
    let r = call(
        &mut other,
        json!({"op":"subscribe","channel":"c","since":since}),
    )
    .await;
    assert_eq!(
        (r["recovered"].as_bool(), r["offset"].as_u64()),
        (Some(false), Some(111))
    );
}

/// Redis restarted without persistence: the history and its epoch are
/// gone; a resume says `recovered:false` with the new epoch, and a JSON
/// subscriber that stayed is told (a gap notice at offset 0 of the new
/// epoch) while a path-mode one, which missed nothing, stays connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_without_persistence_is_a_new_epoch() {
    let mut redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), with_history);
    wait_readyz(a.addr, 200).await;
    let mut ws = ws_connect(a.addr, "/ws").await;
    let r = call(&mut ws, json!({"op":"subscribe","channel":"c"})).await;
    let epoch = r["epoch"].as_str().unwrap().to_string();
    let mut http = HttpConn::connect(a.addr).await;
    publish_range(&mut http, "c", 0..5).await;
    let mut stays = ws_connect(a.addr, "/ws").await;
    call(&mut stays, json!({"op":"subscribe","channel":"c"})).await;
    let mut path = ws_connect(a.addr, "/ws/c").await;
    for i in 1..=5u64 {
        assert_eq!(next_json(&mut ws).await["offset"], i);
    }
    drop(ws);
    redis.kill();
    redis.restart().await;
    wait_readyz(a.addr, 200).await;
    publish_range(&mut HttpConn::connect(a.addr).await, "c", 100..101).await;
    let g = next_json(&mut stays).await;
    assert_eq!(
        (g["type"].as_str(), g["offset"].as_u64()),
        (Some("gap"), Some(0))
    );
    assert_ne!(g["epoch"], epoch.as_str());
    assert_eq!(next_json(&mut stays).await["offset"], 1);
    assert_eq!(next_text(&mut path).await, "m100");
    assert_eq!(counter(&stats(a.addr).await, "history_gaps"), 0);
    let mut ws = ws_connect(a.addr, "/ws").await;
    let since = json!({"epoch": epoch, "offset": 5});
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"c","since":since}),
    )
    .await;
    assert_eq!(r["recovered"], false);
    assert_ne!(r["epoch"], epoch.as_str());
    assert_eq!(r["offset"], 1);
}

/// 1,000 messages published from B while the subscriber connections are
/// killed (`CLIENT KILL TYPE pubsub`): A's path-mode and JSON subscribers
/// get all of them, in order, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_subscriber_connection_loses_nothing() {
    one_worker_per_server("counts instances as Redis subscribers");
    let redis = RedisServer::start(&[]).await;
    let (a, b) = pair(&redis).await;
    kill_during_publishes(&redis, &a, &b, KillWhom::AllPubSub).await;
}

/// The same with only A's subscriber connection killed, so B goes on
/// publishing while A is away: A reads the missed range back from the
/// stream (`backfilled_messages`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_range_is_backfilled_from_the_stream() {
    one_worker_per_server("counts instances as Redis subscribers");
    let redis = RedisServer::start(&[]).await;
    let (a, b) = pair(&redis).await;
    kill_during_publishes(&redis, &a, &b, KillWhom::OnlyA).await;
    assert!(counter(&stats(a.addr).await, "backfilled_messages") > 0);
    assert_eq!(counter(&stats(a.addr).await, "history_gaps"), 0);
}

enum KillWhom {
    AllPubSub,
    OnlyA,
}

async fn kill_during_publishes(
    redis: &RedisServer,
    a: &TestServer,
    b: &TestServer,
    whom: KillWhom,
) {
    let mut rc = RespConn::open(redis.port, None).await;
    let mut path = ws_connect(a.addr, "/ws/c").await;
    let mut json_sub = ws_connect(a.addr, "/ws").await;
    assert_eq!(
        call(&mut json_sub, json!({"op":"subscribe","channel":"c"})).await["offset"],
        0
    );
    rc.wait_numsub("c", 1).await;
    // B publishes from JSON mode, with no subscriber of its own.
    let mut publisher = ws_connect(b.addr, "/ws").await;
    let send = |i: usize| {
        let m = json!({"op":"publish","channel":"c","data":format!("m{i}")}).to_string();
        Message::text(m)
    };
    for i in 0..500 {
        publisher.send(send(i)).await.unwrap();
    }
    match whom {
        KillWhom::AllPubSub => {
            rc.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).await;
        }
        KillWhom::OnlyA => {
            kill_a_subscriber(&mut rc).await;
            // A stays away (new connections are refused at maxclients)
            // until B has published everything: A must read it back.
            let n = rc.info_u64("clients", "connected_clients").await;
            rc.cmd(&["CONFIG", "SET", "maxclients", &n.to_string()])
                .await;
        }
    }
    for i in 500..1000 {
        publisher.send(send(i)).await.unwrap();
    }
    if let KillWhom::OnlyA = whom {
        let deadline = std::time::Instant::now() + DEADLINE;
        while rc.cmd(&["HGET", "corecast:!h{c}:m", "t"]).await.text() != "1000" {
            assert!(
                std::time::Instant::now() < deadline,
                "B did not publish all 1,000"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        rc.cmd(&["CONFIG", "SET", "maxclients", "10000"]).await;
    }
    for i in 0..1000u64 {
        let t = next_text(&mut path).await;
        assert_eq!(t, format!("m{i}"), "path mode, message {i}");
        let m = next_json(&mut json_sub).await;
        assert_eq!(
            (m["offset"].as_u64(), m["data"].as_str()),
            (Some(i + 1), Some(&*format!("m{i}"))),
            "json"
        );
    }
    // Nothing more (no duplicate) before a marker published afterwards.
    publisher.send(send(1000)).await.unwrap();
    assert_eq!(next_text(&mut path).await, "m1000");
    assert_eq!(next_json(&mut json_sub).await["offset"], 1001);
}

/// Kills the one subscriber connection with two subscriptions (A's: its
/// canary and `c`; B's has only its canary).
async fn kill_a_subscriber(rc: &mut RespConn) {
    let list = rc.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]).await.text();
    let line = list
        .lines()
        .find(|l| l.split(' ').any(|f| f == "sub=2"))
        .unwrap_or_else(|| panic!("A's subscriber in {list}"));
    let id = line.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
    assert_eq!(rc.cmd(&["CLIENT", "KILL", "ID", id]).await.int(), 1);
}

/// `SCRIPT FLUSH`: the next publish meets NOSCRIPT; the instance loads
/// the scripts again and resends it — delivered, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_script_cache_is_reloaded() {
    let redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), with_history);
    wait_readyz(a.addr, 200).await;
    let mut rc = RespConn::open(redis.port, None).await;
    let mut ws = ws_connect(a.addr, "/ws").await;
    call(&mut ws, json!({"op":"subscribe","channel":"c"})).await;
    rc.wait_numsub("c", 1).await;
    let mut http = HttpConn::connect(a.addr).await;
    publish_range(&mut http, "c", 0..1).await;
    assert_eq!(next_json(&mut ws).await["offset"], 1);
    rc.cmd(&["SCRIPT", "FLUSH"]).await;
    let req = post_request("/publish/c", b"after flush", true);
    let r = http.request(&req).await;
    assert!(matches!(r.status, 200 | 202), "{r:?}");
    let m = next_json(&mut ws).await;
    assert_eq!(
        (m["offset"].as_u64(), m["data"].as_str()),
        (Some(2), Some("after flush"))
    );
}

/// A range Redis no longer has (trimmed to `--history-size` while A's
/// subscriber connection was away): JSON subscribers get `{"type":"gap"}`
/// and go on from there, path-mode subscribers are closed with 1012, and
/// the gap is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_redis_trimmed_is_a_gap_notice_not_a_silent_loss() {
    one_worker_per_server("counts instances as Redis subscribers");
    let redis = RedisServer::start(&[]).await;
    let small = |c: &mut corecast::Config| c.history.size = 10;
    let a = instance(redis.url("", ""), small);
    let b = instance(redis.url("", ""), small);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut rc = RespConn::open(redis.port, None).await;
    let mut path = ws_connect(a.addr, "/ws/c").await;
    let mut json_sub = ws_connect(a.addr, "/ws").await;
    let epoch = call(&mut json_sub, json!({"op":"subscribe","channel":"c"})).await["epoch"]
        .as_str()
        .unwrap()
        .to_string();
    rc.wait_numsub("c", 1).await;
    let mut http = HttpConn::connect(b.addr).await;
    publish_range(&mut http, "c", 0..5).await;
    for i in 1..=5u64 {
        assert_eq!(next_json(&mut json_sub).await["offset"], i);
        assert_eq!(next_text(&mut path).await, format!("m{}", i - 1));
    }
    kill_a_subscriber(&mut rc).await;
    let n = rc.info_u64("clients", "connected_clients").await;
    rc.cmd(&["CONFIG", "SET", "maxclients", &n.to_string()])
        .await;
    publish_range(&mut http, "c", 5..105).await;
    rc.cmd(&["CONFIG", "SET", "maxclients", "10000"]).await;
    // Offsets 6..=95 are gone (the stream keeps 96..=105).
    let g = next_json(&mut json_sub).await;
    assert_eq!(
        g,
        json!({"type":"gap","channel":"c","epoch":epoch,"offset":95})
    );
    for i in 96..=105u64 {
        assert_eq!(next_json(&mut json_sub).await["offset"], i);
    }
    assert_eq!(expect_close(&mut path).await, 1012);
    assert_eq!(counter(&stats(a.addr).await, "history_gaps"), 1);
}

/// The seam under concurrency in Redis mode: a publisher on A at 5,000
/// messages per second, 50 clients that subscribe on A and resume on B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_resume_on_another_instance_under_a_steady_publisher() {
    let redis = RedisServer::start(&[]).await;
    // Long enough that no client falls out of it on a loaded machine.
    let long = |c: &mut corecast::Config| {
        c.history.size = 100_000;
        c.history.max_bytes = 64 << 20;
        // A replay is bounded by 2 x this (see the embedded seam test).
        c.max_outbound_queue = 16 << 20;
    };
    let a = instance(redis.url("", ""), long);
    let b = instance(redis.url("", ""), long);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    history_support::seam(a.addr, a.addr, b.addr, 50, 5_000).await;
    assert_eq!(counter(&stats(b.addr).await, "recoveries"), 50);
}

/// A missed range larger than `--redis-max-reply-size` is read back in
/// parts (each reply within the bound), in order: no reply over the
/// bound (which would drop the command connection, and again on every
/// retry), no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_backfill_is_read_in_parts_within_the_reply_bound() {
    let redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), |c| {
        c.history.size = 2000;
        c.redis.max_reply_size = 16 * 1024;
    });
    let b = instance(redis.url("", ""), with_history);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut rc = RespConn::open(redis.port, None).await;
    let mut json_sub = ws_connect(a.addr, "/ws").await;
    call(&mut json_sub, json!({"op":"subscribe","channel":"c"})).await;
    rc.wait_numsub("c", 1).await;
    kill_a_subscriber(&mut rc).await;
    let n = rc.info_u64("clients", "connected_clients").await;
    rc.cmd(&["CONFIG", "SET", "maxclients", &n.to_string()])
        .await;
    let mut http = HttpConn::connect(b.addr).await;
    let pad = "p".repeat(200);
    for i in 0..300 {
        let req = post_request("/publish/c", format!("{i}:{pad}").as_bytes(), true);
        assert_eq!(http.request(&req).await.status, 200);
    }
    rc.cmd(&["CONFIG", "SET", "maxclients", "10000"]).await;
    for i in 0..300u64 {
        let m = next_json(&mut json_sub).await;
        assert_eq!(m["offset"], i + 1, "{m}");
        assert_eq!(m["data"], format!("{i}:{pad}"));
    }
    let s = stats(a.addr).await;
    assert_eq!(counter(&s, "backfilled_messages"), 300);
    assert_eq!(counter(&s, "redis_protocol_errors"), 0);
    assert_eq!(counter(&s, "history_gaps"), 0);
}
