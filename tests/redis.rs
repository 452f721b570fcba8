//! Redis mode against a real `redis-server`: cross-instance delivery,
//! interest-based routing, a Redis crash mid-stream, the bounded publish
//! buffer, refused credentials or databases, recovery from a long outage,
//! and retry logging.
//!
//! Every test starts its own `redis-server` on a free port (killed on
//! drop) and its corecast instances in-process on `127.0.0.1:0` (the
//! logging test alone runs the binary, to read its stderr). Clients
//! are tokio-tungstenite and raw TCP; Redis is observed from outside with
//! a small RESP client (`PUBSUB NUMSUB`, `INFO`). Waits are conditions
//! polled against deadlines.

mod common;
mod redis_support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures_util::{SinkExt, StreamExt};
use redis_support::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

async fn send_text(ws: &mut Ws, text: &str) {
    ws.send(Message::text(text)).await.expect("send");
}

/// `POST /publish/{channel}` on a keep-alive connection.
async fn publish_on(http: &mut HttpConn, channel: &str, body: &str) -> HttpResponse {
    let req = post_request(&format!("/publish/{channel}"), body.as_bytes(), true);
    http.request(&req).await
}

/// Reads plain-subscriber messages up to and including the text `fence`.
async fn plain_until(ws: &mut Ws, fence: &str) -> Vec<Message> {
    let mut got = Vec::new();
    loop {
        let m = next_msg(ws).await;
        let done = m == Message::text(fence);
        got.push(m);
        if done {
            return got;
        }
    }
}

/// Reads JSON-mode envelopes up to and including the one carrying `fence`.
async fn json_until(ws: &mut Ws, fence: &str) -> Vec<Value> {
    let mut got = Vec::new();
    loop {
        let v = next_json(ws).await;
        let done = v["data"] == fence;
        got.push(v);
        if done {
            return got;
        }
    }
}

/// The numbered messages `{prefix}{n}` among `texts`, in arrival order.
fn numbered<'a>(texts: impl IntoIterator<Item = &'a str>, prefix: &str) -> Vec<u64> {
    texts
        .into_iter()
        .filter_map(|t| t.strip_prefix(prefix)?.parse().ok())
        .collect()
}

// ------------------------------------------------------------------ 1 --

/// A subscriber on A receives what is published on B, over WebSocket and
/// over HTTP, complete, in order per publisher and without duplicates; a
/// JSON-mode subscriber on A gets the envelope (text and binary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_published_on_b_reach_subscribers_on_a() {
    one_worker_per_server("counts instances as Redis subscribers");
    let redis = RedisServer::start(&[]).await;
    let (a, b) = ready_pair(&redis).await;
    let mut rc = RespConn::open(redis.port, None).await;

    let mut plain = ws_connect(a.addr, "/ws/news").await;
    let mut json_sub = ws_connect(a.addr, "/ws").await;
    send_text(
        &mut json_sub,
        r#"{"op":"subscribe","channel":"news","id":1}"#,
    )
    .await;
    assert_eq!(
        next_json(&mut json_sub).await,
        json!({"type":"subscribed","channel":"news","id":1})
    );
    // Sends on B; as a `/ws/news` client it is a subscriber on B too.
    let mut publisher = ws_connect(b.addr, "/ws/news").await;
    rc.wait_numsub("news", 2).await;

    // Phase 1, one WebSocket publisher on B: 200 texts, a binary, a fence.
    // One publisher, so each subscriber must see exactly this, in order.
    let ws_msgs: Vec<Message> = (0..200)
        .map(|i| Message::text(format!("w:{i}")))
        .chain([Message::binary(vec![0x00, 0xff, 0x07])])
        .chain([Message::text("w:fence")])
        .collect();
    for m in &ws_msgs {
        publisher.send(m.clone()).await.expect("ws publish");
    }
    for (who, ws) in [
        ("plain on A", &mut plain),
        ("publisher on B", &mut publisher),
    ] {
        assert_eq!(plain_until(ws, "w:fence").await, ws_msgs, "{who}");
    }
    let envelope = |m: &Message| match m {
        Message::Text(t) => json!({"type":"message","channel":"news","data":t}),
        _ => json!({"type":"message","channel":"news","data_base64":"AP8H"}),
    };
    let want: Vec<Value> = ws_msgs.iter().map(envelope).collect();
    assert_eq!(json_until(&mut json_sub, "w:fence").await, want);

    // Phase 2, HTTP publishes on B, each confirmed by Redis, then a fence.
    let mut http = HttpConn::connect(b.addr).await;
    let http_msgs: Vec<String> = (0..50)
        .map(|i| format!("h:{i}"))
        .chain(["h:fence".to_string()])
        .collect();
    for m in &http_msgs {
        let r = publish_on(&mut http, "news", m).await;
        assert_eq!(r.status, 200, "publish {m}: {r:?}");
        // Both instances' subscriber connections got it from Redis; B's
        // only local subscriber is the WebSocket publisher.
        assert_eq!(
            r.json(),
            json!({"channel":"news","subscribers":1,"instances":2})
        );
    }
    let want: Vec<Message> = http_msgs
        .iter()
        .map(|m| Message::text(m.as_str()))
        .collect();
    for (who, ws) in [
        ("plain on A", &mut plain),
        ("publisher on B", &mut publisher),
    ] {
        assert_eq!(plain_until(ws, "h:fence").await, want, "{who}");
    }
    let want: Vec<Value> = want.iter().map(envelope).collect();
    assert_eq!(json_until(&mut json_sub, "h:fence").await, want);
}

// ------------------------------------------------------------------ 2 --

/// An instance subscribes in Redis to a channel only while it has local
/// subscribers, and so receives none of the traffic of channels it has no
/// subscribers for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_subscribe_in_redis_only_to_channels_with_local_subscribers() {
    let redis = RedisServer::start(&[]).await;
    let (a, b) = ready_pair(&redis).await;
    let mut rc = RespConn::open(redis.port, None).await;
    assert_eq!(rc.numsub("room").await, 0);

    // 0 -> 1 -> 2 instances as clients arrive; a second client on an
    // instance that is already subscribed changes nothing.
    let mut a1 = ws_connect(a.addr, "/ws/room").await;
    rc.wait_numsub("room", 1).await;
    let mut b1 = ws_connect(b.addr, "/ws").await;
    send_text(&mut b1, r#"{"op":"subscribe","channel":"room"}"#).await;
    assert_eq!(next_json(&mut b1).await["type"], "subscribed");
    rc.wait_numsub("room", 2).await;
    let a2 = ws_connect(a.addr, "/ws/room").await;
    wait_stat(a.addr, "subscriptions", |n| n == 2).await;

    // The first of A's two clients leaves: A keeps its subscription.
    a1.close(None).await.expect("close a1");
    wait_stat(a.addr, "subscriptions", |n| n == 1).await;
    // A fence through A's interest log: had A sent UNSUBSCRIBE for `room`,
    // Redis would have processed it before this SUBSCRIBE.
    let fence = ws_connect(a.addr, "/ws/fence-a").await;
    rc.wait_numsub("fence-a", 1).await;
    assert_eq!(rc.numsub("room").await, 2, "A still has a subscriber");

    // The last client on A leaves: 2 -> 1; B unsubscribes in JSON mode: 0.
    drop(a2);
    rc.wait_numsub("room", 1).await;
    send_text(&mut b1, r#"{"op":"unsubscribe","channel":"room"}"#).await;
    assert_eq!(next_json(&mut b1).await["type"], "unsubscribed");
    rc.wait_numsub("room", 0).await;
    drop(fence);
    rc.wait_numsub("fence-a", 0).await;

    // Traffic on a channel only A has subscribers for never reaches B.
    let mut only_a = ws_connect(a.addr, "/ws/only-a").await;
    let mut on_b = ws_connect(b.addr, "/ws/only-b").await;
    rc.wait_numsub("only-a", 1).await;
    rc.wait_numsub("only-b", 1).await;
    let a_before = counter(&stats(a.addr).await, "redis_messages_received");
    let b_before = counter(&stats(b.addr).await, "redis_messages_received");
    const N: u64 = 50;
    let mut http = HttpConn::connect(b.addr).await;
    for i in 0..N {
        let r = publish_on(&mut http, "only-a", &format!("m{i}")).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.json()["instances"], 1, "only A receives it from Redis");
    }
    for i in 0..N {
        assert_eq!(next_text(&mut only_a).await, format!("m{i}"));
    }
    // B's subscriber connection gets messages in Redis order: once this one
    // for B's own channel has arrived, any `only-a` message would have too.
    let r = publish_on(&mut http, "only-b", "fence").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(next_text(&mut on_b).await, "fence");
    let b_after = counter(&stats(b.addr).await, "redis_messages_received");
    let a_after = counter(&stats(a.addr).await, "redis_messages_received");
    assert_eq!(
        b_after - b_before,
        1,
        "B received only its own channel's fence"
    );
    assert_eq!(
        a_after - a_before,
        N,
        "A received every only-a message, nothing else"
    );
}

// ------------------------------------------------------------------ 3 --

/// Messages a WebSocket collected, and how its stream ended if it did.
#[derive(Default)]
struct Collected {
    texts: Vec<String>,
    ended: Option<String>,
}

/// Reads `stream` in the background into a shared [`Collected`].
fn collect<S>(stream: S) -> Arc<Mutex<Collected>>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
        + Send
        + Unpin
        + 'static,
{
    let out = Arc::new(Mutex::new(Collected::default()));
    let sink = out.clone();
    tokio::spawn(async move {
        let mut stream = stream;
        let ended = loop {
            match stream.next().await {
                Some(Ok(Message::Text(t))) => sink.lock().unwrap().texts.push(t),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(other)) => break format!("{other:?}"),
                Some(Err(e)) => break format!("error: {e}"),
                None => break "end of stream".to_string(),
            }
        };
        sink.lock().unwrap().ended = Some(ended);
    });
    out
}

/// Polls `cond` over a shared value until it holds (deadline: the tests').
async fn wait_for<T>(what: &str, shared: &Mutex<T>, cond: impl Fn(&T) -> bool) {
    wait_until(what, || {
        let ok = cond(&shared.lock().unwrap());
        async move { ok }
    })
    .await;
}

/// What the tests require of one subscriber's view of one publisher
/// across a Redis crash: every accepted message arrived; nothing refused
/// or never sent arrived; first arrivals are in publish order; repeats only
/// of messages that may have been in flight when Redis died (`seq <
/// dup_below`); the fence last.
fn check_at_least_once(
    who: &str,
    texts: &[String],
    prefix: &str,
    accepted: &BTreeSet<u64>,
    dup_below: u64,
) {
    let fence = format!("{prefix}fence");
    let mine: Vec<&String> = texts.iter().filter(|t| t.starts_with(prefix)).collect();
    assert_eq!(
        mine.last().map(|s| s.as_str()),
        Some(fence.as_str()),
        "{who}: fence last"
    );
    let seqs = numbered(mine.iter().map(|s| s.as_str()), prefix);
    assert_eq!(
        seqs.len() + 1,
        mine.len(),
        "{who}: unexpected {prefix} messages"
    );
    let mut seen = BTreeSet::new();
    let mut last_new = None;
    for &s in &seqs {
        assert!(
            accepted.contains(&s),
            "{who}: {prefix}{s} was never accepted"
        );
        if seen.insert(s) {
            assert!(
                last_new.is_none_or(|l| s > l),
                "{who}: {prefix}{s} arrived after {prefix}{last_new:?}"
            );
            last_new = Some(s);
        } else {
            assert!(
                s < dup_below,
                "{who}: {prefix}{s} arrived twice but was published after the crash"
            );
        }
    }
    let missing: Vec<_> = accepted.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "{who}: accepted but lost: {prefix}{missing:?}"
    );
}

/// Redis is SIGKILLed while B publishes a stream over HTTP and WebSocket
/// and restarted on the same port: subscribers on A and B stay connected,
/// both instances go not-ready and ready again, and every publish that was
/// accepted (200, 202, or a WebSocket message not refused) is delivered to
/// every subscriber — at least once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_crash_mid_stream_loses_no_accepted_message() {
    one_worker_per_server("counts instances as Redis subscribers");
    let mut redis = RedisServer::start(&[]).await;
    // The default resume delay (1.5 s) is what covers the two instances
    // reconnecting up to a backoff step (1 s) apart; keep it (with 1 s,
    // a fresh clone's CI run lost one message: A subscribed again just
    // after B flushed its buffer).
    let default = corecast::config::Config::default().redis.resume_delay;
    assert_eq!(default, Duration::from_millis(1500));
    let one_sec = |c: &mut corecast::config::Config| c.redis.resume_delay = default;
    let a = instance(redis.url("", ""), one_sec);
    let b = instance(redis.url("", ""), one_sec);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut rc = RespConn::open(redis.port, None).await;

    let sub_a = collect(ws_connect(a.addr, "/ws/live").await);
    let sub_b = collect(ws_connect(b.addr, "/ws/live").await);
    let (mut ws_pub, ws_pub_rx) = ws_connect(b.addr, "/ws/live").await.split();
    let echo_b = collect(ws_pub_rx);
    rc.wait_numsub("live", 2).await;
    drop(rc);

    let stop = Arc::new(AtomicBool::new(false));
    let http_seq = Arc::new(AtomicU64::new(0));
    let ws_seq = Arc::new(AtomicU64::new(0));
    let outcomes: Arc<Mutex<Vec<(u64, u16)>>> = Arc::default();
    let http_task = tokio::spawn({
        let (stop, seq, outcomes, addr) =
            (stop.clone(), http_seq.clone(), outcomes.clone(), b.addr);
        async move {
            let mut http = HttpConn::connect(addr).await;
            while !stop.load(Ordering::SeqCst) {
                let n = seq.fetch_add(1, Ordering::SeqCst);
                let r = publish_on(&mut http, "live", &format!("h:{n}")).await;
                outcomes.lock().unwrap().push((n, r.status));
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }
    });
    let ws_task = tokio::spawn({
        let (stop, seq) = (stop.clone(), ws_seq.clone());
        async move {
            while !stop.load(Ordering::SeqCst) {
                let n = seq.fetch_add(1, Ordering::SeqCst);
                ws_pub
                    .send(Message::text(format!("w:{n}")))
                    .await
                    .expect("ws publish");
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            ws_pub
        }
    });
    let count = |c: &Collected| c.texts.len() >= 30;
    wait_for("traffic before the crash (A)", &sub_a, count).await;
    wait_for("traffic before the crash (B)", &sub_b, count).await;

    // Freeze Redis first: what B publishes next is written to its command
    // connection and never answered, so it is certainly in flight when
    // Redis dies and must be sent again after the restart.
    redis.freeze();
    let ws_at_freeze = ws_seq.load(Ordering::SeqCst);
    wait_until("publishes written to a frozen Redis", || {
        let n = ws_seq.load(Ordering::SeqCst);
        async move { n >= ws_at_freeze + 10 }
    })
    .await;
    redis.kill();
    // Whatever Redis may have processed was sent before this point.
    let http_at_kill = http_seq.load(Ordering::SeqCst);
    let ws_at_kill = ws_seq.load(Ordering::SeqCst);
    let down = wait_readyz(a.addr, 503).await;
    assert!(down["reason"].as_str().is_some(), "{down}");
    wait_readyz(b.addr, 503).await;
    wait_for("publishes buffered during the outage", &outcomes, |o| {
        o.iter()
            .filter(|&&(n, s)| n >= http_at_kill && s == 202)
            .count()
            >= 20
    })
    .await;

    redis.restart().await;
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let http_at_recovery = http_seq.load(Ordering::SeqCst);
    wait_for("confirmed publishes after recovery", &outcomes, |o| {
        o.iter()
            .filter(|&&(n, s)| n >= http_at_recovery && s == 200)
            .count()
            >= 20
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    within("HTTP publisher", http_task)
        .await
        .expect("HTTP publisher");
    let mut ws_pub = within("WS publisher", ws_task).await.expect("WS publisher");

    let mut http = HttpConn::connect(b.addr).await;
    let r = publish_on(&mut http, "live", "h:fence").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["instances"], 2, "both instances subscribed again");
    ws_pub
        .send(Message::text("w:fence"))
        .await
        .expect("ws fence");

    let outcomes = outcomes.lock().unwrap().clone();
    let odd: Vec<_> = outcomes
        .iter()
        .filter(|o| ![200, 202].contains(&o.1))
        .collect();
    assert!(
        odd.is_empty(),
        "the 8 MiB buffer refuses nothing here: {odd:?}"
    );
    let http_ok: BTreeSet<u64> = outcomes
        .iter()
        .filter(|o| [200, 202].contains(&o.1))
        .map(|o| o.0)
        .collect();
    let ws_ok: BTreeSet<u64> = (0..ws_seq.load(Ordering::SeqCst)).collect();
    assert!(outcomes.iter().any(|o| o.1 == 202) && outcomes.iter().any(|o| o.1 == 200));

    // Shown only when a check below fails: what each instance counted.
    eprintln!("A /stats: {}", stats(a.addr).await);
    eprintln!("B /stats: {}", stats(b.addr).await);
    for (who, sub) in [("A", &sub_a), ("B", &sub_b), ("publisher on B", &echo_b)] {
        let fenced = |c: &Collected| {
            c.ended.is_some()
                || (c.texts.iter().any(|t| t == "h:fence")
                    && c.texts.iter().any(|t| t == "w:fence"))
        };
        wait_for(who, sub, fenced).await;
        let c = sub.lock().unwrap();
        assert_eq!(c.ended, None, "{who}: the subscriber must stay connected");
        check_at_least_once(who, &c.texts, "h:", &http_ok, http_at_kill);
        check_at_least_once(who, &c.texts, "w:", &ws_ok, ws_at_kill);
    }
}

// ------------------------------------------------------------------ 4 --

/// With Redis down, publishes fill the bounded buffer (HTTP 202), then are
/// refused with the publisher told (HTTP 503, JSON-mode `unavailable`,
/// plain WebSocket close 1013) and counted; when Redis returns, the
/// buffered ones are delivered, in order, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_publish_buffer_refuses_and_the_buffered_are_delivered_later() {
    one_worker_per_server("each worker has its own publish buffer");
    let mut redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), |c| c.redis.publish_buffer = 4096);
    wait_readyz(a.addr, 200).await;
    let mut rc = RespConn::open(redis.port, None).await;
    let mut sub = ws_connect(a.addr, "/ws/buf").await;
    rc.wait_numsub("buf", 1).await;
    drop(rc);
    let mut http = HttpConn::connect(a.addr).await;
    let r = publish_on(&mut http, "buf", "before").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(next_text(&mut sub).await, "before");

    redis.kill();
    wait_readyz(a.addr, 503).await;
    wait_stat(a.addr, "redis_connected", |n| n == 0).await;

    let body = |i: usize| format!("{i:03}:{}", "x".repeat(200));
    let mut accepted = Vec::new();
    let mut refused = 0;
    for i in 0..100 {
        let r = publish_on(&mut http, "buf", &body(i)).await;
        match r.status {
            202 => {
                assert_eq!(r.json()["buffered"], true, "{r:?}");
                accepted.push(body(i));
            }
            503 => {
                let err = r.json()["error"].as_str().map(str::to_owned);
                assert!(err.is_some_and(|e| e.contains("buffer")), "{r:?}");
                refused += 1;
                break;
            }
            _ => panic!("publish {i}: {r:?}"),
        }
    }
    assert_eq!(refused, 1, "4 KiB cannot hold 100 publishes of 200 bytes");
    assert!(accepted.len() >= 5, "only {} buffered", accepted.len());
    // Full stays full.
    for i in 100..103 {
        let r = publish_on(&mut http, "buf", &body(i)).await;
        assert_eq!(r.status, 503, "{r:?}");
        refused += 1;
    }
    // A JSON-mode publisher is told in band (same size: a smaller message
    // could still fit in the space left)...
    let mut json_pub = ws_connect(a.addr, "/ws").await;
    let req = json!({"op":"publish","channel":"buf","data":body(200),"id":9});
    send_text(&mut json_pub, &req.to_string()).await;
    let e = next_json(&mut json_pub).await;
    assert_eq!(
        (&e["type"], &e["code"], &e["id"]),
        (&json!("error"), &json!("unavailable"), &json!(9)),
        "{e}"
    );
    refused += 1;
    // ...a plain WebSocket publisher has no reply channel: close 1013.
    let mut plain_pub = ws_connect(a.addr, "/ws/buf").await;
    send_text(&mut plain_pub, &body(201)).await;
    assert_eq!(expect_close(&mut plain_pub).await, 1013);
    refused += 1;
    let s = stats(a.addr).await;
    assert_eq!(counter(&s, "redis_publishes_rejected"), refused);
    assert!(
        counter(&s, "redis_publishes_buffered") >= accepted.len() as u64,
        "{s}"
    );

    redis.restart().await;
    wait_readyz(a.addr, 200).await;
    wait_stat(a.addr, "redis_publishes_buffered", |n| n == 0).await;
    let r = publish_on(&mut http, "buf", "fence").await;
    assert_eq!(r.status, 200, "{r:?}");
    let got = plain_until(&mut sub, "fence").await;
    let mut want: Vec<Message> = accepted.iter().map(|t| Message::text(t.as_str())).collect();
    want.push(Message::text("fence"));
    assert_eq!(
        got, want,
        "buffered publishes, in order, once, then the fence"
    );
}

// ------------------------------------------------------------------ 5 --

/// A wrong password: not ready with the refusal as the reason, still
/// serving, and retrying slowly rather than storming Redis. The right
/// password: ready and delivering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_password_is_reported_and_not_retried_in_a_loop() {
    one_worker_per_server("counts one instance's connection attempts");
    let redis = RedisServer::start(&["--requirepass", "secret"]).await;
    let mut rc = RespConn::open(redis.port, Some("secret")).await;
    let wrong = instance(redis.url(":wrong@", ""), |_| {});

    let deadline = Instant::now() + DEADLINE;
    let reason = loop {
        let (status, body) = readyz(wrong.addr).await.expect("/readyz answers");
        assert_eq!(status, 503, "ready with a wrong password? {body}");
        let reason = body["reason"].as_str().unwrap_or_default().to_string();
        if reason.contains("refused") {
            break reason;
        }
        assert!(Instant::now() < deadline, "no refusal in /readyz: {body}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(reason.contains("WRONGPASS"), "Redis's own words: {reason}");

    // Still serving: health, upgrades, and publishes kept for later.
    assert_healthy(wrong.addr).await;
    let mut ws = ws_connect(wrong.addr, "/ws").await;
    send_text(&mut ws, r#"{"op":"subscribe","channel":"x","id":1}"#).await;
    assert_eq!(next_json(&mut ws).await["type"], "subscribed");
    let r = post(wrong.addr, "/publish/x", b"kept").await;
    assert_eq!(r.status, 202, "{r:?}");

    // No reconnect storm: watch Redis's connection counter for 2 s (an
    // observation window, not a synchronisation). Counted so far: our
    // start-up PING, this connection, corecast's two refused ones.
    let first = rc.info_u64("stats", "total_connections_received").await;
    assert!(first <= 4, "{first} connections already");
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let n = rc.info_u64("stats", "total_connections_received").await;
        assert!(
            n < 10 && n <= first + 1,
            "reconnect storm: {first} -> {n} connections"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _) = readyz(wrong.addr).await.expect("/readyz");
    assert_eq!(status, 503);

    let right = instance(redis.url(":secret@", ""), |_| {});
    wait_readyz(right.addr, 200).await;
    let mut sub = ws_connect(right.addr, "/ws/y").await;
    rc.wait_numsub("y", 1).await;
    let r = post(right.addr, "/publish/y", b"authenticated").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(next_text(&mut sub).await, "authenticated");
}

// ------------------------------------------------------------------ 6 --

/// A database Redis does not have: not ready, with Redis's error; a
/// database it has: ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_database_is_reported() {
    let redis = RedisServer::start(&[]).await;
    let bad = instance(redis.url("", "/99"), |_| {});
    let good = instance(redis.url("", "/15"), |_| {});

    let deadline = Instant::now() + DEADLINE;
    loop {
        let (status, body) = readyz(bad.addr).await.expect("/readyz answers");
        assert_eq!(status, 503, "ready on database 99? {body}");
        let reason = body["reason"].as_str().unwrap_or_default();
        if reason.contains("refused") {
            assert!(reason.contains("DB index is out of range"), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "no refusal in /readyz: {body}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_healthy(bad.addr).await;
    wait_readyz(good.addr, 200).await;
}

// ------------------------------------------------------------------ 7 --

/// After an outage longer than the canary's staleness limit (2 × its 1 s
/// deadline), the instance comes back with exactly one new connection per
/// role, stays ready, and delivers — the canary from before the outage
/// must not count against the fresh subscriber connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_outage_ends_with_one_clean_reconnect() {
    one_worker_per_server("counts one instance's Redis connections");
    let mut redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), |_| {});
    wait_readyz(a.addr, 200).await;
    let mut sub = ws_connect(a.addr, "/ws/long").await;
    let mut rc = RespConn::open(redis.port, None).await;
    rc.wait_numsub("long", 1).await;
    drop(rc);

    redis.kill();
    let killed = Instant::now();
    wait_readyz(a.addr, 503).await;
    // The outage length is the scenario, not a synchronisation: watch the
    // instance report not-ready for all of it.
    while killed.elapsed() < Duration::from_millis(2500) {
        let (status, body) = readyz(a.addr).await.expect("/readyz");
        assert_eq!(status, 503, "ready without Redis: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    redis.restart().await;
    let mut rc = RespConn::open(redis.port, None).await;
    wait_readyz(a.addr, 200).await;
    // Our start-up PING, this connection, corecast's two.
    let conns = rc.info_u64("stats", "total_connections_received").await;
    assert_eq!(conns, 4, "one reconnect per corecast connection");
    // Ready stays ready for ten canary intervals, with no new connection.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        let (status, body) = readyz(a.addr).await.expect("/readyz");
        assert_eq!(status, 200, "readiness flapped after recovery: {body}");
        let n = rc.info_u64("stats", "total_connections_received").await;
        assert_eq!(n, conns, "corecast reconnected again after recovery");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A plain PUBLISH by another program reaches the subscriber as text.
    assert_eq!(
        rc.cmd(&["PUBLISH", "corecast:long", "from redis-cli"])
            .await,
        Resp::Int(1)
    );
    assert_eq!(next_text(&mut sub).await, "from redis-cli");
}

// ------------------------------------------------------------------ 8 --

/// Redis unreachable: each connection logs "redis unavailable" once, not
/// on every retry. Runs the real binary, because the logger writes to the
/// process's stderr, which an in-process server shares with the harness.
#[test]
fn an_unreachable_redis_is_logged_once_per_connection() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    // A port nothing listens on: every attempt is refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_corecast"))
        .args(["--listen", "127.0.0.1:0", "--log-level", "warn"])
        .args(["--redis-url", &format!("redis://127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run corecast");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Observation window: backoff from 100 ms makes about five attempts per
    // connection in 2.5 s.
    let until = Instant::now() + Duration::from_millis(2500);
    let mut lines = Vec::new();
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let warned: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("redis unavailable"))
        .collect();
    assert_eq!(warned.len(), 2, "one warning per connection: {warned:#?}");
    assert!(
        warned.iter().any(|l| l.contains("command connection")),
        "{warned:#?}"
    );
    assert!(
        warned.iter().any(|l| l.contains("subscriber connection")),
        "{warned:#?}"
    );
}
