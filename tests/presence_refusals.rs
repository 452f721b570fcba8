//! A refused subscribe leaves nothing behind (issue 28, item 2): no
//! presence membership, no join announced, no event subscription, no
//! Redis presence key — in Redis mode with history (where the subscribe
//! waits for a read from Redis) and embedded.

mod common;
mod redis_support;

use std::net::SocketAddr;

use common::*;
use corecast::auth::sign_token;
use corecast::config::Secret;
use redis_support::*;
use serde_json::{json, Value};

const SECRET: &str = "refusal-test-secret-0123456789abcdef";

fn token(sub: &str) -> String {
    let claims = format!(r#"{{"exp":9999999999,"sub":"{sub}","subscribe":["*"],"publish":["*"]}}"#);
    sign_token(&claims, SECRET.as_bytes())
}

fn tweak(c: &mut corecast::Config) {
    c.auth.token_secret = Some(Secret(SECRET.into()));
    c.presence.set_patterns("room-*").unwrap();
    c.history.size = 10;
    // Two presence subscriptions: each takes the channel and its events.
    c.max_subscriptions = 4;
}

async fn ask(ws: &mut Ws, v: Value) -> Value {
    common::pusher::send(ws, v).await;
    loop {
        let r = next_json(ws).await;
        if !matches!(r["type"].as_str(), Some("join" | "leave")) {
            return r;
        }
    }
}

async fn members(addr: SocketAddr, channel: &str) -> Vec<String> {
    let r = get(
        addr,
        &format!("/presence/{channel}?token={}", token("reader")),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let list = v["members"].as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|m| m["user"].as_str().unwrap().to_string())
        .collect()
}

/// `mallory` subscribes to ten presence channels past the limit: two are
/// taken, eight refused, and the refused ones show no trace of her. Her
/// connection is returned, still open.
async fn refusals_leave_no_trace(addr: SocketAddr) -> Ws {
    let mut ws = ws_connect(addr, &format!("/ws?token={}", token("mallory"))).await;
    let mut answers = Vec::new();
    for n in 0..10 {
        let req = json!({"op":"subscribe","channel":format!("room-{n}"),"presence":true,"id":n});
        answers.push(ask(&mut ws, req).await);
    }
    for (n, r) in answers.iter().enumerate() {
        let want = if n < 2 { "subscribed" } else { "error" };
        assert_eq!(r["type"], want, "room-{n}: {r}");
        if n >= 2 {
            assert_eq!(r["code"], "too_many_subscriptions", "room-{n}: {r}");
        }
    }
    assert_eq!(members(addr, "room-0").await, ["mallory"]);
    for n in 2..10 {
        assert_eq!(
            members(addr, &format!("room-{n}")).await,
            Vec::<String>::new()
        );
    }
    let s = stats(addr).await;
    assert_eq!(counter(&s, "subscriptions"), 4, "{s}");
    // Unsubscribing frees room for another.
    let r = ask(
        &mut ws,
        json!({"op":"unsubscribe","channel":"room-1","id":20}),
    )
    .await;
    assert_eq!(r["type"], "unsubscribed", "{r}");
    let req = json!({"op":"subscribe","channel":"room-7","presence":true,"id":21});
    assert_eq!(ask(&mut ws, req).await["type"], "subscribed");
    assert_eq!(members(addr, "room-7").await, ["mallory"]);
    ws
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscribe_leaves_no_presence_in_redis_mode() {
    let redis = RedisServer::start(&[]).await;
    let srv = instance(redis.url("", ""), tweak);
    wait_readyz(srv.addr, 200).await;
    let _mallory = refusals_leave_no_trace(srv.addr).await;
    // Redis holds presence for the two channels she is in, nothing else.
    let mut r = RespConn::open(redis.port, None).await;
    let keys = r.cmd(&["KEYS", "*!p{presence/room-[2-689]}*"]).await;
    assert_eq!(keys, Resp::Array(Some(vec![])), "{keys:?}");
    let kept = r.cmd(&["KEYS", "*!p{presence/room-0}*"]).await;
    assert_ne!(kept, Resp::Array(Some(vec![])), "{kept:?}");
}

/// The history read fails (Redis frozen past the command timeout): the
/// subscribe is refused `unavailable`, and once Redis answers again the
/// membership made for it is gone too (before: the instance kept
/// refreshing it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_refused_for_history_leaves_no_presence() {
    let mut redis = RedisServer::start(&[]).await;
    let srv = instance(redis.url("", ""), |c| {
        tweak(c);
        c.redis.command_timeout = std::time::Duration::from_millis(300);
        c.presence.refresh_ms = 200;
    });
    wait_readyz(srv.addr, 200).await;
    let mut ws = ws_connect(srv.addr, &format!("/ws?token={}", token("mallory"))).await;
    redis.freeze();
    let req = json!({"op":"subscribe","channel":"room-1","presence":true,"id":1});
    let r = within("the refusal", ask(&mut ws, req)).await;
    assert_eq!(r["code"], "unavailable", "{r}");
    redis.thaw();
    wait_readyz(srv.addr, 200).await;
    wait_until("no member left in room-1", || async {
        members(srv.addr, "room-1").await.is_empty()
    })
    .await;
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "subscriptions"), 0, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscribe_leaves_no_presence_embedded() {
    let srv = TestServer::start(tweak);
    refusals_leave_no_trace(srv.addr).await;
}
