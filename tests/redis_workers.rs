//! Redis mode with `--workers 2`: each worker is an instance of its own
//! (its own two Redis connections), so a process of two workers and a
//! process of one share one channel space; history and resume, presence,
//! the server API and the console's login hold across the workers of one
//! process as they do across processes; `/readyz` is ready only when
//! every worker's link is.

mod common;
mod redis_support;

use std::net::SocketAddr;

use common::*;
use corecast::auth::sign_token;
use corecast::config::{Config, Secret, Workers};
use futures_util::SinkExt;
use redis_support::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const SECRET: &str = "redis-workers-secret-0123456789abcdef";

fn two_workers(redis: &RedisServer, tweak: impl FnOnce(&mut Config)) -> TestServer {
    instance(redis.url("", ""), |c| {
        c.workers = Workers::Count(2);
        tweak(c);
    })
}

fn token(sub: &str) -> String {
    let claims = format!(r#"{{"exp":9999999999,"sub":"{sub}","subscribe":["*"],"publish":["*"]}}"#);
    sign_token(&claims, SECRET.as_bytes())
}

fn with_tokens(c: &mut Config) {
    c.auth.token_secret = Some(Secret(SECRET.into()));
}

/// The open connections of each worker, from `/stats`'s rows.
async fn per_worker(addr: SocketAddr) -> Vec<u64> {
    let s = stats(addr).await;
    let rows = s["workers"].as_array().expect("a row per worker");
    rows.iter()
        .map(|r| r["connections"].as_u64().unwrap())
        .collect()
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.expect("send");
}

/// The subscribe's answer, presence events before it skipped.
async fn subscribe(ws: &mut Ws, req: Value) -> Value {
    send(ws, req).await;
    loop {
        let r = next_json(ws).await;
        if r["type"] != "join" && r["type"] != "leave" {
            return r;
        }
    }
}

/// Subscribers on both workers of a two-worker process and on a
/// one-worker process get every message, from either process, once and
/// in one order (Redis's); Redis sees three subscribing instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_worker_process_and_a_one_worker_process_share_one_channel_space() {
    let redis = RedisServer::start(&[]).await;
    let a = two_workers(&redis, |_| {});
    let b = instance(redis.url("", ""), |c| c.workers = Workers::Count(1));
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut subs = Vec::new();
    for _ in 0..4 {
        subs.push(ws_connect(a.addr, "/ws/room").await);
    }
    subs.push(ws_connect(b.addr, "/ws/room").await);
    let spread = per_worker(a.addr).await;
    assert!(spread.iter().all(|&n| n >= 2), "spread: {spread:?}");
    let mut rc = RespConn::open(redis.port, None).await;
    rc.wait_numsub("room", 3).await;
    let (mut pa, mut pb) = (
        HttpConn::connect(a.addr).await,
        HttpConn::connect(b.addr).await,
    );
    const N: usize = 100;
    for i in 0..N {
        let (conn, from) = match i % 2 {
            0 => (&mut pa, "a"),
            _ => (&mut pb, "b"),
        };
        let r = conn
            .request(&post_request(
                "/publish/room",
                format!("{from}{i}").as_bytes(),
                true,
            ))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        // Every worker of A and B subscribed: three instances heard it.
        assert_eq!(r.json()["instances"], 3, "{}", r.json());
    }
    let mut orders = Vec::new();
    for ws in &mut subs {
        let mut got = Vec::new();
        for _ in 0..N {
            got.push(next_text(ws).await);
        }
        orders.push(got);
    }
    let want: Vec<String> = (0..N)
        .map(|i| format!("{}{i}", if i % 2 == 0 { "a" } else { "b" }))
        .collect();
    for got in &orders {
        assert_eq!(got, &want, "each once, in the publish order");
    }
}

/// A JSON client that left resumes on a fresh connection — one on each
/// worker — and both get exactly the missed messages from the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_works_on_whichever_worker_the_client_lands() {
    let redis = RedisServer::start(&[]).await;
    let a = two_workers(&redis, |c| c.history.size = 100);
    wait_readyz(a.addr, 200).await;
    let mut ws = ws_connect(a.addr, "/ws").await;
    let r = subscribe(&mut ws, json!({"op":"subscribe","channel":"c"})).await;
    let epoch = r["epoch"].as_str().expect("epoch").to_string();
    for i in 0..5 {
        publish(a.addr, "c", &format!("m{i}")).await;
    }
    for i in 0..5u64 {
        assert_eq!(next_json(&mut ws).await["offset"], i + 1);
    }
    drop(ws);
    for i in 5..15 {
        publish(a.addr, "c", &format!("m{i}")).await;
    }
    let mut again = vec![
        ws_connect(a.addr, "/ws").await,
        ws_connect(a.addr, "/ws").await,
    ];
    let spread = per_worker(a.addr).await;
    assert!(spread.iter().all(|&n| n >= 1), "spread: {spread:?}");
    let since = json!({"epoch": epoch, "offset": 5});
    for ws in &mut again {
        let req = json!({"op":"subscribe","channel":"c","since":since});
        let r = subscribe(ws, req).await;
        assert_eq!(
            (r["recovered"].as_bool(), r["offset"].as_u64()),
            (Some(true), Some(15))
        );
        for i in 5..15u64 {
            let m = next_json(ws).await;
            assert_eq!(
                (m["offset"].as_u64(), m["data"].as_str()),
                (Some(i + 1), Some(&*format!("m{i}")))
            );
        }
    }
}

/// Two users on the two workers of one process see each other join and
/// leave, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_joins_and_leaves_are_seen_across_workers() {
    let redis = RedisServer::start(&[]).await;
    let a = two_workers(&redis, |c| {
        with_tokens(c);
        c.presence.set_patterns("room-*").unwrap();
    });
    wait_readyz(a.addr, 200).await;
    let mut ann = ws_connect(a.addr, &format!("/ws?token={}", token("ann"))).await;
    let mut bob = ws_connect(a.addr, &format!("/ws?token={}", token("bob"))).await;
    // Connections go to the least loaded worker, in turn on a tie: one
    // user on each (the /stats request is the third connection).
    let spread = per_worker(a.addr).await;
    assert!(spread.iter().all(|&n| n >= 1), "spread: {spread:?}");
    let req = json!({"op":"subscribe","channel":"room-1","presence":true});
    subscribe(&mut ann, req.clone()).await;
    subscribe(&mut bob, req).await;
    // Ann (first in) hears Bob join; then Bob leaves and she hears it.
    assert_eq!(next_about(&mut ann, "bob").await["type"], "join");
    drop(bob);
    assert_eq!(next_about(&mut ann, "bob").await["type"], "leave");
}

/// The next presence event about `user` (other frames skipped).
async fn next_about(ws: &mut Ws, user: &str) -> Value {
    within(&format!("an event about {user}"), async {
        loop {
            let v = next_json(ws).await;
            if v["user"] == user {
                return v;
            }
        }
    })
    .await
}

/// The server API (Redis mode) reaches a user's connections on every
/// worker; the answer counts the instances — here the two workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_api_acts_on_every_worker() {
    let redis = RedisServer::start(&[]).await;
    let a = two_workers(&redis, |c| {
        with_tokens(c);
        c.auth.publish_key = Some(Secret("api-key-0123456789".into()));
    });
    wait_readyz(a.addr, 200).await;
    let mut one = ws_connect(a.addr, &format!("/ws/x?token={}", token("carol"))).await;
    let mut two = ws_connect(a.addr, &format!("/ws/y?token={}", token("carol"))).await;
    let spread = per_worker(a.addr).await;
    assert!(spread.iter().all(|&n| n >= 1), "spread: {spread:?}");
    let req = |body: &str| {
        format!(
            "POST /api/disconnect HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
             Authorization: Bearer api-key-0123456789\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let r = http_raw(a.addr, req(r#"{"user":"carol"}"#).as_bytes()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), json!({"instances": 2}));
    assert_eq!(expect_close(&mut one).await, 4005);
    assert_eq!(expect_close(&mut two).await, 4005);
}

/// `/readyz` answers for every worker: not ready while Redis is down
/// (whichever worker answers), ready once every worker's link is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_ready_only_when_every_worker_is() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}").parse().expect("url");
    let a = instance(url, |c| c.workers = Workers::Count(2));
    for _ in 0..4 {
        // Keep-alive off: each probe is a new connection, on either worker.
        let r = readyz(a.addr).await;
        assert_eq!(r.as_ref().map(|r| r.0), Some(503), "{r:?}");
    }
    let _redis = RedisServer::start_at(port, &[])
        .await
        .expect("redis on the port");
    wait_readyz(a.addr, 200).await;
    for _ in 0..4 {
        assert_eq!(readyz(a.addr).await.map(|r| r.0), Some(200));
    }
}
