//! Channel namespaces, whole server, in embedded and in Redis mode: a
//! channel of a namespace that is not configured is refused everywhere
//! (JSON, path mode, HTTP publish, history, presence); `publish`,
//! `subscribe` (token, anyone, user channels), `allow-anonymous` and
//! `max-message-size` per namespace; event streams (`GET /sse`) under
//! the same rules.

mod common;
mod redis_support;
mod sse_support;

use std::net::SocketAddr;

use common::*;
use corecast::auth::sign_token;
use corecast::config::Secret;
use futures_util::SinkExt;
use redis_support::RedisServer;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const SECRET: &str = "namespace-test-secret-0123456789abcdef";

/// The two modes every test runs in: embedded, then Redis.
async fn modes() -> (RedisServer, [Option<corecast::redis::RedisUrl>; 2]) {
    let redis = RedisServer::start(&[]).await;
    let url = redis.url("", "");
    (redis, [None, Some(url)])
}

/// A server in `redis`'s mode with these namespaces (and tokens
/// required when `tokens`), ready (in Redis mode: connected).
async fn server(
    redis: &Option<corecast::redis::RedisUrl>,
    namespaces: &str,
    tokens: bool,
) -> TestServer {
    let (redis, namespaces) = (redis.clone(), namespaces.to_string());
    let s = TestServer::start(move |c| {
        c.redis.url = redis;
        if tokens {
            c.auth.token_secret = Some(Secret(SECRET.into()));
        }
        c.namespaces.specs.add_compact(&namespaces, "test").unwrap();
    });
    let addr = s.addr;
    wait_until("ready", || async move {
        get(addr, "/readyz").await.status == 200
    })
    .await;
    s
}

fn token(sub: &str, subscribe: &str, publish: &str) -> String {
    let claims = format!(
        r#"{{"exp":9999999999,"sub":"{sub}","subscribe":{subscribe},"publish":{publish}}}"#
    );
    sign_token(&claims, SECRET.as_bytes())
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.expect("send");
}

/// Sends a request with `id` 1 and returns the reply.
async fn ask(ws: &mut Ws, mut v: Value) -> Value {
    v["id"] = json!(1);
    send(ws, v).await;
    let reply = next_json(ws).await;
    assert_eq!(reply["id"], 1, "{reply}");
    reply
}

async fn subscribe(ws: &mut Ws, channel: &str) -> Value {
    ask(ws, json!({"op":"subscribe","channel":channel})).await
}

async fn publish(ws: &mut Ws, channel: &str, data: &str) -> Value {
    ask(ws, json!({"op":"publish","channel":channel,"data":data})).await
}

fn error_code(reply: &Value) -> &str {
    assert_eq!(reply["type"], "error", "{reply}");
    reply["code"].as_str().unwrap_or_default()
}

/// A JSON publish by a subscriber of the channel: its ack (in embedded
/// mode after its own delivery, in Redis mode before) and the message.
async fn publish_echoed(ws: &mut Ws, channel: &str, data: &str) {
    send(
        ws,
        json!({"op":"publish","channel":channel,"data":data,"id":1}),
    )
    .await;
    let mut got = [next_json(ws).await, next_json(ws).await];
    got.sort_by_key(|v| v["type"] != "published");
    assert_eq!(got[0]["type"], "published", "{got:?}");
    assert_eq!(
        got[1],
        json!({"type":"message","channel":channel,"data":data})
    );
}

async fn expect_message(ws: &mut Ws, channel: &str, data: &str) {
    let m = next_json(ws).await;
    assert_eq!(m, json!({"type":"message","channel":channel,"data":data}));
}

/// The status of an upgrade request (101 when accepted).
async fn upgrade_status(addr: SocketAddr, path: &str) -> u16 {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    http_raw(addr, req.as_bytes()).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfigured_namespace_is_refused_everywhere() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let s = server(mode, "chat:presence=true", false).await;
        let mut ws = ws_connect(s.addr, "/ws").await;
        for op in ["subscribe", "presence"] {
            let r = ask(&mut ws, json!({"op":op,"channel":"other:x"})).await;
            assert_eq!(error_code(&r), "unknown_channel", "{op}");
        }
        assert_eq!(
            error_code(&publish(&mut ws, "other:x", "m").await),
            "unknown_channel"
        );
        for path in ["/history/other:x", "/presence/other:x"] {
            assert_eq!(get(s.addr, path).await.status, 404, "{path}");
        }
        assert_eq!(post(s.addr, "/publish/other:x", b"m").await.status, 404);
        assert_eq!(upgrade_status(s.addr, "/ws/other:x").await, 404);
        // The configured namespace and the default one work.
        assert_eq!(subscribe(&mut ws, "chat:a").await["type"], "subscribed");
        assert_eq!(subscribe(&mut ws, "plain").await["type"], "subscribed");
        assert_eq!(upgrade_status(s.addr, "/ws/chat:b").await, 101);
        assert_eq!(get(s.addr, "/presence/chat:a").await.status, 200);
        publish_echoed(&mut ws, "chat:a", "hello").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_namespaces_a_colon_means_nothing() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let s = server(mode, "", false).await;
        let mut ws = ws_connect(s.addr, "/ws").await;
        assert_eq!(subscribe(&mut ws, "other:x").await["type"], "subscribed");
        publish_echoed(&mut ws, "other:x", "m").await;
        assert_eq!(post(s.addr, "/publish/other:y", b"m").await.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_only_and_subscriber_publishing() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let s = server(mode, "feed:publish=server,room:publish=subscribers", false).await;
        let mut ws = ws_connect(s.addr, "/ws").await;
        assert_eq!(
            subscribe(&mut ws, "feed:prices").await["type"],
            "subscribed"
        );
        assert_eq!(
            error_code(&publish(&mut ws, "feed:prices", "x").await),
            "forbidden"
        );
        let mut path = RawWs::connect(s.addr, "/ws/feed:prices").await;
        path.send(0x81, b"from a client").await;
        path.expect_close(1008).await;
        assert_eq!(
            post(s.addr, "/publish/feed:prices", b"tick").await.status,
            200
        );
        expect_message(&mut ws, "feed:prices", "tick").await;
        // Subscribers only: refused before subscribing, allowed after.
        assert_eq!(
            error_code(&publish(&mut ws, "room:1", "x").await),
            "forbidden"
        );
        assert_eq!(subscribe(&mut ws, "room:1").await["type"], "subscribed");
        publish_echoed(&mut ws, "room:1", "hi").await;
        let st = stats(s.addr).await;
        assert_eq!(counter(&st, "publish_forbidden"), 3, "{st}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_channels_belong_to_their_user() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let s = server(mode, "notifications:subscribe=user,publish=server", true).await;
        let t = token("42", r#"["plain"]"#, "[]");
        let mut ws = ws_connect(s.addr, &format!("/ws?token={t}")).await;
        let mine = subscribe(&mut ws, "notifications:#42").await;
        assert_eq!(mine["type"], "subscribed", "{mine}");
        let theirs = subscribe(&mut ws, "notifications:#43").await;
        assert_eq!(error_code(&theirs), "forbidden");
        assert_eq!(
            error_code(&subscribe(&mut ws, "notifications:all").await),
            "forbidden"
        );
        // The server publishes to the user, `#` written %23 in the URL.
        let r = post(s.addr, "/publish/notifications:%2342", b"you have mail").await;
        assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
        expect_message(&mut ws, "notifications:#42", "you have mail").await;
        let other = format!("/ws/notifications:%2343?token={t}");
        assert_eq!(upgrade_status(s.addr, &other).await, 403);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_connections_reach_only_namespaces_that_allow_them() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let s = server(
            mode,
            "public:subscribe=anyone,allow-anonymous=true,private:",
            true,
        )
        .await;
        let mut anon = ws_connect(s.addr, "/ws").await;
        assert_eq!(
            subscribe(&mut anon, "public:news").await["type"],
            "subscribed"
        );
        assert_eq!(
            error_code(&subscribe(&mut anon, "private:x").await),
            "forbidden"
        );
        assert_eq!(
            error_code(&subscribe(&mut anon, "plain").await),
            "forbidden"
        );
        assert_eq!(
            error_code(&publish(&mut anon, "public:news", "x").await),
            "forbidden"
        );
        assert_eq!(upgrade_status(s.addr, "/ws/public:news").await, 101);
        assert_eq!(upgrade_status(s.addr, "/ws/private:x").await, 403);
        assert_eq!(upgrade_status(s.addr, "/ws/plain").await, 403);
        // A token that does not list the channel: `anyone` admits it.
        let t = token("7", r#"["private:x"]"#, "[]");
        let mut user = ws_connect(s.addr, &format!("/ws?token={t}")).await;
        assert_eq!(
            subscribe(&mut user, "public:news").await["type"],
            "subscribed"
        );
        assert_eq!(
            subscribe(&mut user, "private:x").await["type"],
            "subscribed"
        );
        assert_eq!(
            error_code(&subscribe(&mut user, "private:y").await),
            "forbidden"
        );
        assert_eq!(post(s.addr, "/publish/public:news", b"n").await.status, 200);
        expect_message(&mut anon, "public:news", "n").await;
        expect_message(&mut user, "public:news", "n").await;
    }
    // Without a namespace allowing it, a missing token is refused as before.
    let s = server(&None, "private:", true).await;
    assert_eq!(upgrade_status(s.addr, "/ws").await, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_may_lower_the_message_size() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let s = server(mode, "small:max-message-size=8", false).await;
        let mut ws = ws_connect(s.addr, "/ws").await;
        assert_eq!(subscribe(&mut ws, "small:a").await["type"], "subscribed");
        let r = publish(&mut ws, "small:a", "123456789").await;
        assert_eq!(error_code(&r), "message_too_large");
        assert_eq!(
            post(s.addr, "/publish/small:a", b"123456789").await.status,
            413
        );
        assert_eq!(
            post(s.addr, "/publish/small:a", b"12345678").await.status,
            200
        );
        expect_message(&mut ws, "small:a", "12345678").await;
        let mut path = RawWs::connect(s.addr, "/ws/small:b").await;
        path.send(0x81, b"123456789").await;
        path.expect_close(1009).await;
        // The default namespace keeps the global limit.
        assert_eq!(
            post(s.addr, "/publish/plain", b"123456789").await.status,
            200
        );
    }
}

/// Server with a global history too (`--history-size 4`).
async fn server_with_history(
    redis: &Option<corecast::redis::RedisUrl>,
    namespaces: &str,
) -> TestServer {
    let (redis, namespaces) = (redis.clone(), namespaces.to_string());
    let s = TestServer::start(move |c| {
        c.redis.url = redis;
        c.history.size = 4;
        c.namespaces.specs.add_compact(&namespaces, "test").unwrap();
    });
    let addr = s.addr;
    wait_until("ready", || async move {
        get(addr, "/readyz").await.status == 200
    })
    .await;
    s
}

async fn history_offsets(addr: SocketAddr, channel: &str) -> Vec<u64> {
    let r = get(addr, &format!("/history/{channel}")).await;
    assert_eq!(
        r.status,
        200,
        "{channel}: {:?}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    let messages = v["messages"].as_array().expect("messages").iter();
    messages
        .map(|m| m["offset"].as_u64().expect("offset"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_kept_per_namespace() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        // Global history off; on (2 messages) in `chat` only.
        let s = server(mode, "chat:history-size=2,feed:", false).await;
        for channel in ["chat:a", "feed:a", "plain"] {
            for n in 0..3 {
                let r = post(
                    s.addr,
                    &format!("/publish/{channel}"),
                    format!("m{n}").as_bytes(),
                )
                .await;
                assert_eq!(r.status, 200, "{channel}");
            }
        }
        assert_eq!(history_offsets(s.addr, "chat:a").await, [2, 3]);
        assert_eq!(get(s.addr, "/history/feed:a").await.status, 404);
        assert_eq!(get(s.addr, "/history/plain").await.status, 404);
        let mut ws = ws_connect(s.addr, "/ws").await;
        let with = subscribe(&mut ws, "chat:a").await;
        assert_eq!(with["offset"], 3, "{with}");
        assert!(with["epoch"].is_string(), "{with}");
        let without = subscribe(&mut ws, "feed:a").await;
        assert!(without.get("epoch").is_none(), "{without}");
        // Resuming in `chat` replays what was missed.
        let epoch = with["epoch"].as_str().unwrap().to_string();
        post(s.addr, "/publish/chat:a", b"m3").await;
        expect_message_at(&mut ws, "chat:a", "m3").await;
        let mut late = ws_connect(s.addr, "/ws").await;
        let r = ask(
            &mut late,
            json!({"op":"subscribe","channel":"chat:a","since":{"epoch":epoch,"offset":3}}),
        )
        .await;
        assert_eq!(r["recovered"], true, "{r}");
        expect_message_at(&mut late, "chat:a", "m3").await;

        // Global history on (4); a namespace turns it off.
        let s = server_with_history(mode, "quiet:history-size=0").await;
        for channel in ["quiet:a", "plain"] {
            for n in 0..5 {
                post(
                    s.addr,
                    &format!("/publish/{channel}"),
                    format!("m{n}").as_bytes(),
                )
                .await;
            }
        }
        assert_eq!(get(s.addr, "/history/quiet:a").await.status, 404);
        assert_eq!(history_offsets(s.addr, "plain").await, [2, 3, 4, 5]);
    }
}

/// A delivery with its history offset (the JSON envelope carries it).
async fn expect_message_at(ws: &mut Ws, channel: &str, data: &str) {
    let m = next_json(ws).await;
    assert_eq!(
        (m["type"].as_str(), m["channel"].as_str()),
        (Some("message"), Some(channel)),
        "{m}"
    );
    assert_eq!(m["data"], data, "{m}");
    assert!(m["offset"].is_u64(), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_on_subscribe_sends_the_latest_message() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let spec = "last:history-size=10,recover-on-subscribe=true,kept:history-size=10";
        let s = server(mode, spec, false).await;
        let mut ws = ws_connect(s.addr, "/ws").await;
        // Nothing published yet: a plain subscribe.
        let empty = subscribe(&mut ws, "last:empty").await;
        assert_eq!(empty["type"], "subscribed", "{empty}");
        for channel in ["last:a", "kept:a"] {
            for n in 1..=3 {
                post(
                    s.addr,
                    &format!("/publish/{channel}"),
                    format!("m{n}").as_bytes(),
                )
                .await;
            }
        }
        let r = subscribe(&mut ws, "last:a").await;
        assert_eq!(
            (r["type"].as_str(), r["offset"].as_u64()),
            (Some("subscribed"), Some(3)),
            "{r}"
        );
        assert_eq!(r["recovered"], true, "{r}");
        expect_message_at(&mut ws, "last:a", "m3").await;
        // Without the key: no replay; the next frame is the next reply.
        let r = subscribe(&mut ws, "kept:a").await;
        assert!(r.get("recovered").is_none(), "{r}");
        let pong = subscribe(&mut ws, "plain").await;
        assert_eq!(pong["type"], "subscribed", "{pong}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_is_on_and_bounded_per_namespace() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let spec = "room:presence=true,presence-max-members=1,quiet:";
        let s = server(mode, spec, true).await;
        let all = r#"["*"]"#;
        let mut a = ws_connect(s.addr, &format!("/ws?token={}", token("a", all, all))).await;
        let mut b = ws_connect(s.addr, &format!("/ws?token={}", token("b", all, all))).await;
        let r = subscribe(&mut a, "room:1").await;
        assert_eq!(r["type"], "subscribed", "{r}");
        send(&mut b, json!({"op":"subscribe","channel":"room:1","id":1})).await;
        let mut r = next_json(&mut b).await;
        if mode.is_some() && r["type"] == "subscribed" {
            // Users on another instance (in Redis mode each worker is
            // one): only Redis knows them, its refusal comes on its own.
            // It races the acknowledgement (which waits for the
            // subscriber connection's SUBSCRIBE, the refusal for the
            // command connection's answer): either may come first, and a
            // refusal that comes first takes the waiting ack with it.
            r = next_json(&mut b).await;
        }
        assert_eq!(
            error_code(&r),
            "presence_full",
            "the namespace's bound of 1"
        );
        let r = ask(&mut a, json!({"op":"presence","channel":"room:1"})).await;
        assert_eq!(r["count"], 1, "{r}");
        let r = ask(&mut a, json!({"op":"presence","channel":"quiet:1"})).await;
        assert_eq!(error_code(&r), "presence_off");
        let r = subscribe(&mut b, "quiet:1").await;
        assert_eq!(r["type"], "subscribed", "no presence, no bound: {r}");
    }
}

/// Sends every request in batches (reading each batch's replies before
/// the next, so the replies never pile up past the outbound bound) and
/// returns how many replies had each type.
async fn subscribe_all(ws: &mut Ws, channels: &[String]) -> (usize, usize) {
    let (mut ok, mut refused) = (0, 0);
    for batch in channels.chunks(500) {
        for c in batch {
            let req = json!({"op":"subscribe","channel":c,"id":1});
            ws.feed(Message::text(req.to_string())).await.expect("feed");
        }
        ws.flush().await.expect("flush");
        for _ in batch {
            match next_json(ws).await["type"].as_str() {
                Some("subscribed") => ok += 1,
                _ => refused += 1,
            }
        }
    }
    (ok, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_metrics_per_namespace_keep_a_bounded_label_set() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let redis = mode.clone();
        let s = TestServer::start(move |c| {
            c.redis.url = redis;
            c.max_subscriptions = 20_000;
            c.max_outbound_queue = 8 << 20;
            let spec = "chat:,feed:publish=server";
            c.namespaces.specs.add_compact(spec, "test").unwrap();
        });
        let addr = s.addr;
        wait_until("ready", || async move {
            get(addr, "/readyz").await.status == 200
        })
        .await;
        let mut ws = ws_connect(s.addr, "/ws").await;
        // 10,000 channels: 5,000 in chat, 4,000 default, 1,000 in as many
        // unknown namespaces.
        let mut channels: Vec<String> = (0..5_000).map(|i| format!("chat:{i}")).collect();
        channels.extend((0..4_000).map(|i| format!("room-{i}")));
        channels.extend((0..1_000).map(|i| format!("ns{i}:x")));
        assert_eq!(subscribe_all(&mut ws, &channels).await, (9_000, 1_000));
        assert_eq!(post(s.addr, "/publish/chat:1", b"m").await.status, 200);
        expect_message(&mut ws, "chat:1", "m").await;
        assert_eq!(
            error_code(&publish(&mut ws, "feed:x", "m").await),
            "forbidden"
        );
        let st = stats(s.addr).await;
        let ns = &st["namespaces"];
        assert_eq!(ns.as_object().map(|o| o.len()), Some(3), "{ns}");
        assert_eq!(ns["chat"]["subscriptions"], 5_000, "{ns}");
        // One connection holds them all: it counts once per namespace.
        assert_eq!(ns["chat"]["connections"], 1, "{ns}");
        assert_eq!(ns["default"]["connections"], 1, "{ns}");
        assert_eq!(ns["feed"]["connections"], 0, "{ns}");
        assert_eq!(ns["chat"]["channels"], 5_000, "{ns}");
        assert_eq!(
            (
                ns["chat"]["publishes"].as_u64(),
                ns["chat"]["deliveries"].as_u64()
            ),
            (Some(1), Some(1)),
            "{ns}"
        );
        assert_eq!(ns["default"]["subscriptions"], 4_000, "{ns}");
        assert_eq!(ns["feed"]["refused"], 1, "{ns}");
        assert_eq!(st["namespace_unknown_channel"], 1_000, "{st}");
        let metrics = String::from_utf8(get(s.addr, "/metrics").await.body).unwrap();
        let mut labels: Vec<&str> = metrics
            .lines()
            .filter_map(|l| l.split_once("{namespace=\"")?.1.split_once('"'))
            .map(|(v, _)| v)
            .collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels, ["chat", "default", "feed"]);
        assert!(metrics.contains("corecast_namespace_deliveries_total{namespace=\"chat\"} 1"));
        assert!(metrics.contains("corecast_namespace_unknown_channel_total 1000"));
    }
    // Without namespaces: no such keys, no such series.
    let s = server(&None, "", false).await;
    let st = stats(s.addr).await;
    assert!(st.get("namespaces").is_none() && st.get("namespace_unknown_channel").is_none());
    let metrics = String::from_utf8(get(s.addr, "/metrics").await.body).unwrap();
    assert!(!metrics.contains("corecast_namespace_"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_may_send_its_channels_uncompressed() {
    const OFFER: &str = "Sec-WebSocket-Extensions: permessage-deflate\r\n";
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let s = server(mode, "plain:compression=false,zip:", false).await;
        let (mut plain, _) = RawWs::connect_with(s.addr, "/ws/plain:a", OFFER).await;
        let (mut zip, _) = RawWs::connect_with(s.addr, "/ws/zip:a", OFFER).await;
        let body = "a".repeat(4096);
        for (ws, channel) in [(&mut plain, "plain:a"), (&mut zip, "zip:a")] {
            let r = post(s.addr, &format!("/publish/{channel}"), body.as_bytes()).await;
            assert_eq!(r.status, 200, "{channel}");
            let f = ws.next_frame().await;
            assert_eq!(f.opcode, OP_TEXT, "{channel}");
            let compressed = f.rsv == 0b100; // RSV1: permessage-deflate
            assert_eq!(compressed, channel == "zip:a", "{channel}: rsv {}", f.rsv);
            if !compressed {
                assert_eq!(f.payload, body.as_bytes());
            }
        }
    }
}

/// An event stream is a subscriber like any other: a channel of an
/// unconfigured namespace is 404, a user channel is its user's only (403
/// for another), and what is published to it arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_obey_namespace_rules() {
    let (_redis, modes) = modes().await;
    for mode in &modes {
        let s = server(mode, "notifications:subscribe=user,publish=server", true).await;
        let t = token("42", r#"["plain"]"#, "[]");
        let mut unknown =
            sse_support::Sse::request(s.addr, &format!("/sse?channel=other:x&token={t}"), &[])
                .await;
        assert_eq!(unknown.status, 404, "{}", unknown.head);
        assert_eq!(
            unknown.error_body().await["error"],
            "no namespace is configured for this channel"
        );
        let theirs = sse_support::Sse::request(
            s.addr,
            &format!("/sse?channel=notifications:%2343&token={t}"),
            &[],
        )
        .await;
        assert_eq!(theirs.status, 403, "{}", theirs.head);
        // One refused channel refuses the stream, whatever the others.
        let mixed = sse_support::Sse::request(
            s.addr,
            &format!("/sse?channel=plain&channel=other:x&token={t}"),
            &[],
        )
        .await;
        assert_eq!(mixed.status, 404, "{}", mixed.head);
        let mut mine = sse_support::Sse::request(
            s.addr,
            &format!("/sse?channel=notifications:%2342&token={t}"),
            &[],
        )
        .await;
        assert_eq!(mine.status, 200, "{}", mine.head);
        assert_eq!(mine.next_event().await.name, "subscribed");
        let r = post(s.addr, "/publish/notifications:%2342", b"you have mail").await;
        assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
        let m = mine.next_event().await;
        assert_eq!(m.name, "message");
        assert_eq!(m.json()["data"], "you have mail");
        assert_eq!(m.json()["channel"], "notifications:#42");
    }
}
