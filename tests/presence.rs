//! Presence (`--presence-channels`), embedded mode: members counted per
//! user, join/leave events in order with the channel's messages, the
//! `presence` query and `GET /presence/{channel}`, and the bounds.

mod common;

use common::*;
use corecast::auth::sign_token;
use corecast::config::Secret;
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const SECRET: &str = "presence-test-secret-0123456789abcdef";

fn token(sub: &str, info: Option<&str>) -> String {
    let info = info.map(|i| format!(r#","info":{i}"#)).unwrap_or_default();
    let claims =
        format!(r#"{{"exp":9999999999,"sub":"{sub}","subscribe":["*"],"publish":["*"]{info}}}"#);
    sign_token(&claims, SECRET.as_bytes())
}

fn with_presence(c: &mut corecast::Config) {
    c.auth.token_secret = Some(Secret(SECRET.into()));
    c.presence.set_patterns("room-*,lobby").unwrap();
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.expect("send");
}

async fn user(addr: std::net::SocketAddr, sub: &str, info: Option<&str>) -> Ws {
    ws_connect(addr, &format!("/ws?token={}", token(sub, info))).await
}

/// Subscribes `ws` to `channel` (with events when `events`) and reads the ack.
async fn join(ws: &mut Ws, channel: &str, events: bool) {
    let req = json!({"op":"subscribe","channel":channel,"presence":events,"id":"s"});
    send(ws, req).await;
    let ack = next_json(ws).await;
    assert_eq!(ack["type"], "subscribed", "{ack}");
}

async fn query(ws: &mut Ws, channel: &str) -> Value {
    send(ws, json!({"op":"presence","channel":channel,"id":9})).await;
    next_json(ws).await
}

fn join_event(c: &str, u: &str, info: Value) -> Value {
    json!({"type":"join","channel":c,"user":u,"info":info})
}

fn leave_event(c: &str, u: &str) -> Value {
    json!({"type":"leave","channel":c,"user":u})
}

/// `GET /presence/{channel}` with a token (`query`: more parameters).
async fn presence_http(addr: std::net::SocketAddr, channel: &str, query: &str) -> HttpResponse {
    let t = token("reader", None);
    get(addr, &format!("/presence/{channel}?{query}token={t}")).await
}

/// Status of a WebSocket upgrade attempt (101 on success).
async fn upgrade_status(addr: std::net::SocketAddr, path_and_query: &str) -> u16 {
    let req = format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {RFC_KEY}\r\n\r\n"
    );
    http_raw(addr, req.as_bytes()).await.status
}

/// Reads `ws` until `quiet` passes without a message; returns them all.
async fn drain(ws: &mut Ws, quiet: std::time::Duration) -> Vec<Value> {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    while let Ok(Some(Ok(m))) = tokio::time::timeout(quiet, ws.next()).await {
        if let Message::Text(t) = m {
            out.push(serde_json::from_str(&t).expect("JSON"));
        }
    }
    out
}

/// A user's second connection does not join again, closing one of two
/// does not leave, closing the last leaves once; events come in order
/// with the channel's messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_join_once_and_leave_with_their_last_connection() {
    let srv = TestServer::start(with_presence);
    let addr = srv.addr;
    let mut watcher = user(addr, "w", None).await;
    join(&mut watcher, "room-1", true).await;
    let own = json!({"type":"join","channel":"room-1","user":"w"});
    assert_eq!(
        next_json(&mut watcher).await,
        own,
        "its own join, without info"
    );

    let mut ana1 = user(addr, "ana", Some(r#"{"name":"Ana"}"#)).await;
    join(&mut ana1, "room-1", false).await;
    assert_eq!(
        next_json(&mut watcher).await,
        join_event("room-1", "ana", json!({"name":"Ana"}))
    );
    let mut ana2 = user(addr, "ana", Some(r#"{"name":"Ana"}"#)).await;
    join(&mut ana2, "room-1", false).await;
    publish(addr, "room-1", "after second tab").await;
    // The message comes next: the second connection announced nothing.
    let m = next_json(&mut watcher).await;
    assert_eq!(m["type"], "message", "{m}");

    let q = query(&mut watcher, "room-1").await;
    assert_eq!(q["count"], 2);
    assert_eq!(q["id"], 9);
    assert_eq!(
        q["members"],
        json!([
            {"user":"ana","info":{"name":"Ana"},"connections":2},
            {"user":"w","connections":1}
        ])
    );
    assert_eq!(
        get(addr, "/presence/room-1").await.status,
        401,
        "needs a token"
    );
    let http = presence_http(addr, "room-1", "").await;
    assert_eq!(http.status, 200);
    assert_eq!(http.json()["count"], 2);
    assert_eq!(http.json()["members"][0]["connections"], 2);
    let count = presence_http(addr, "room-1", "count_only=1&").await.json();
    assert_eq!(
        count,
        json!({"type":"presence","channel":"room-1","count":2})
    );

    drop(ana1);
    wait_until("ana's first connection counted out", || async {
        presence_http(addr, "room-1", "").await.json()["members"][0]["connections"] == 1
    })
    .await;
    publish(addr, "room-1", "one tab left").await;
    let m = next_json(&mut watcher).await;
    assert_eq!(m["data"], "one tab left", "no leave before it: {m}");

    ana2.send(Message::Close(None)).await.expect("close");
    assert_eq!(next_json(&mut watcher).await, leave_event("room-1", "ana"));
    publish(addr, "room-1", "after").await;
    assert_eq!(next_json(&mut watcher).await["data"], "after");
    let s = stats(addr).await;
    assert_eq!(counter(&s, "presence_joins"), 2);
    assert_eq!(counter(&s, "presence_leaves"), 1);
    assert_eq!(counter(&s, "presence_members"), 1);
    let metrics = get(addr, "/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(text.contains("corecast_presence_joins_total 2"), "{text}");
}

/// An unsubscribe leaves; a channel without presence refuses
/// `"presence":true` and the query; a full channel refuses new users.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_is_bounded_and_only_where_configured() {
    let srv = TestServer::start(|c| {
        with_presence(c);
        c.presence.max_members = 2;
    });
    let addr = srv.addr;
    let mut a = user(addr, "a", None).await;
    send(
        &mut a,
        json!({"op":"subscribe","channel":"news","presence":true}),
    )
    .await;
    assert_eq!(next_json(&mut a).await["code"], "presence_off");
    assert_eq!(query(&mut a, "news").await["code"], "presence_off");
    assert_eq!(presence_http(addr, "news", "").await.status, 404);

    join(&mut a, "lobby", true).await;
    assert_eq!(next_json(&mut a).await["type"], "join");
    let mut b = user(addr, "b", None).await;
    join(&mut b, "lobby", false).await;
    assert_eq!(next_json(&mut a).await["user"], "b");
    let mut c = user(addr, "c", None).await;
    send(&mut c, json!({"op":"subscribe","channel":"lobby","id":1})).await;
    let r = next_json(&mut c).await;
    assert_eq!(r["code"], "presence_full", "{r}");
    assert_eq!(r["id"], 1);
    // Not subscribed either: the channel's messages do not reach it.
    publish(addr, "lobby", "m").await;
    assert_eq!(next_json(&mut a).await["data"], "m");
    assert_eq!(next_json(&mut b).await["data"], "m");
    // A known user's second connection still gets in.
    let mut b2 = user(addr, "b", None).await;
    join(&mut b2, "lobby", false).await;
    assert_eq!(counter(&stats(addr).await, "presence_refused"), 1);

    send(&mut b, json!({"op":"unsubscribe","channel":"lobby"})).await;
    assert_eq!(next_json(&mut b).await["type"], "unsubscribed");
    send(&mut b2, json!({"op":"unsubscribe","channel":"lobby"})).await;
    assert_eq!(next_json(&mut b2).await["type"], "unsubscribed");
    assert_eq!(next_json(&mut a).await, leave_event("lobby", "b"));
    join(&mut c, "lobby", false).await;
    assert_eq!(next_json(&mut a).await["user"], "c");
    assert!(drain(&mut c, std::time::Duration::from_millis(100))
        .await
        .is_empty());
}

/// A token whose `info` is not a JSON object of at most 1 KiB is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_info_refuses_the_token() {
    let srv = TestServer::start(with_presence);
    let big = format!(r#"{{"x":"{}"}}"#, "y".repeat(1024));
    for info in [big.as_str(), "[1]", r#""text""#] {
        let path = format!("/ws?token={}", token("u", Some(info)));
        assert_eq!(upgrade_status(srv.addr, &path).await, 401, "{info}");
    }
    let fits = format!(r#"{{"x":"{}"}}"#, "y".repeat(1000));
    let mut ws = user(srv.addr, "u", Some(&fits)).await;
    join(&mut ws, "room-x", true).await;
    assert_eq!(
        next_json(&mut ws).await["info"]["x"]
            .as_str()
            .unwrap()
            .len(),
        1000
    );
}

/// Without a token the user is the connection; above
/// `--presence-max-events` members, joins and leaves are not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_members_and_event_suppression() {
    let srv = TestServer::start(|c| {
        c.presence.set_patterns("*").unwrap();
        c.presence.max_events = 2;
    });
    let addr = srv.addr;
    let mut w = ws_connect(addr, "/ws").await;
    join(&mut w, "big", true).await;
    let me = next_json(&mut w).await;
    assert_eq!(me["type"], "join");
    let mut others = Vec::new();
    for _ in 0..3 {
        let mut o = ws_connect(addr, "/ws").await;
        join(&mut o, "big", false).await;
        others.push(o);
    }
    // Only the second member's join (2 ≤ 2); the third and fourth are silent.
    let seen = drain(&mut w, std::time::Duration::from_millis(200)).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_ne!(seen[0]["user"], me["user"]);
    let q = query(&mut w, "big").await;
    assert_eq!(q["count"], 4);
    drop(others);
    wait_until("members gone", || async {
        get(addr, "/presence/big?count_only=1").await.json()["count"] == 1
    })
    .await;
}

/// The presence options are checked: members at most 10,000, durations
/// above zero, patterns that are channel names or prefixes.
#[test]
fn presence_options_are_bounded() {
    let parse = |args: &[&str]| corecast::Config::from_args(args.iter().copied(), |_| None);
    assert!(parse(&["--presence-max-members", "10000"]).is_ok());
    assert!(parse(&["--presence-max-members", "10001"]).is_err());
    assert!(parse(&["--presence-ttl", "0s"]).is_err());
    // The refresh must come before the entries expire.
    assert!(parse(&["--presence-ttl", "10s", "--presence-refresh", "10s"]).is_err());
    assert!(parse(&["--presence-ttl", "2s", "--presence-refresh", "500ms"]).is_ok());
    assert!(parse(&["--presence-channels", "room-*,a b"]).is_err());
    assert!(parse(&[
        "--presence-channels",
        "room-*,lobby",
        "--presence-refresh",
        "2s"
    ])
    .is_ok());
}

/// 1,000 users join one channel at once: the presence subscriber gets
/// 1,000 joins, once each, and the view lists 1,000 (plus itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_users_join_at_once() {
    use futures_util::StreamExt;
    const N: usize = 1000;
    ensure_fd_limit(4096);
    let srv = TestServer::start(|c| {
        with_presence(c);
        c.presence.max_members = N + 1;
        c.presence.max_events = N + 1;
    });
    let addr = srv.addr;
    let mut w = user(addr, "watcher", None).await;
    join(&mut w, "room-big", true).await;
    assert_eq!(next_json(&mut w).await["user"], "watcher");
    let started = std::time::Instant::now();
    let joins = (0..N).map(|i| async move {
        let mut ws = user(addr, &format!("user-{i:04}"), None).await;
        join(&mut ws, "room-big", false).await;
        ws
    });
    let conns: Vec<Ws> = futures_util::stream::iter(joins)
        .buffer_unordered(200)
        .collect()
        .await;
    let mut seen = Vec::with_capacity(N);
    while seen.len() < N {
        let v = next_json(&mut w).await;
        assert_eq!(v["type"], "join", "{v}");
        seen.push(v["user"].as_str().unwrap().to_string());
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), N, "every user joined exactly once");
    let count = presence_http(addr, "room-big", "count_only=1&")
        .await
        .json();
    assert_eq!(count["count"], N + 1);
    eprintln!("{N} users joined in {:?}", started.elapsed());
    drop(conns);
    let mut left = 0;
    while left < N {
        let v = next_json(&mut w).await;
        assert_eq!(v["type"], "leave", "{v}");
        left += 1;
    }
    assert_eq!(counter(&stats(addr).await, "presence_members"), 1);
}

/// `--presence-read-rate`: a connection reading members faster is
/// answered `rate_limited` (JSON) or `429` with `Retry-After` (HTTP) and
/// counted; another connection is not held back by it (issue 28, item 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_reads_are_rate_limited_per_connection() {
    const RATE: u32 = 2;
    let srv = TestServer::start(|c| {
        with_presence(c);
        c.presence.read_rate = RATE;
    });
    let mut ana = user(srv.addr, "ana", None).await;
    join(&mut ana, "room-1", false).await;
    let started = std::time::Instant::now();
    let mut answered = 0u64;
    let mut limited = 0u64;
    for _ in 0..20 {
        let r = query(&mut ana, "room-1").await;
        match r["type"].as_str() {
            Some("presence") => answered += 1,
            _ => {
                assert_eq!(r["code"], "rate_limited", "{r}");
                assert_eq!(r["id"], 9, "{r}");
                limited += 1;
            }
        }
    }
    let refills = (started.elapsed().as_secs_f64() * f64::from(RATE)).ceil() as u64;
    assert!(answered <= u64::from(RATE) + refills, "{answered} answered");
    assert!(
        limited >= 1 && answered >= 1,
        "{answered} answered, {limited} limited"
    );
    // Another connection reads at once.
    let mut bob = user(srv.addr, "bob", None).await;
    assert_eq!(query(&mut bob, "room-1").await["type"], "presence");

    let t = token("reader", None);
    let req = get_request(&format!("/presence/room-1?token={t}"), true);
    let mut http = HttpConn::connect(srv.addr).await;
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let r = http.request(req.as_bytes()).await;
        if r.status == 429 {
            assert!(r.header("retry-after").is_some(), "no Retry-After");
        }
        statuses.push(r.status);
    }
    assert!(
        statuses.contains(&200) && statuses.contains(&429),
        "{statuses:?}"
    );
    let s = stats(srv.addr).await;
    let n = counter(&s, "presence_reads_limited");
    assert_eq!(
        n,
        limited + statuses.iter().filter(|&&s| s == 429).count() as u64
    );
}
