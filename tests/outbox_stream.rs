//! Redis stream consumers with real servers: 10,000 entries added by four
//! concurrent writers while two instances consume them with one consumer
//! group and one is SIGKILLed; a consumer that dies before its `XACK`
//! (made certain: its Redis user may not `XACK`) and whose entries
//! another claims; poison entries dead-lettered.

mod common;
mod redis_support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::*;
use futures_util::SinkExt;
use redis_support::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

async fn subscriber(addr: std::net::SocketAddr, channel: &str) -> Ws {
    let mut ws = ws_connect(addr, "/ws").await;
    let req = json!({"op":"subscribe","channel":channel});
    ws.send(Message::text(req.to_string())).await.expect("send");
    let r = next_json(&mut ws).await;
    assert_eq!(r["type"], "subscribed", "{r}");
    ws
}

/// Messages until `want` distinct idempotency keys arrived (or `limit`).
async fn collect(mut ws: Ws, want: usize, limit: Duration) -> (HashMap<String, usize>, Vec<Value>) {
    let (mut keys, mut all) = (HashMap::new(), Vec::new());
    let deadline = Instant::now() + limit;
    while keys.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(m) = tokio::time::timeout(left, next_json(&mut ws)).await else {
            break;
        };
        let key = m["idempotency_key"].as_str().expect("an idempotency key");
        *keys.entry(key.to_string()).or_insert(0) += 1;
        all.push(m);
    }
    (keys, all)
}

/// Writer `w` adds `n` entries to `outbox`, each with its own key.
async fn writer(port: u16, w: usize, n: usize) -> Vec<String> {
    let mut c = RespConn::open(port, None).await;
    let mut keys = Vec::new();
    for i in 0..n {
        let key = format!("w{w}-{i}");
        let data = json!({"w": w, "i": i}).to_string();
        let r = c
            .cmd(&[
                "XADD",
                "outbox",
                "*",
                "channel",
                "orders",
                "data",
                &data,
                "idempotency-key",
                &key,
            ])
            .await;
        assert!(matches!(r, Resp::Bulk(Some(_))), "{r:?}");
        keys.push(key);
    }
    keys
}

/// The run over a stream: A (its own process) and B consume,
/// A is SIGKILLed mid-run; subscribers on B and C get every entry, copies
/// only with the same key; nothing stays pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_reaches_every_subscriber_through_a_kill() {
    let redis = RedisServer::start(&[]).await;
    let port = redis.port;
    let consumer = format!("redis://127.0.0.1:{port}?stream=outbox&claim_after=500ms&batch=100");
    let redis_url = format!("redis://127.0.0.1:{port}");
    let mut a = BinServer::spawn(&["--redis-url", &redis_url, "--consumer", &consumer]);
    let b = instance(redis.url("", ""), |c| {
        c.consumers.push(consumer.parse().expect("consumer"))
    });
    let c = instance(redis.url("", ""), |_| {});
    for addr in [a.addr, b.addr, c.addr] {
        wait_readyz(addr, 200).await;
    }
    let (sb, sc) = (
        subscriber(b.addr, "orders").await,
        subscriber(c.addr, "orders").await,
    );
    let want = 10_000;
    let rb = tokio::spawn(collect(sb, want, Duration::from_secs(120)));
    let rc = tokio::spawn(collect(sc, want, Duration::from_secs(120)));
    let writers: Vec<_> = (0..4)
        .map(|w| tokio::spawn(writer(port, w, 2500)))
        .collect();
    wait_until_stat(b.addr, |s| {
        s["consumers"]["outbox"]["published"].as_u64() > Some(1500)
    })
    .await;
    let by_a = stats(a.addr).await["consumers"]["outbox"]["published"].clone();
    assert!(
        by_a.as_u64() > Some(0),
        "A consumed too before it died: {by_a}"
    );
    a.child.kill().expect("SIGKILL");
    let _ = a.child.wait();
    let mut added = HashSet::new();
    for w in writers {
        added.extend(w.await.expect("writer"));
    }
    for (who, r) in [("B", rb), ("C", rc)] {
        let (keys, all) = r.await.expect("reader");
        let got: HashSet<String> = keys.keys().cloned().collect();
        let missing: Vec<_> = added.difference(&got).take(5).collect();
        assert!(
            missing.is_empty(),
            "{who}: entries never received, e.g. {missing:?}"
        );
        assert_eq!(got.len(), want);
        eprintln!(
            "stream, subscriber on {who}: {} messages, {} copies (same key); A published {by_a}",
            all.len(),
            all.len() - keys.len()
        );
    }
    wait_until("nothing pending", || async move {
        let mut c = RespConn::open(port, None).await;
        match c.cmd(&["XPENDING", "outbox", "corecast"]).await {
            Resp::Array(Some(p)) => p[0] == Resp::Int(0),
            _ => false,
        }
    })
    .await;
}

/// A consumer whose user may not `XACK` publishes, cannot acknowledge,
/// and is SIGKILLed: its entries stay pending until another consumer
/// claims them (`claim_after`) and publishes them again — each twice,
/// both copies with the same key, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_of_a_consumer_killed_before_xack_are_claimed_and_repeated() {
    let redis = RedisServer::start(&[]).await;
    let port = redis.port;
    let mut admin = RespConn::open(port, None).await;
    let r = admin
        .cmd(&[
            "ACL", "SETUSER", "noack", "on", ">pw", "~*", "&*", "+@all", "-xack",
        ])
        .await;
    assert_eq!(r, Resp::Simple("OK".into()));
    let keys = writer(port, 0, 10).await;
    let c = instance(redis.url("", ""), |_| {});
    wait_readyz(c.addr, 200).await;
    let ws = subscriber(c.addr, "orders").await;
    let no_ack = format!("redis://noack:pw@127.0.0.1:{port}?stream=outbox&claim_after=500ms");
    let redis_url = format!("redis://127.0.0.1:{port}");
    let mut a = BinServer::spawn(&["--redis-url", &redis_url, "--consumer", &no_ack]);
    let (first, _) = collect(ws, 10, Duration::from_secs(30)).await;
    assert_eq!(first.len(), 10, "A published them");
    a.child.kill().expect("SIGKILL");
    let _ = a.child.wait();
    match admin.cmd(&["XPENDING", "outbox", "corecast"]).await {
        Resp::Array(Some(p)) => assert_eq!(p[0], Resp::Int(10), "still pending with A"),
        other => panic!("XPENDING: {other:?}"),
    }
    let ws = subscriber(c.addr, "orders").await;
    let ok = format!("redis://127.0.0.1:{port}?stream=outbox&claim_after=500ms");
    let b = instance(redis.url("", ""), |cfg| {
        cfg.consumers.push(ok.parse().expect("consumer"))
    });
    let (again, all) = collect(ws, 10, Duration::from_secs(30)).await;
    assert_eq!(
        again.keys().collect::<HashSet<_>>(),
        first.keys().collect::<HashSet<_>>()
    );
    let order: Vec<&str> = all
        .iter()
        .map(|m| m["idempotency_key"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        keys.iter().map(String::as_str).collect::<Vec<_>>(),
        "in entry order"
    );
    wait_until_stat(b.addr, |s| s["consumers"]["outbox"]["published"] == 10).await;
}

/// Poison entries (a bad channel, data over --max-message-size, tags
/// that are not an object of strings, a missing field, a key too long)
/// go to `outbox_dead` with the reason; the rest are published in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_entries_are_dead_lettered() {
    let redis = RedisServer::start(&[]).await;
    let port = redis.port;
    let consumer = format!("redis://127.0.0.1:{port}?stream=outbox&name=shop");
    let srv = instance(redis.url("", ""), |c| {
        c.ws.max_message_size = 1024;
        c.consumers.push(consumer.parse().expect("consumer"));
    });
    wait_readyz(srv.addr, 200).await;
    let mut ws = subscriber(srv.addr, "orders").await;
    let mut c = RespConn::open(port, None).await;
    let big = "x".repeat(2000);
    let long_key = "k".repeat(200);
    let entries: [&[&str]; 7] = [
        &["channel", "orders", "data", "one"],
        &["channel", "bad channel", "data", "x"],
        &["channel", "orders", "data", &big],
        &["channel", "orders", "data", "x", "tags", "{\"a\":1}"],
        &["data", "no channel"],
        &[
            "channel",
            "orders",
            "data",
            "x",
            "idempotency-key",
            &long_key,
        ],
        &[
            "channel",
            "orders",
            "data",
            "seven",
            "tags",
            "{\"region\":\"eu\"}",
        ],
    ];
    for fields in entries {
        let mut args = vec!["XADD", "outbox", "*"];
        args.extend(fields);
        c.cmd(&args).await;
    }
    let one = next_json(&mut ws).await;
    let seven = next_json(&mut ws).await;
    assert_eq!(one["data"], "one");
    assert!(
        one["idempotency_key"]
            .as_str()
            .unwrap()
            .starts_with("shop:"),
        "{one}"
    );
    assert_eq!(
        (seven["data"].as_str(), &seven["tags"]),
        (Some("seven"), &json!({"region":"eu"}))
    );
    wait_until_stat(srv.addr, |s| {
        let c = &s["consumers"]["shop"];
        c["dead_lettered"] == 5 && c["published"] == 2
    })
    .await;
    let Resp::Array(Some(dead)) = c.cmd(&["XRANGE", "outbox_dead", "-", "+"]).await else {
        panic!("no dead-letter stream");
    };
    let reasons: Vec<String> = dead
        .iter()
        .map(|e| {
            let Resp::Array(Some(p)) = e else { panic!() };
            let Resp::Array(Some(f)) = &p[1] else {
                panic!()
            };
            let i = f.iter().position(|x| x.text() == "reason").unwrap();
            f[i + 1].text()
        })
        .collect();
    for (want, got) in [
        "invalid channel name",
        "over --max-message-size",
        "tags:",
        "channel or data missing",
        "refused (400)",
    ]
    .iter()
    .zip(&reasons)
    {
        assert!(got.contains(want), "{got} should say {want}");
    }
}
