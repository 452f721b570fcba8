//! The Pusher protocol on the wire, with a plain WebSocket client: close
//! codes, ping/pong, subscriptions, limits, app isolation and the signed
//! HTTP API's refusals (the real Pusher clients are in `pusher_js.rs`).

mod common;

use std::net::SocketAddr;

use common::pusher::*;
use common::*;
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

fn server(apps: &str, tweak: impl FnOnce(&mut corecast::Config)) -> TestServer {
    TestServer::start(|c| {
        c.pusher.add_apps(apps).unwrap();
        tweak(c);
    })
}

const APP1: (&str, &str, &str) = ("1", "key1", "secret1");
const APP2: (&str, &str, &str) = ("2", "key2", "secret2");
const APPS: &str = "1:key1:secret1:client-events,2:key2:secret2";

async fn trigger(addr: SocketAddr, app: (&str, &str, &str), body: Value) -> HttpResponse {
    let path = format!("/apps/{}/events", app.0);
    http_raw(
        addr,
        &api_request(app, "POST", (&path, ""), body.to_string().as_bytes(), now()),
    )
    .await
}

/// Unknown key: pusher:error 4001 then close 4001; a missing or old
/// protocol version: 4007 (pusher-js does not reconnect on 4000-4099).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_apps_and_protocols_are_closed_with_their_codes() {
    let srv = server(APPS, |_| {});
    for (path, code) in [
        ("/app/nokey?protocol=7", 4001),
        ("/app/key1", 4007),
        ("/app/key1?protocol=6", 4007),
    ] {
        let mut ws = ws_connect(srv.addr, path).await;
        let err = next_json(&mut ws).await;
        assert_eq!(err["event"], "pusher:error", "{path}");
        assert_eq!(err["data"]["code"], code, "{path}");
        assert_eq!(expect_close(&mut ws).await, code, "{path}");
    }
    assert_eq!(
        counter(&stats(srv.addr).await, "pusher_connections_refused"),
        3
    );
}

/// connection_established announces the activity timeout; pusher:ping
/// is answered with pusher:pong; bad frames get pusher:error and the
/// connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_and_bad_frames() {
    let srv = server(APPS, |c| c.pusher.activity_timeout_s = 30);
    let mut ws = ws_connect(srv.addr, "/app/key1?protocol=7").await;
    let hello = next_json(&mut ws).await;
    assert_eq!(data(&hello)["activity_timeout"], 30);
    send(&mut ws, json!({"event":"pusher:ping","data":{}})).await;
    assert_eq!(next_json(&mut ws).await["event"], "pusher:pong");
    ws.send(Message::text("not json")).await.unwrap();
    assert_eq!(next_json(&mut ws).await["event"], "pusher:error");
    ws.send(Message::binary(vec![1, 2])).await.unwrap();
    assert_eq!(next_json(&mut ws).await["event"], "pusher:error");
    send(
        &mut ws,
        json!({"event":"pusher:subscribe","data":{"channel":"bad name"}}),
    )
    .await;
    assert_eq!(next_json(&mut ws).await["event"], "pusher:error");
    send(&mut ws, json!({"event":"pusher:ping","data":{}})).await;
    assert_eq!(next_json(&mut ws).await["event"], "pusher:pong");
    assert_eq!(counter(&stats(srv.addr).await, "pusher_errors"), 3);
}

/// Over --pusher-max-app-connections: close 4100 (pusher-js backs off and
/// retries); the other app is not affected, and a place frees on close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_over_capacity_closes_with_4100() {
    let srv = server(APPS, |c| c.pusher.max_app_connections = 1);
    let (mut first, _) = connect(srv.addr, "key1").await;
    let mut second = ws_connect(srv.addr, "/app/key1?protocol=7").await;
    assert_eq!(next_json(&mut second).await["data"]["code"], 4100);
    assert_eq!(expect_close(&mut second).await, 4100);
    let (_other_app, _) = connect(srv.addr, "key2").await;
    first.close(None).await.unwrap();
    wait_stat(srv.addr, "pusher_connections", |n| n == 1).await;
    connect(srv.addr, "key1").await;
}

/// Private channels need key:HMAC(socket_id:channel); the signature of
/// another socket or app is refused with pusher:subscription_error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_channels_need_a_valid_signature() {
    let srv = server(APPS, |_| {});
    let (mut ws, id) = connect(srv.addr, "key1").await;
    let refused = [
        None,
        Some(auth("key1", "secret1", "9.9:private-x")),
        Some(auth("key2", "secret2", &format!("{id}:private-x"))),
        Some("key1:nothex".to_string()),
    ];
    for a in refused {
        let r = subscribe(&mut ws, "private-x", a.clone(), None).await;
        assert_eq!(r["event"], "pusher:subscription_error", "{a:?}");
        assert_eq!(r["data"]["status"], 401);
    }
    let good = auth("key1", "secret1", &format!("{id}:private-x"));
    let r = subscribe(&mut ws, "private-x", Some(good), None).await;
    assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
    assert_eq!(r["channel"], "private-x");
    assert_eq!(counter(&stats(srv.addr).await, "pusher_auth_failures"), 4);
}

/// Two apps' channels of the same name are apart, and native clients
/// cannot reach Pusher channels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_are_isolated_from_each_other_and_from_native_clients() {
    let srv = server(APPS, |_| {});
    let (mut one, _) = connect(srv.addr, "key1").await;
    let (mut two, _) = connect(srv.addr, "key2").await;
    for ws in [&mut one, &mut two] {
        let r = subscribe(ws, "news", None, None).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
    }
    let r = trigger(
        srv.addr,
        APP2,
        json!({"name":"e","data":"for two","channel":"news"}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = trigger(
        srv.addr,
        APP1,
        json!({"name":"e","data":"for one","channel":"news"}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let got = next_json(&mut one).await;
    assert_eq!(
        (got["channel"].clone(), got["data"].clone()),
        (json!("news"), json!("for one"))
    );
    assert_eq!(next_json(&mut two).await["data"], "for two");
    let mut native = ws_connect(srv.addr, "/ws").await;
    send(
        &mut native,
        json!({"op":"subscribe","channel":"pusher/1/news"}),
    )
    .await;
    assert_eq!(next_json(&mut native).await["code"], "invalid_channel");
    // Counted per app in /stats and /metrics.
    let apps = stats(srv.addr).await["pusher_apps"].clone();
    let one = json!({"connections":1,"client_events":0,"api_requests":1,"api_events":1});
    assert_eq!(apps, json!({"1": one, "2": one}));
    let metrics = String::from_utf8(get(srv.addr, "/metrics").await.body).unwrap();
    assert!(
        metrics.contains("corecast_pusher_app_api_events_total{app=\"2\"} 1"),
        "{metrics}"
    );
}

/// Client events: refused on public channels, unsubscribed channels and
/// apps without `client-events`; over the rate, pusher:error 4301 (the
/// connection stays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_events_follow_the_rules_and_the_rate() {
    let srv = server(APPS, |c| c.pusher.client_event_rate = 2);
    let (mut a, id_a) = connect(srv.addr, "key1").await;
    let (mut b, id_b) = connect(srv.addr, "key1").await;
    for (ws, id) in [(&mut a, &id_a), (&mut b, &id_b)] {
        let good = auth("key1", "secret1", &format!("{id}:private-c"));
        subscribe(ws, "private-c", Some(good), None).await;
        subscribe(ws, "open", None, None).await;
    }
    let ev = |channel: &str, n: u32| json!({"event":"client-x","channel":channel,"data":{"n":n}});
    send(&mut a, ev("open", 0)).await;
    assert_eq!(next_json(&mut a).await["event"], "pusher:error");
    send(&mut a, ev("private-other", 0)).await;
    assert_eq!(next_json(&mut a).await["event"], "pusher:error");
    let big = json!({"event":"client-x","channel":"private-c","data":"x".repeat(10 * 1024 + 1)});
    send(&mut a, big).await;
    let err = next_json(&mut a).await;
    assert!(
        err["data"]["message"].as_str().unwrap().contains("10 KiB"),
        "{err}"
    );
    for n in 1..=3 {
        send(&mut a, ev("private-c", n)).await;
    }
    let limited = next_json(&mut a).await;
    assert_eq!(limited["data"]["code"], 4301, "{limited}");
    for n in 1..=2 {
        assert_eq!(next_json(&mut b).await["data"], json!({"n": n}));
    }
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "pusher_client_events_limited"), 1);
    assert_eq!(counter(&s, "pusher_client_events"), 2);
    let metrics = String::from_utf8(get(srv.addr, "/metrics").await.body).unwrap();
    for line in [
        "corecast_pusher_client_events_total{outcome=\"relayed\"} 2",
        "corecast_pusher_client_events_total{outcome=\"rate_limited\"} 1",
        "corecast_pusher_connections 2",
    ] {
        assert!(metrics.contains(line), "{line} missing from /metrics");
    }

    let (mut c, id_c) = connect(srv.addr, "key2").await;
    let good = auth("key2", "secret2", &format!("{id_c}:private-c"));
    subscribe(&mut c, "private-c", Some(good), None).await;
    send(&mut c, ev("private-c", 0)).await;
    let err = next_json(&mut c).await;
    assert!(
        err["data"]["message"]
            .as_str()
            .unwrap()
            .contains("not enabled"),
        "{err}"
    );
}

/// Presence: the signature covers channel_data; subscription_succeeded
/// lists the members; a full channel refuses new users (403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_subscriptions_are_signed_and_bounded() {
    let srv = server(APPS, |c| c.pusher.max_presence_members = 1);
    let (mut a, id) = connect(srv.addr, "key1").await;
    let cd = r#"{"user_id":"u1","user_info":{"name":"Ann"}}"#;
    let forged = auth(
        "key1",
        "secret1",
        &format!("{id}:presence-p:{{\"user_id\":\"u2\"}}"),
    );
    let r = subscribe(&mut a, "presence-p", Some(forged), Some(cd)).await;
    assert_eq!(r["event"], "pusher:subscription_error");
    let big = format!(r#"{{"user_id":"u1","user_info":"{}"}}"#, "x".repeat(2048));
    let signed = auth("key1", "secret1", &format!("{id}:presence-p:{big}"));
    let r = subscribe(&mut a, "presence-p", Some(signed), Some(&big)).await;
    assert_eq!(r["data"]["status"], 400, "channel_data over 2 KiB");
    let good = auth("key1", "secret1", &format!("{id}:presence-p:{cd}"));
    let r = subscribe(&mut a, "presence-p", Some(good), Some(cd)).await;
    assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
    assert_eq!(
        data(&r)["presence"],
        json!({"count":1,"ids":["u1"],"hash":{"u1":{"name":"Ann"}}})
    );
    let (mut b, id_b) = connect(srv.addr, "key1").await;
    let cd2 = r#"{"user_id":"u2"}"#;
    let good = auth("key1", "secret1", &format!("{id_b}:presence-p:{cd2}"));
    let r = subscribe(&mut b, "presence-p", Some(good), Some(cd2)).await;
    assert_eq!(r["event"], "pusher:subscription_error");
    assert_eq!(r["data"]["status"], 403);
}

/// The HTTP API refuses a bad signature, an expired timestamp, a wrong
/// body_md5 (401), an unknown app (404) and over-limit bodies (400/413).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_requests_with_bad_signatures_are_refused() {
    let srv = server(APPS, |_| {});
    let body = json!({"name":"e","data":"x","channel":"c"}).to_string();
    let path = ("/apps/1/events", "");
    let bad_secret = api_request(("1", "key1", "wrong"), "POST", path, body.as_bytes(), now());
    let expired = api_request(APP1, "POST", path, body.as_bytes(), now() - 601);
    let mut wrong_md5 = api_request(APP1, "POST", path, body.as_bytes(), now());
    let n = wrong_md5.len();
    wrong_md5[n - 2] = b'y'; // same length, other body
    let unknown = api_request(
        ("9", "key1", "secret1"),
        "POST",
        ("/apps/9/events", ""),
        body.as_bytes(),
        now(),
    );
    for (req, status, message) in [
        (bad_secret, 401, "invalid auth_signature"),
        (expired, 401, "auth_timestamp"),
        (wrong_md5, 401, "body_md5"),
        (unknown, 404, "unknown app"),
    ] {
        let r = http_raw(srv.addr, &req).await;
        assert_eq!(r.status, status, "{r:?}");
        assert!(
            r.json()["error"].as_str().unwrap().contains(message),
            "{r:?}"
        );
    }
    let channels: Vec<String> = (0..101).map(|i| format!("c{i}")).collect();
    let r = trigger(
        srv.addr,
        APP1,
        json!({"name":"e","data":"x","channels":channels}),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = trigger(
        srv.addr,
        APP1,
        json!({"name":"e","data":"x".repeat(10 * 1024 + 1),"channel":"c"}),
    )
    .await;
    assert_eq!(r.status, 413);
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "pusher_api_unauthorized"), 3);
    assert_eq!(
        counter(&s, "pusher_api_bad_requests"),
        2,
        "the 400 and the 413"
    );
}

/// batch_events, socket_id exclusion, and the channel queries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_batches_exclusion_and_channel_info() {
    let srv = server(APPS, |_| {});
    let (mut a, id_a) = connect(srv.addr, "key1").await;
    let (mut b, _) = connect(srv.addr, "key1").await;
    let cd = r#"{"user_id":"u1"}"#;
    for ws in [&mut a, &mut b] {
        subscribe(ws, "news", None, None).await;
    }
    let good = auth("key1", "secret1", &format!("{id_a}:presence-p:{cd}"));
    subscribe(&mut a, "presence-p", Some(good), Some(cd)).await;
    let batch = json!({"batch":[
        {"name":"one","data":"1","channel":"news","socket_id":id_a},
        {"name":"two","data":"2","channel":"news"},
    ]});
    let req = api_request(
        APP1,
        "POST",
        ("/apps/1/batch_events", ""),
        batch.to_string().as_bytes(),
        now(),
    );
    assert_eq!(http_raw(srv.addr, &req).await.status, 200);
    assert_eq!(next_json(&mut b).await["event"], "one");
    assert_eq!(next_json(&mut b).await["event"], "two");
    assert_eq!(
        next_json(&mut a).await["event"],
        "two",
        "socket_id is excluded"
    );

    let get = |path: &str, q: &str| api_request(APP1, "GET", (path, q), b"", now());
    let all = http_raw(srv.addr, &get("/apps/1/channels", ""))
        .await
        .json();
    assert_eq!(all, json!({"channels":{"news":{},"presence-p":{}}}));
    let q = "filter_by_prefix=presence-&info=user_count";
    let pres = http_raw(srv.addr, &get("/apps/1/channels", q)).await.json();
    assert_eq!(pres, json!({"channels":{"presence-p":{"user_count":1}}}));
    let one = http_raw(
        srv.addr,
        &get("/apps/1/channels/news", "info=subscription_count"),
    )
    .await
    .json();
    assert_eq!(one, json!({"occupied":true,"subscription_count":2}));
    let users = http_raw(srv.addr, &get("/apps/1/channels/presence-p/users", ""))
        .await
        .json();
    assert_eq!(users, json!({"users":[{"id":"u1"}]}));
    let other_app = api_request(APP2, "GET", ("/apps/2/channels", ""), b"", now());
    assert_eq!(
        http_raw(srv.addr, &other_app).await.json(),
        json!({"channels":{}})
    );
}

/// Graceful shutdown closes Pusher connections with 4200 (pusher-js
/// reconnects at once), native ones with 1001 as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_pusher_connections_with_4200() {
    let srv = server(APPS, |_| {});
    let (mut pusher, _) = connect(srv.addr, "key1").await;
    let mut native = ws_connect(srv.addr, "/ws/news").await;
    srv.stop();
    assert_eq!(expect_close(&mut pusher).await, 4200);
    assert_eq!(expect_close(&mut native).await, 1001);
}

/// `--max-subscriptions` bounds a Pusher connection's channels too: the
/// next one is refused with subscription_error 400; unsubscribing frees
/// a place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_subscriptions_are_bounded() {
    let srv = server(APPS, |c| c.max_subscriptions = 2);
    let (mut ws, _) = connect(srv.addr, "key1").await;
    for c in ["a", "b"] {
        let r = subscribe(&mut ws, c, None, None).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
    }
    let r = subscribe(&mut ws, "c", None, None).await;
    assert_eq!(r["event"], "pusher:subscription_error");
    assert_eq!(r["data"]["status"], 400);
    send(
        &mut ws,
        json!({"event":"pusher:unsubscribe","data":{"channel":"a"}}),
    )
    .await;
    let r = subscribe(&mut ws, "c", None, None).await;
    assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
    assert_eq!(
        counter(&stats(srv.addr).await, "pusher_subscriptions_refused"),
        1
    );
}

/// corecast's keepalive on a quiet Pusher connection is `pusher:ping`
/// (pusher-js answers it with `pusher:pong`), not a WebSocket ping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_pusher_connections_get_pusher_ping() {
    let srv = server(APPS, |c| {
        c.ping_interval = std::time::Duration::from_millis(200)
    });
    let (mut ws, _) = connect(srv.addr, "key1").await;
    for _ in 0..2 {
        let ping = match next_msg_raw(&mut ws).await {
            Message::Text(t) => serde_json::from_str::<Value>(&t).unwrap(),
            other => panic!("expected pusher:ping, got {other:?}"),
        };
        assert_eq!(ping["event"], "pusher:ping");
        send(&mut ws, json!({"event":"pusher:pong","data":{}})).await;
    }
}

/// A Pusher connection that answers nothing for `--idle-timeout` is
/// closed with 4201 "pong reply not received" (pusher-js reconnects at
/// once on it), counted as an idle timeout; one that answers stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_pusher_connections_are_closed_with_4201() {
    let srv = server(APPS, |c| {
        c.ping_interval = std::time::Duration::from_millis(200);
        c.idle_timeout = std::time::Duration::from_millis(600);
    });
    let (mut silent, _) = connect(srv.addr, "key1").await;
    let (mut alive, _) = connect(srv.addr, "key1").await;
    let answer = async {
        loop {
            if let Message::Text(t) = next_msg_raw(&mut alive).await {
                let ev: Value = serde_json::from_str(&t).unwrap();
                assert_eq!(ev["event"], "pusher:ping");
                send(&mut alive, json!({"event":"pusher:pong","data":{}})).await;
            }
        }
    };
    let code = tokio::select! {
        code = async {
            // Its pusher:ping goes unanswered; then the close.
            loop {
                match next_msg_raw(&mut silent).await {
                    Message::Close(Some(f)) => break u16::from(f.code),
                    Message::Text(_) => {}
                    other => panic!("expected pusher:ping or a close, got {other:?}"),
                }
            }
        } => code,
        _ = answer => unreachable!(),
    };
    assert_eq!(code, 4201);
    let st = stats(srv.addr).await;
    assert_eq!(counter(&st, "idle_timeouts"), 1, "{st}");
    send(&mut alive, json!({"event":"pusher:ping","data":{}})).await;
    loop {
        if let Message::Text(t) = next_msg_raw(&mut alive).await {
            if serde_json::from_str::<Value>(&t).unwrap()["event"] == "pusher:pong" {
                break;
            }
        }
    }
}

/// The next message, pings included.
async fn next_msg_raw(ws: &mut Ws) -> Message {
    use futures_util::StreamExt;
    within("message", ws.next())
        .await
        .expect("open")
        .expect("message")
}

/// A user's own channel (`#server-to-user-{id}`) is only for the
/// connection signed in as that user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_channels_need_the_signin_of_that_user() {
    let srv = server(APPS, |_| {});
    let (mut ws, id) = connect(srv.addr, "key1").await;
    let r = subscribe(&mut ws, "#server-to-user-u1", None, None).await;
    assert_eq!(r["event"], "pusher:subscription_error");
    let ud = r#"{"id":"u1"}"#;
    let signed = auth("key1", "secret1", &format!("{id}::user::{ud}"));
    send(
        &mut ws,
        json!({"event":"pusher:signin","data":{"auth":signed,"user_data":ud}}),
    )
    .await;
    let ok = next_json(&mut ws).await;
    assert_eq!(ok["event"], "pusher:signin_success");
    assert_eq!(data(&ok)["user_data"], ud);
    let r = subscribe(&mut ws, "#server-to-user-u2", None, None).await;
    assert_eq!(r["event"], "pusher:subscription_error");
    let r = subscribe(&mut ws, "#server-to-user-u1", None, None).await;
    assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
    let list = api_request(APP1, "GET", ("/apps/1/channels", ""), b"", now());
    let listed = http_raw(srv.addr, &list).await.json();
    assert_eq!(
        listed,
        json!({"channels":{}}),
        "users' channels are not listed"
    );
}

/// A client event on a presence channel names its sender's `user_id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_client_events_carry_the_user_id() {
    let srv = server(APPS, |_| {});
    let mut socks = Vec::new();
    for user in ["u1", "u2"] {
        let (mut ws, id) = connect(srv.addr, "key1").await;
        let cd = format!(r#"{{"user_id":"{user}"}}"#);
        let signed = auth("key1", "secret1", &format!("{id}:presence-p:{cd}"));
        subscribe(&mut ws, "presence-p", Some(signed), Some(&cd)).await;
        socks.push(ws);
    }
    let added = next_json(&mut socks[0]).await;
    assert_eq!(added["event"], "pusher_internal:member_added");
    assert_eq!(data(&added)["user_id"], "u2");
    let ev = json!({"event":"client-hi","channel":"presence-p","data":{}});
    send(&mut socks[0], ev).await;
    let got = next_json(&mut socks[1]).await;
    assert_eq!(
        (got["event"].clone(), got["user_id"].clone()),
        (json!("client-hi"), json!("u1"))
    );
}

/// Webhooks to an endpoint that does not answer cost bounded memory:
/// with `--pusher-webhook-queue 2`, at most 2 events wait besides the
/// batch being retried, so of 10 channel_occupied events at least 6 are
/// dropped at once (counted), and the failed attempts are counted. The
/// queue is each worker's (the owner of a channel sends its webhooks):
/// with N workers at most 4·N are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_to_a_dead_endpoint_are_bounded() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let srv = server(APPS, |c| {
        c.pusher
            .add_webhooks(&format!("1=http://127.0.0.1:{port}/hooks"))
            .unwrap();
        c.pusher.webhook_queue = 2;
    });
    let (mut ws, _) = connect(srv.addr, "key1").await;
    for i in 0..10 {
        let r = subscribe(&mut ws, &format!("c{i}"), None, None).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
    }
    let s = wait_stat(srv.addr, "pusher_webhook_failures", |n| n >= 1).await;
    let kept = 4 * default_workers() as u64;
    assert!(counter(&s, "pusher_webhook_dropped") >= 10 - kept, "{s}");
    assert_eq!(counter(&s, "pusher_webhook_events"), 0);
    // The other app has no webhook: its channels queue nothing.
    let (mut other, _) = connect(srv.addr, "key2").await;
    subscribe(&mut other, "x", None, None).await;
    let after = stats(srv.addr).await;
    assert_eq!(
        counter(&after, "pusher_webhook_dropped"),
        counter(&s, "pusher_webhook_dropped")
    );
}

/// End-to-end encrypted channels: a client event is refused with
/// `pusher:error` (Pusher's rule) and reaches nobody; and Pusher messages
/// (API and client events) are not written into native history, which no
/// Pusher client can read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_client_events_are_refused_and_pusher_keeps_no_history() {
    let srv = server(APPS, |c| c.history.size = 100);
    let (mut a, id_a) = connect(srv.addr, "key1").await;
    let (mut b, id_b) = connect(srv.addr, "key1").await;
    for (ws, id) in [(&mut a, &id_a), (&mut b, &id_b)] {
        for channel in ["private-encrypted-x", "private-c"] {
            let good = auth("key1", "secret1", &format!("{id}:{channel}"));
            let r = subscribe(ws, channel, Some(good), None).await;
            assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
        }
    }
    let ev = json!({"event":"client-x","channel":"private-encrypted-x","data":{"n":1}});
    send(&mut a, ev).await;
    let err = next_json(&mut a).await;
    assert_eq!(err["event"], "pusher:error", "{err}");
    assert!(
        err["data"]["message"]
            .as_str()
            .unwrap()
            .contains("encrypted"),
        "{err}"
    );
    // b got nothing from it: its next message is the client event below.
    let ev = json!({"event":"client-y","channel":"private-c","data":{"n":2}});
    send(&mut a, ev).await;
    let got = next_json(&mut b).await;
    assert_eq!(got["event"], "client-y", "{got}");
    let body = json!({"name":"e","data":"d","channel":"private-c"});
    assert_eq!(trigger(srv.addr, APP1, body).await.status, 200);
    assert_eq!(next_json(&mut b).await["event"], "e");
    publish(srv.addr, "native", "kept").await;
    let s = stats(srv.addr).await;
    // Each worker keeps a copy of a channel's history.
    assert_eq!(
        counter(&s, "history_messages"),
        default_workers() as u64,
        "only the native one: {s}"
    );
}

/// A webhook flood: an anonymous socket looping subscribe/unsubscribe on
/// fresh public channels is refused past `--pusher-occupancy-rate`
/// (`pusher:subscription_error` 429, counted), and the
/// `channel_occupied`/`channel_vacated` it caused never evict a member's
/// webhook from the bounded queue (each kind has its own bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_flood_is_limited_and_never_evicts_member_webhooks() {
    use std::sync::atomic::Ordering::SeqCst;
    let hooks = WebhookReceiver::start(false).await;
    let port = hooks.port;
    let srv = server(APPS, move |c| {
        let url = format!("1=http://127.0.0.1:{port}/hooks");
        c.pusher.add_webhooks(&url).unwrap();
        c.pusher.webhook_queue = 4;
        c.pusher.occupancy_rate = 5;
    });
    // The first event's request is held by the receiver: what follows
    // waits in the queue.
    let (mut warm, _) = connect(srv.addr, "key1").await;
    subscribe(&mut warm, "warm", None, None).await;
    wait_until("the first webhook request", || {
        let n = hooks.requests.load(SeqCst);
        async move { n >= 1 }
    })
    .await;
    let (mut m, id) = connect(srv.addr, "key1").await;
    let cd = json!({ "user_id": "ann" }).to_string();
    let signed = auth("key1", "secret1", &format!("{id}:presence-room:{cd}"));
    let r = subscribe(&mut m, "presence-room", Some(signed), Some(&cd)).await;
    assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
    let (mut flood, _) = connect(srv.addr, "key1").await;
    let mut limited = 0;
    let started = std::time::Instant::now();
    for i in 0..40 {
        let channel = format!("fresh-{i}");
        let r = subscribe(&mut flood, &channel, None, None).await;
        if r["event"] == "pusher:subscription_error" {
            assert_eq!(r["data"]["status"], 429, "{r}");
            limited += 1;
            continue;
        }
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
        let unsub = json!({"event":"pusher:unsubscribe","data":{"channel":channel}});
        send(&mut flood, unsub).await;
    }
    // The burst (5) and what 5 a second refilled meanwhile, no more.
    let refilled = (started.elapsed().as_secs_f64() * 5.0).ceil() as u64;
    assert!(limited >= 1, "none of 40 refused");
    assert!(40 - limited <= 5 + refilled, "{limited} of 40 refused");
    hooks.open();
    wait_until("ann's member_added webhook", || {
        let got = hooks.named("member_added");
        async move { got.iter().any(|e| e["user_id"] == "ann") }
    })
    .await;
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "pusher_subscriptions_limited"), limited);
    assert!(counter(&s, "pusher_webhook_dropped") >= 1, "{s}");
    let metrics = String::from_utf8(get(srv.addr, "/metrics").await.body).unwrap();
    let line =
        format!("corecast_pusher_subscriptions_refused_total{{reason=\"rate_limited\"}} {limited}");
    assert!(metrics.contains(&line), "{line} missing from /metrics");
}
