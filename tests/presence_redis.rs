//! Presence in Redis mode: members and join/leave exact across instances,
//! a SIGKILLed instance's members leave once (whoever prunes), and Redis
//! restarts rebuild from the live instances.

mod common;
mod redis_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use corecast::auth::sign_token;
use corecast::config::Secret;
use futures_util::{SinkExt, StreamExt};
use redis_support::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const SECRET: &str = "presence-test-secret-0123456789abcdef";
const TTL: Duration = Duration::from_millis(1000);
const REFRESH: Duration = Duration::from_millis(300);

fn token(sub: &str) -> String {
    let claims = format!(
        r#"{{"exp":9999999999,"sub":"{sub}","subscribe":["*"],"publish":["*"],"info":{{"n":"{sub}"}}}}"#
    );
    sign_token(&claims, SECRET.as_bytes())
}

/// The in-process instances: a short refresh (they prune, re-add after a
/// Redis restart, promptly) but a long ttl for their own entries, so a
/// debug build stalling on a loaded machine is not taken for a dead
/// instance. Only the instance the test kills uses [`TTL`].
fn tweak(c: &mut corecast::Config) {
    c.auth.token_secret = Some(Secret(SECRET.into()));
    c.presence.set_patterns("room-*").unwrap();
    c.presence.ttl_ms = 10_000;
    c.presence.refresh_ms = REFRESH.as_millis() as u64;
}

async fn user(addr: SocketAddr, sub: &str) -> Ws {
    ws_connect(addr, &format!("/ws?token={}", token(sub))).await
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.expect("send");
}

/// Subscribes and waits for the ack (skipping presence events before it).
async fn join(ws: &mut Ws, channel: &str, events: bool) {
    send(
        ws,
        json!({"op":"subscribe","channel":channel,"presence":events}),
    )
    .await;
    loop {
        let r = next_json(ws).await;
        if r["type"] == "subscribed" {
            return;
        }
        assert!(matches!(r["type"].as_str(), Some("join" | "leave")), "{r}");
    }
}

async fn members(addr: SocketAddr, channel: &str) -> Value {
    let t = token("reader");
    let r = get(addr, &format!("/presence/{channel}?token={t}")).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn users(v: &Value) -> Vec<String> {
    let list = v["members"].as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|m| m["user"].as_str().unwrap().to_string())
        .collect()
}

async fn wait_users(addr: SocketAddr, channel: &str, want: &[&str]) {
    wait_until(&format!("{channel} on {addr} to hold {want:?}"), || async {
        users(&members(addr, channel).await) == want
    })
    .await;
}

/// Presence events about `user` from `ws`, read for `quiet` after the
/// last one (other messages are skipped).
async fn events_for(ws: &mut Ws, user: &str, quiet: Duration) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(Some(Ok(m))) = tokio::time::timeout(quiet, ws.next()).await {
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["user"] == user {
                out.push(v["type"].as_str().unwrap().to_string());
            }
        }
    }
    out
}

/// Waits (up to the deadline) for a `kind` event about `user`.
async fn wait_event(ws: &mut Ws, kind: &str, user: &str) {
    within(&format!("{kind} of {user}"), async {
        loop {
            let v = next_json(ws).await;
            if v["type"] == kind && v["user"] == user {
                return;
            }
            assert!(
                !(v["user"] == user && v["type"] != "message"),
                "unexpected {v} before the {kind} of {user}"
            );
        }
    })
    .await
}

/// u1 on A, u2 on B: both instances list both; u1's second connection (on
/// B) does not join again, closing one connection does not leave, closing
/// the last leaves exactly once on both instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_and_events_are_exact_across_instances() {
    let redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), tweak);
    let b = instance(redis.url("", ""), tweak);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut wa = user(a.addr, "wa").await;
    let mut wb = user(b.addr, "wb").await;
    join(&mut wa, "room-1", true).await;
    join(&mut wb, "room-1", true).await;
    wait_users(a.addr, "room-1", &["wa", "wb"]).await;

    let mut u1 = user(a.addr, "u1").await;
    join(&mut u1, "room-1", false).await;
    let mut u2 = user(b.addr, "u2").await;
    join(&mut u2, "room-1", false).await;
    for w in [&mut wa, &mut wb] {
        wait_event(w, "join", "u1").await;
        wait_event(w, "join", "u2").await;
    }
    for addr in [a.addr, b.addr] {
        wait_users(addr, "room-1", &["u1", "u2", "wa", "wb"]).await;
    }
    let q = members(b.addr, "room-1").await;
    assert_eq!(q["count"], 4);
    assert_eq!(
        q["members"][0],
        json!({"user":"u1","info":{"n":"u1"},"connections":1})
    );

    // A second connection of u1, on the other instance.
    let mut u1b = user(b.addr, "u1").await;
    join(&mut u1b, "room-1", false).await;
    wait_until("u1 counted twice", || async {
        members(a.addr, "room-1").await["members"][0]["connections"] == 2
    })
    .await;
    u1.send(Message::Close(None)).await.unwrap();
    wait_until("u1 counted once", || async {
        members(a.addr, "room-1").await["members"][0]["connections"] == 1
    })
    .await;
    u1b.send(Message::Close(None)).await.unwrap();
    for w in [&mut wa, &mut wb] {
        wait_event(w, "leave", "u1").await;
    }
    wait_users(a.addr, "room-1", &["u2", "wa", "wb"]).await;
    // A bounded quiet period: nothing more about u1 (no second join, no
    // second leave).
    let quiet = TTL + REFRESH * 2;
    for w in [&mut wa, &mut wb] {
        assert_eq!(events_for(w, "u1", quiet).await, Vec::<String>::new());
    }
    let (sa, sb) = (stats(a.addr).await, stats(b.addr).await);
    let joins = counter(&sa, "presence_joins") + counter(&sb, "presence_joins");
    let leaves = counter(&sa, "presence_leaves") + counter(&sb, "presence_leaves");
    assert_eq!(
        (joins, leaves),
        (4, 1),
        "one join per user, one leave for u1"
    );
}

/// A SIGKILLed instance stops refreshing: within ttl + refresh its member
/// is gone from every view and exactly one leave reaches the presence
/// subscribers of each survivor, B and C, whichever of them pruned it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_s_members_leave_exactly_once() {
    let redis = RedisServer::start(&[]).await;
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let (ttl, refresh) = (
        format!("{}ms", TTL.as_millis()),
        format!("{}ms", REFRESH.as_millis()),
    );
    let mut a = BinServer::spawn(&[
        "--redis-url",
        &url,
        "--token-secret",
        SECRET,
        "--presence-channels",
        "room-*",
        "--presence-ttl",
        &ttl,
        "--presence-refresh",
        &refresh,
    ]);
    let b = instance(redis.url("", ""), tweak);
    let c = instance(redis.url("", ""), tweak);
    for addr in [a.addr, b.addr, c.addr] {
        wait_readyz(addr, 200).await;
    }
    let mut wb = user(b.addr, "wb").await;
    let mut wc = user(c.addr, "wc").await;
    join(&mut wb, "room-k", true).await;
    join(&mut wc, "room-k", true).await;
    let mut u3 = user(a.addr, "u3").await;
    join(&mut u3, "room-k", false).await;
    for w in [&mut wb, &mut wc] {
        wait_event(w, "join", "u3").await;
    }
    wait_users(b.addr, "room-k", &["u3", "wb", "wc"]).await;

    a.child.kill().expect("SIGKILL");
    let killed = Instant::now();
    for w in [&mut wb, &mut wc] {
        wait_event(w, "leave", "u3").await;
    }
    let took = killed.elapsed();
    assert!(took < TTL + REFRESH * 3, "leave after {took:?}");
    eprintln!("leave of a SIGKILLed instance's member after {took:?}");
    wait_users(b.addr, "room-k", &["wb", "wc"]).await;
    for w in [&mut wb, &mut wc] {
        assert_eq!(
            events_for(w, "u3", TTL + REFRESH * 2).await,
            Vec::<String>::new()
        );
    }
    drop(u3);
    let (sb, sc) = (stats(b.addr).await, stats(c.addr).await);
    let expired = counter(&sb, "presence_expired") + counter(&sc, "presence_expired");
    assert_eq!(expired, 1, "exactly one survivor pruned u3");
}

/// Redis restarts empty: every instance's members are back within a
/// refresh of the instances reconnecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_rebuilds_after_a_redis_restart() {
    let mut redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), tweak);
    let b = instance(redis.url("", ""), tweak);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut u1 = user(a.addr, "u1").await;
    join(&mut u1, "room-r", false).await;
    let mut u2 = user(b.addr, "u2").await;
    join(&mut u2, "room-r", false).await;
    wait_users(a.addr, "room-r", &["u1", "u2"]).await;

    redis.kill();
    redis.restart().await;
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let back = Instant::now();
    wait_users(a.addr, "room-r", &["u1", "u2"]).await;
    let took = back.elapsed();
    eprintln!("presence rebuilt {took:?} after both instances were ready");
    assert!(took < REFRESH * 3, "rebuilt after {took:?}");
    wait_users(b.addr, "room-r", &["u1", "u2"]).await;
}

/// `--presence-max-members` holds across instances: only Redis knows
/// every user, so the refusal comes after the `subscribed` ack, as a
/// `presence_full` error, and the user is neither listed nor subscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_members_holds_across_instances() {
    let redis = RedisServer::start(&[]).await;
    let small = |c: &mut corecast::Config| {
        tweak(c);
        c.presence.max_members = 2;
    };
    let a = instance(redis.url("", ""), small);
    let b = instance(redis.url("", ""), small);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut u1 = user(a.addr, "u1").await;
    join(&mut u1, "room-f", false).await;
    let mut u2 = user(b.addr, "u2").await;
    join(&mut u2, "room-f", false).await;
    wait_users(a.addr, "room-f", &["u1", "u2"]).await;
    let mut u3 = user(a.addr, "u3").await;
    join(&mut u3, "room-f", false).await;
    let e = next_json(&mut u3).await;
    assert_eq!(e["code"], "presence_full", "{e}");
    assert_eq!(users(&members(b.addr, "room-f").await), ["u1", "u2"]);
    // A known user's further connection, on either instance, still joins.
    let mut u2b = user(a.addr, "u2").await;
    join(&mut u2b, "room-f", false).await;
    wait_until("u2 counted twice", || async {
        members(b.addr, "room-f").await["members"][1]["connections"] == 2
    })
    .await;
    assert_eq!(counter(&stats(a.addr).await, "presence_refused"), 1);
    // u3 was unsubscribed: the channel's messages reach the members only.
    publish(a.addr, "room-f", "m").await;
    assert_eq!(next_json(&mut u2b).await["data"], "m");
    let more = tokio::time::timeout(Duration::from_millis(300), u3.next()).await;
    assert!(more.is_err(), "u3 got {more:?}");
}

/// 1,000 users join one channel at once, half on each instance: both
/// instances' views converge to all of them, and both presence
/// subscribers get the same 1,000 joins in the same order (Redis's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_users_join_at_once() {
    const N: usize = 1000;
    ensure_fd_limit(8192);
    let redis = RedisServer::start(&[]).await;
    let big = |c: &mut corecast::Config| {
        tweak(c);
        c.presence.max_members = N + 2;
        c.presence.max_events = N + 2;
        // Not about expiry: a debug build on a loaded machine may stall
        // longer than the 1 s the other tests use, and a stalled instance
        // is (rightly) treated as dead — a leave and a join again.
        c.presence.ttl_ms = 20_000;
        c.presence.refresh_ms = 5_000;
    };
    let a = instance(redis.url("", ""), big);
    let b = instance(redis.url("", ""), big);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut wa = user(a.addr, "wa").await;
    let mut wb = user(b.addr, "wb").await;
    join(&mut wa, "room-big", true).await;
    join(&mut wb, "room-big", true).await;
    wait_users(a.addr, "room-big", &["wa", "wb"]).await;

    let started = Instant::now();
    let joins = (0..N).map(|i| {
        let addr = if i % 2 == 0 { a.addr } else { b.addr };
        async move {
            let mut ws = user(addr, &format!("user-{i:04}")).await;
            join(&mut ws, "room-big", false).await;
            ws
        }
    });
    let conns: Vec<Ws> = futures_util::stream::iter(joins)
        .buffer_unordered(200)
        .collect()
        .await;
    let joined_in = started.elapsed();
    let mut seen = Vec::new();
    for w in [&mut wa, &mut wb] {
        let order = within("1,000 joins", async {
            let mut order = Vec::with_capacity(N);
            while order.len() < N {
                let v = next_json(w).await;
                assert_ne!(v["type"], "leave", "{v}");
                if v["type"] == "join" && v["user"].as_str().unwrap().starts_with("user-") {
                    order.push(v["user"].as_str().unwrap().to_string());
                }
            }
            order
        })
        .await;
        let mut distinct = order.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), N, "every user joined exactly once");
        seen.push(order);
    }
    assert_eq!(
        seen[0], seen[1],
        "both instances saw the joins in one order"
    );
    for addr in [a.addr, b.addr] {
        wait_until("the views converge", || async {
            members(addr, "room-big").await["count"] == N + 2
        })
        .await;
    }
    eprintln!(
        "{N} users subscribed in {joined_in:?}; events and views converged after {:?}",
        started.elapsed()
    );
    drop(conns);
}

/// An instance stopped gracefully (SIGTERM) closes its connections and
/// removes their entries before it exits: the leave arrives at once,
/// long before `--presence-ttl` (30 s here) would expire them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_leaves_at_once() {
    let redis = RedisServer::start(&[]).await;
    let slow = |c: &mut corecast::Config| {
        tweak(c);
        c.presence.ttl_ms = 30_000;
        c.presence.refresh_ms = 10_000;
    };
    let a = instance(redis.url("", ""), slow);
    let b = instance(redis.url("", ""), slow);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut w = user(b.addr, "w").await;
    join(&mut w, "room-g", true).await;
    let mut u = user(a.addr, "u").await;
    join(&mut u, "room-g", false).await;
    wait_event(&mut w, "join", "u").await;
    // The client answers the server's close, as browsers do.
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = u.next().await {} });
    let stopped = Instant::now();
    a.stop();
    a.join().await.expect("clean exit");
    wait_event(&mut w, "leave", "u").await;
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
    wait_users(b.addr, "room-g", &["w"]).await;
    reader.await.expect("reader");
}

/// Above `--presence-max-events` members, Redis's scripts announce no
/// joins or leaves (whichever instance the members are on); below it
/// again they do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stop_above_the_threshold_across_instances() {
    let redis = RedisServer::start(&[]).await;
    let few = |c: &mut corecast::Config| {
        tweak(c);
        c.presence.max_events = 2;
    };
    let a = instance(redis.url("", ""), few);
    let b = instance(redis.url("", ""), few);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut w = user(a.addr, "w").await;
    join(&mut w, "room-t", true).await;
    wait_users(a.addr, "room-t", &["w"]).await;
    let mut u1 = user(b.addr, "u1").await;
    join(&mut u1, "room-t", false).await;
    wait_event(&mut w, "join", "u1").await; // 2 members: announced
    let mut u2 = user(b.addr, "u2").await;
    join(&mut u2, "room-t", false).await; // 3: silent
    wait_users(a.addr, "room-t", &["u1", "u2", "w"]).await;
    u2.send(Message::Close(None)).await.unwrap(); // 3 before: silent
    wait_users(a.addr, "room-t", &["u1", "w"]).await;
    u1.send(Message::Close(None)).await.unwrap(); // 2 before: announced
                                                  // The next event is u1's leave: nothing about u2 came before it.
    let next = next_json(&mut w).await;
    assert_eq!(next, json!({"type":"leave","channel":"room-t","user":"u1"}));
    let after = events_for(&mut w, "u2", Duration::from_millis(500)).await;
    assert!(after.is_empty(), "{after:?}");
}

/// Redis forgets its scripts (`SCRIPT FLUSH`, as after a failover to a
/// replica that never loaded them): the next presence script meets
/// `NOSCRIPT`, the instance reconnects, loads them again and resends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_survives_a_script_flush() {
    let redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), tweak);
    wait_readyz(a.addr, 200).await;
    let mut w = user(a.addr, "w").await;
    join(&mut w, "room-s", true).await;
    wait_users(a.addr, "room-s", &["w"]).await;
    let mut admin = RespConn::open(redis.port, None).await;
    admin.cmd(&["SCRIPT", "FLUSH"]).await;
    let mut u = user(a.addr, "u").await;
    join(&mut u, "room-s", false).await;
    wait_event(&mut w, "join", "u").await;
    wait_users(a.addr, "room-s", &["u", "w"]).await;
}
