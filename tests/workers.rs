//! `--workers 2`: one channel space across pinned workers — every
//! subscriber on every worker gets each message once, in one order; an
//! acknowledged subscribe hears the next publish wherever it was made; a
//! full ring between workers delays messages and loses none; `/stats`
//! and `/metrics` total the workers and show each; without Redis, history
//! and presence are one per channel whichever worker a client is on.

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;

use common::*;
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

fn two_workers(ring: usize) -> TestServer {
    TestServer::start(|c| {
        c.workers = corecast::config::Workers::Count(2);
        c.worker_ring = ring;
    })
}

/// A JSON-protocol client subscribed to `channel` (its acknowledgement
/// read).
async fn subscriber(addr: SocketAddr, channel: &str) -> Ws {
    let mut ws = ws_connect(addr, "/ws").await;
    subscribe(&mut ws, channel).await;
    ws
}

async fn subscribe(ws: &mut Ws, channel: &str) {
    let req = json!({"op": "subscribe", "channel": channel, "id": 1});
    ws.send(Message::text(req.to_string())).await.expect("send");
    let ack = next_json(ws).await;
    assert_eq!(ack["type"], "subscribed", "{ack}");
}

/// The data of the next message on `channel`.
async fn next_data(ws: &mut Ws) -> String {
    let m = next_json(ws).await;
    assert_eq!(m["type"], "message", "{m}");
    m["data"].as_str().expect("text data").to_string()
}

/// The open connections of each worker, from `/stats`'s rows.
fn per_worker(stats: &Value) -> Vec<u64> {
    let rows = stats["workers"].as_array().expect("a row per worker");
    rows.iter()
        .map(|r| r["connections"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn every_subscriber_on_every_worker_gets_each_message_once_in_one_order() {
    let srv = two_workers(4096);
    let mut subs = Vec::new();
    for _ in 0..6 {
        subs.push(subscriber(srv.addr, "room").await);
    }
    // Connections go to the least loaded worker: the subscribers are on
    // both (the /stats request itself is a seventh connection).
    let s = stats(srv.addr).await;
    let spread = per_worker(&s);
    assert!(
        spread.iter().all(|&n| n >= 3),
        "subscribers spread: {spread:?}"
    );
    // Two publishers on keep-alive connections (one on each worker).
    let mut pubs = vec![
        HttpConn::connect(srv.addr).await,
        HttpConn::connect(srv.addr).await,
    ];
    const N: usize = 300;
    let mut b = pubs.pop().unwrap();
    let mut a = pubs.pop().unwrap();
    let pa = async {
        for i in 0..N {
            a.publish("room", &format!("a{i}")).await;
        }
    };
    let pb = async {
        for i in 0..N {
            b.publish("room", &format!("b{i}")).await;
        }
    };
    within("publishing", async { tokio::join!(pa, pb) }).await;
    let mut orders = Vec::new();
    for ws in &mut subs {
        let mut got = Vec::with_capacity(2 * N);
        for _ in 0..2 * N {
            got.push(next_data(ws).await);
        }
        let unique: HashSet<&String> = got.iter().collect();
        assert_eq!(unique.len(), 2 * N, "each message once");
        for p in ["a", "b"] {
            let seq: Vec<usize> = got
                .iter()
                .filter_map(|m| m.strip_prefix(p)?.parse().ok())
                .collect();
            assert_eq!(seq, (0..N).collect::<Vec<_>>(), "{p}'s publish order");
        }
        orders.push(got);
    }
    assert!(
        orders.windows(2).all(|w| w[0] == w[1]),
        "every subscriber saw the channel's one order"
    );
    // Everything written: every worker's memory budget got every byte
    // back (frames one worker encoded and another sent are copies, never
    // a buffer two workers' budgets both hold).
    wait_stat(srv.addr, "outbound_memory_bytes", |m| m == 0).await;
}

#[tokio::test]
async fn an_acknowledged_subscribe_hears_the_next_publish_from_any_worker() {
    let srv = two_workers(4096);
    // Two clients, one on each worker, and a publisher: channels owned by
    // either worker are subscribed from both.
    let mut a = ws_connect(srv.addr, "/ws").await;
    let mut b = ws_connect(srv.addr, "/ws").await;
    let mut p = HttpConn::connect(srv.addr).await;
    assert_eq!(per_worker(&stats(srv.addr).await), [2, 2]);
    for i in 0..40 {
        // A channel per client: each hears only its own publish.
        for (who, ws) in [("a", &mut a), ("b", &mut b)] {
            let channel = format!("ack-{i}-{who}");
            subscribe(ws, &channel).await;
            p.publish(&channel, &format!("first {i}")).await;
            assert_eq!(next_data(ws).await, format!("first {i}"));
        }
    }
}

#[tokio::test]
async fn a_full_ring_between_workers_delays_messages_and_loses_none() {
    // The smallest ring, and its receiving worker starved.
    let srv = TestServer::start(|c| {
        c.workers = corecast::config::Workers::Count(2);
        c.cpus = Some(vec![0, 1]);
        c.worker_ring = 64;
    });
    // Connections go to the least loaded worker, ties in turn: `a` and
    // the publisher to worker 0, `b` to worker 1. Whichever worker owns
    // `burst`, the publisher's messages cross to worker 1 (as publishes
    // to its owner, or as deliveries to `b`).
    let a = ws_connect(srv.addr, "/ws/burst").await;
    let b = ws_connect(srv.addr, "/ws/burst").await;
    let mut publisher = ws_connect(srv.addr, "/ws/burst").await;
    let spread = per_worker(&stats(srv.addr).await);
    assert_eq!(
        spread,
        [2, 2],
        "a and the publisher on 0; b and /stats on 1"
    );
    const N: usize = 5000;
    let all = |mut ws: Ws| async move {
        let mut got = Vec::with_capacity(N);
        while got.len() < N {
            got.push(next_text(&mut ws).await);
        }
        got == (0..N).map(|i| format!("m{i}")).collect::<Vec<_>>()
    };
    let hog = Hog::on(1, 3);
    // One write of every frame: the publisher's worker reads thousands
    // at once and pushes them faster than a starved worker 1 drains.
    let frames: Vec<Message> = (0..N).map(|i| Message::text(format!("m{i}"))).collect();
    let mut stream = futures_util::stream::iter(frames.into_iter().map(Ok));
    publisher.send_all(&mut stream).await.expect("the burst");
    let (ok_a, ok_b, ok_p) = within_for(DEADLINE * 6, "the burst", async {
        tokio::join!(all(a), all(b), all(publisher))
    })
    .await;
    drop(hog);
    assert!(
        ok_a && ok_b && ok_p,
        "all {N} messages, in order, on both workers"
    );
    let s = stats(srv.addr).await;
    assert!(counter(&s, "worker_ring_full") > 0, "the ring filled: {s}");
}

#[tokio::test]
async fn stats_and_metrics_total_every_worker_and_show_each() {
    let srv = two_workers(4096);
    let mut subs = Vec::new();
    for _ in 0..4 {
        subs.push(subscriber(srv.addr, "count").await);
    }
    publish(srv.addr, "count", "one").await;
    for ws in &mut subs {
        assert_eq!(next_data(ws).await, "one");
    }
    let s = wait_stat(srv.addr, "deliveries", |n| n >= 4).await;
    // 4 WebSockets and the /stats request itself.
    assert_eq!(counter(&s, "connections"), 5, "{s}");
    assert_eq!(
        counter(&s, "messages_in"),
        1,
        "a message is counted once: {s}"
    );
    assert_eq!(counter(&s, "deliveries"), 4, "{s}");
    assert_eq!(per_worker(&s).iter().sum::<u64>(), 5);
    assert_eq!(counter(&s, "workers_unanswered"), 0);
    let m = get(srv.addr, "/metrics").await;
    assert_eq!(m.status, 200);
    let text = String::from_utf8(m.body).unwrap();
    assert!(
        text.contains("corecast_worker_connections{worker=\"0\"}"),
        "{text}"
    );
    assert!(
        text.contains("corecast_worker_connections{worker=\"1\"}"),
        "{text}"
    );
    assert!(text.contains("\ncorecast_connections 5\n"), "{text}");
}

/// The server API acts on a user's connections on every worker: the
/// listing has both, a subscribe and a disconnect reach both, and the
/// counts add the workers' answers.
#[tokio::test]
async fn the_server_api_acts_on_a_users_connections_on_every_worker() {
    const SECRET: &str = "workers-api-secret-0123456789abcdef";
    let key = "k".repeat(20);
    let srv = TestServer::start(|c| {
        c.workers = corecast::config::Workers::Count(2);
        c.auth.publish_key = Some(corecast::config::Secret(key.clone()));
        c.auth.token_secret = Some(corecast::config::Secret(SECRET.into()));
    });
    let claims = r#"{"exp":9999999999,"sub":"u","subscribe":["*"],"publish":["*"]}"#;
    let token = corecast::auth::sign_token(claims, SECRET.as_bytes());
    let mut conns = vec![
        ws_connect(srv.addr, &format!("/ws?token={token}")).await,
        ws_connect(srv.addr, &format!("/ws?token={token}")).await,
    ];
    let spread = per_worker(&stats(srv.addr).await);
    assert!(spread.iter().all(|&n| n >= 1), "spread: {spread:?}");
    let api = |method: &str, path: &str, body: &str| {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let r = http_raw(
        srv.addr,
        api("GET", "/api/connections?user=u", "").as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let listing = r.json();
    let listed = listing["connections"].as_array().expect("a list");
    assert_eq!(listed.len(), 2, "{listing}");
    let tags: HashSet<u64> = listed
        .iter()
        .map(|c| c["instance"].as_u64().unwrap())
        .collect();
    assert_eq!(tags.len(), 2, "one connection on each worker: {listing}");
    assert_eq!(listing["instances"]["missing"], 0, "{listing}");
    let body = r#"{"user":"u","channel":"extra"}"#;
    let r = http_raw(srv.addr, api("POST", "/api/subscribe", body).as_bytes()).await;
    assert_eq!(r.json(), json!({"connections": 2}));
    for ws in &mut conns {
        let m = next_json(ws).await;
        assert_eq!(
            (m["type"].as_str(), m["channel"].as_str()),
            (Some("subscribed"), Some("extra"))
        );
    }
    // Publishing with the key reaches both of the server's subscriptions.
    let req = format!(
        "POST /publish/extra HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
    );
    let r = http_raw(srv.addr, req.as_bytes()).await;
    assert_eq!(r.json()["subscribers"], 2, "{:?}", r.json());
    for ws in &mut conns {
        assert_eq!(next_data(ws).await, "hi");
    }
    let r = http_raw(
        srv.addr,
        api("POST", "/api/disconnect", r#"{"user":"u"}"#).as_bytes(),
    )
    .await;
    assert_eq!(r.json(), json!({"connections": 2}));
    for ws in &mut conns {
        assert_eq!(expect_close(ws).await, 4005);
    }
}

/// Busy loops pinned to `cpu` until dropped: a worker there gets a
/// fraction of its CPU.
struct Hog(
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    Vec<std::thread::JoinHandle<()>>,
);

impl Hog {
    fn on(cpu: usize, threads: usize) -> Hog {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spin = |stop: std::sync::Arc<std::sync::atomic::AtomicBool>| {
            move || {
                corecast::runtime::pin_to_cpu(cpu).expect("pin the hog");
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            }
        };
        let handles = (0..threads)
            .map(|_| std::thread::spawn(spin(stop.clone())))
            .collect();
        Hog(stop, handles)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in self.1.drain(..) {
            let _ = h.join();
        }
    }
}

#[tokio::test]
async fn a_starved_worker_slows_down_and_loses_nothing() {
    let srv = TestServer::start(|c| {
        c.workers = corecast::config::Workers::Count(2);
        c.cpus = Some(vec![0, 1]);
    });
    let mut a = ws_connect(srv.addr, "/ws").await;
    let mut b = ws_connect(srv.addr, "/ws").await;
    let mut p = HttpConn::connect(srv.addr).await;
    // Channels owned by either worker, each heard by both clients.
    let channels = ["s-0", "s-1", "s-2", "s-3"];
    for c in channels {
        subscribe(&mut a, c).await;
        subscribe(&mut b, c).await;
    }
    // Three busy loops share worker 1's CPU with it from now on.
    let _hog = Hog::on(1, 3);
    const N: usize = 250;
    for i in 0..N {
        for c in channels {
            p.publish(c, &format!("{c}/{i}")).await;
        }
    }
    for ws in [&mut a, &mut b] {
        let mut next = std::collections::HashMap::new();
        for _ in 0..N * channels.len() {
            let m = within_for(DEADLINE * 3, "a delivery", next_json(ws)).await;
            let (c, i) = m["data"].as_str().unwrap().split_once('/').unwrap();
            let want = next.entry(c.to_string()).or_insert(0usize);
            assert_eq!(
                i.parse::<usize>().unwrap(),
                *want,
                "{c}: in order, none lost"
            );
            *want += 1;
        }
    }
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "workers_unanswered"), 0, "{s}");
}

/// The worker `channel` belongs to of `n`: the server's rule (FNV-1a of
/// the name), so that the test can show it covered both owners.
fn owner_of(channel: &str, n: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in channel.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % n
}

/// A request's reply on a JSON-protocol connection.
async fn call(ws: &mut Ws, request: Value) -> Value {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
    next_json(ws).await
}

/// The offsets and data of the next `n` messages.
async fn next_messages(ws: &mut Ws, n: usize) -> Vec<(u64, String)> {
    let mut got = Vec::new();
    for _ in 0..n {
        let m = next_json(ws).await;
        assert_eq!(m["type"], "message", "{m}");
        let data = m["data"].as_str().expect("text").to_string();
        got.push((m["offset"].as_u64().expect("an offset"), data));
    }
    got
}

/// History without Redis with two workers: a channel has one position on
/// every worker (the same epoch whichever worker a subscriber is on,
/// whichever it asked first), and a resume on either worker from a
/// position given by the other gets exactly the messages published while
/// no worker had a subscriber, then the live ones, once.
#[tokio::test]
async fn history_and_resume_are_one_per_channel_across_workers() {
    let srv = TestServer::start(|c| {
        c.workers = corecast::config::Workers::Count(2);
        c.history.size = 100;
    });
    let mut a = ws_connect(srv.addr, "/ws").await;
    let mut b = ws_connect(srv.addr, "/ws").await;
    let mut p = HttpConn::connect(srv.addr).await;
    let spread = per_worker(&stats(srv.addr).await);
    assert!(spread[0] >= 1 && spread[1] >= 1, "{spread:?}");
    let channels: Vec<String> = (0..6).map(|i| format!("hist-{i}")).collect();
    let owners: HashSet<u64> = channels.iter().map(|c| owner_of(c, 2)).collect();
    assert_eq!(owners.len(), 2, "channels owned by both workers");
    for (i, ch) in channels.iter().enumerate() {
        // `a` first on even channels, `b` first on odd ones: on each
        // worker, the first subscribe of some channels it does not own
        // finds no copy of the ring and asks the owner.
        let (first, second) = if i % 2 == 0 {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        let sub = json!({"op": "subscribe", "channel": ch});
        let r1 = call(first, sub.clone()).await;
        let r2 = call(second, sub).await;
        assert_eq!(r1["type"], "subscribed", "{r1}");
        assert_eq!((&r1["epoch"], &r1["offset"]), (&r2["epoch"], &r2["offset"]));
        assert_eq!(r1["offset"], 0);
        let epoch = r1["epoch"].as_str().expect("an epoch").to_string();
        for k in 1..=3 {
            p.publish(ch, &format!("m{k}")).await;
        }
        let want: Vec<(u64, String)> = (1..=3).map(|k| (k, format!("m{k}"))).collect();
        assert_eq!(next_messages(&mut a, 3).await, want);
        assert_eq!(next_messages(&mut b, 3).await, want);
        for ws in [&mut a, &mut b] {
            let r = call(ws, json!({"op": "unsubscribe", "channel": ch})).await;
            assert_eq!(r["type"], "unsubscribed", "{r}");
        }
        // Published while neither worker has a subscriber.
        for k in 4..=6 {
            p.publish(ch, &format!("m{k}")).await;
        }
        for (ws, from) in [(&mut a, 2u64), (&mut b, 3)] {
            let since = json!({"epoch": epoch, "offset": from});
            let r = call(
                ws,
                json!({"op": "subscribe", "channel": ch, "since": since}),
            )
            .await;
            let at = json!({"type": "subscribed", "channel": ch, "recovered": true,
                "epoch": epoch, "offset": 6});
            assert_eq!(r, at);
            let want: Vec<(u64, String)> = (from + 1..=6).map(|k| (k, format!("m{k}"))).collect();
            assert_eq!(next_messages(ws, want.len()).await, want);
        }
        p.publish(ch, "live").await;
        for ws in [&mut a, &mut b] {
            assert_eq!(next_messages(ws, 1).await, [(7, "live".to_string())]);
        }
    }
}

const PRESENCE_SECRET: &str = "workers-presence-secret-0123456789abcdef";

fn presence_token(sub: &str) -> String {
    let claims = format!(r#"{{"exp":9999999999,"sub":"{sub}","subscribe":["*"]}}"#);
    corecast::auth::sign_token(&claims, PRESENCE_SECRET.as_bytes())
}

/// The users a `presence` answer lists.
fn listed(answer: &Value) -> Vec<String> {
    let members = answer["members"].as_array();
    let members = members.unwrap_or_else(|| panic!("no members: {answer}"));
    members
        .iter()
        .map(|m| m["user"].as_str().unwrap().to_string())
        .collect()
}

/// Presence without Redis with two workers: a channel's members are one
/// set whichever worker its subscribers are on — each subscriber gets its
/// reply then its own join, sees the others join and leave once, lists
/// the same members from either worker, and the member limit counts
/// users on both workers.
#[tokio::test]
async fn presence_is_one_per_channel_across_workers() {
    let srv = TestServer::start(|c| {
        c.workers = corecast::config::Workers::Count(2);
        c.auth.token_secret = Some(corecast::config::Secret(PRESENCE_SECRET.into()));
        c.presence.set_patterns("room-*").unwrap();
        c.presence.max_members = 2;
        c.presence.read_rate = 0;
    });
    let path = |user: &str| format!("/ws?token={}", presence_token(user));
    let mut ann = ws_connect(srv.addr, &path("ann")).await;
    let mut bob = ws_connect(srv.addr, &path("bob")).await;
    let spread = per_worker(&stats(srv.addr).await);
    assert!(spread[0] >= 1 && spread[1] >= 1, "{spread:?}");
    let mut cid = ws_connect(srv.addr, &path("cid")).await;
    let channels: Vec<String> = (0..6).map(|i| format!("room-{i}")).collect();
    let owners: HashSet<u64> = channels.iter().map(|c| owner_of(c, 2)).collect();
    assert_eq!(owners.len(), 2, "channels owned by both workers");
    let join_of = |ch: &str, user: &str| json!({"type": "join", "channel": ch, "user": user});
    for ch in &channels {
        let sub = json!({"op": "subscribe", "channel": ch, "presence": true, "id": 1});
        for (ws, user) in [(&mut ann, "ann"), (&mut bob, "bob")] {
            let r = call(ws, sub.clone()).await;
            assert_eq!(r["type"], "subscribed", "{r}");
            assert_eq!(
                next_json(ws).await,
                join_of(ch, user),
                "its own join, after its reply"
            );
        }
        assert_eq!(next_json(&mut ann).await, join_of(ch, "bob"));
        for ws in [&mut ann, &mut bob] {
            let r = call(ws, json!({"op": "presence", "channel": ch})).await;
            assert_eq!(listed(&r), ["ann", "bob"], "{r}");
        }
        // A third user is over the limit, whichever worker it is on.
        let r = call(&mut cid, sub.clone()).await;
        assert_eq!(r["code"], "presence_full", "{r}");
        let r = call(&mut bob, json!({"op": "unsubscribe", "channel": ch})).await;
        assert_eq!(r["type"], "unsubscribed", "{r}");
        let left = json!({"type": "leave", "channel": ch, "user": "bob"});
        assert_eq!(next_json(&mut ann).await, left);
        let r = call(&mut ann, json!({"op": "presence", "channel": ch})).await;
        assert_eq!(listed(&r), ["ann"], "{r}");
    }
    let s = stats(srv.addr).await;
    assert_eq!(
        counter(&s, "presence_members"),
        channels.len() as u64,
        "{s}"
    );
    assert_eq!(
        counter(&s, "presence_refused"),
        channels.len() as u64,
        "{s}"
    );
}
