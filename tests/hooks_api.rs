//! The server API (`/api/...`, with the publish key) on users admitted
//! by the connect hook (`tests/python/hook_backend.py`): list, subscribe,
//! unsubscribe and disconnect a user's connections — on one instance,
//! and on two in Redis mode through the control channel.

mod common;
mod hooks_support;
mod redis_support;

use std::net::SocketAddr;

use common::*;
use hooks_support::*;
use redis_support::{instance, wait_readyz, RedisServer, RespConn};
use serde_json::{json, Value};

const KEY: &str = "pk-123";

fn keyed(cfg: &mut corecast::config::Config, backend: &Backend) {
    backend.configure(cfg, &["connect"]);
    cfg.auth.publish_key = Some(corecast::config::Secret(KEY.into()));
}

async fn api(addr: SocketAddr, method: &str, path: &str, body: Value) -> HttpResponse {
    server_api(addr, KEY, (method, path), &body).await
}

async fn publish_keyed(addr: SocketAddr, channel: &str, text: &str) -> Value {
    let req = format!(
        "POST /publish/{channel} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Length: {}\r\n\r\n{text}",
        text.len()
    );
    let r = http_raw(addr, req.as_bytes()).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_api_acts_on_a_users_connections() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        keyed(c, &backend);
        c.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    });
    let addr = srv.addr;
    let mut json_ws = ws_with_cookie(addr, "/ws", "good-42").await;
    assert_eq!(next_json(&mut json_ws).await["type"], "connected");
    assert_eq!(next_json(&mut json_ws).await["type"], "subscribed");
    let mut path_ws = ws_with_cookie(addr, "/ws/room", "good-42").await;
    let mut other = ws_with_cookie(addr, "/ws", "good-7").await;
    assert_eq!(next_json(&mut other).await["type"], "connected");
    assert_eq!(next_json(&mut other).await["type"], "subscribed");

    // Without the key: refused.
    let r = http_raw(
        addr,
        get_request("/api/connections?user=42", false).as_bytes(),
    )
    .await;
    assert_eq!(r.status, 401);
    let r = api(addr, "GET", "/api/connections?user=42", json!({})).await;
    let list = r.json()["connections"].as_array().unwrap().clone();
    assert_eq!(list.len(), 2, "{list:?}");
    let mut channels: Vec<Value> = list.iter().map(|c| c["channels"].clone()).collect();
    channels.sort_by_key(|c| c.to_string());
    assert_eq!(channels, [json!(["news"]), json!(["room"])]);
    assert!(list
        .iter()
        .all(|c| c["connected_since_ms"].as_u64() > Some(0)));
    // The admin listener serves the API too.
    let admin = srv.admin.expect("an admin listener");
    let r = api(admin, "GET", "/api/connections?user=42", json!({})).await;
    assert_eq!(r.json()["connections"].as_array().map(Vec::len), Some(2));

    let r = api(
        addr,
        "POST",
        "/api/subscribe",
        json!({"user":"42","channel":"extra"}),
    )
    .await;
    assert_eq!(
        r.json(),
        json!({"connections": 1}),
        "only the JSON connection"
    );
    assert_eq!(
        next_json(&mut json_ws).await,
        json!({"type":"subscribed","channel":"extra"})
    );
    assert_eq!(publish_keyed(addr, "extra", "x").await["subscribers"], 1);
    assert_eq!(next_json(&mut json_ws).await["data"], "x");
    let r = api(
        addr,
        "POST",
        "/api/unsubscribe",
        json!({"user":"42","channel":"news"}),
    )
    .await;
    assert_eq!(r.json(), json!({"connections": 1}));
    assert_eq!(
        next_json(&mut json_ws).await,
        json!({"type":"unsubscribed","channel":"news"})
    );
    assert_eq!(
        publish_keyed(addr, "news", "n").await["subscribers"],
        1,
        "user 7's only"
    );

    let r = api(addr, "POST", "/api/disconnect", json!({"user":"42"})).await;
    assert_eq!(r.json(), json!({"connections": 2}));
    assert_eq!(expect_close(&mut json_ws).await, 4005);
    assert_eq!(expect_close(&mut path_ws).await, 4005);
    assert_eq!(next_json(&mut other).await["data"], "n", "user 7 untouched");

    let r = api(addr, "POST", "/api/subscribe", json!({"user":"42"})).await;
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (400, Some("missing \"channel\""))
    );
    let r = api(addr, "POST", "/api/reboot", json!({"user":"42"})).await;
    assert_eq!(r.status, 404);
    // Without a publish key the API is not routed at all.
    let plain = TestServer::start(|_| {});
    let r = api(plain.addr, "POST", "/api/disconnect", json!({"user":"42"})).await;
    assert_eq!(r.status, 404);
    wait_until("42's entries gone with its connections", || async {
        let r = api(addr, "GET", "/api/connections?user=42", json!({})).await;
        r.json()["connections"]
            .as_array()
            .is_some_and(|l| l.is_empty())
    })
    .await;
}

/// Two instances on one `redis-server`: a command sent to either acts
/// on the user's connections on both, exactly once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_redis_mode_the_api_acts_on_every_instance() {
    let backend = Backend::start();
    let redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), |c| keyed(c, &backend));
    let b = instance(redis.url("", ""), |c| keyed(c, &backend));
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    // Both instances hear the control channel.
    wait_until(
        "both instances subscribed to the control channel",
        || async {
            let r = api(a.addr, "POST", "/api/disconnect", json!({"user":"nobody"})).await;
            r.json()["instances"] == 2 * default_workers()
        },
    )
    .await;
    let mut on_a = ws_with_cookie(a.addr, "/ws", "good-42").await;
    assert_eq!(next_json(&mut on_a).await["type"], "connected");
    assert_eq!(next_json(&mut on_a).await["type"], "subscribed");
    let mut on_b = ws_with_cookie(b.addr, "/ws", "good-42").await;
    assert_eq!(next_json(&mut on_b).await["type"], "connected");
    assert_eq!(next_json(&mut on_b).await["type"], "subscribed");

    let r = api(
        b.addr,
        "POST",
        "/api/subscribe",
        json!({"user":"42","channel":"doc"}),
    )
    .await;
    assert_eq!(r.json(), json!({ "instances": 2 * default_workers() }));
    for ws in [&mut on_a, &mut on_b] {
        assert_eq!(
            next_json(ws).await,
            json!({"type":"subscribed","channel":"doc"})
        );
    }
    let r = api(a.addr, "POST", "/api/disconnect", json!({"user":"42"})).await;
    assert_eq!(r.json(), json!({ "instances": 2 * default_workers() }));
    assert_eq!(expect_close(&mut on_a).await, 4005);
    assert_eq!(expect_close(&mut on_b).await, 4005);
}

/// Centrifugo's `connect` command and reply: a JSON client admitted by
/// a token (or none) is sent nothing unasked, and `{"op":"connect"}`
/// tells it its client id — the one the server API lists — and user; a
/// connect-hook client's unasked `connected` frame carries the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_ask_who_they_are_with_connect() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let secret = "connect-op-secret-0123456789abcdef0123";
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        keyed(c, &backend);
        c.auth.token_secret = Some(corecast::config::Secret(secret.into()));
    });
    let claims = r#"{"exp":9999999999,"sub":"7","subscribe":["*"],"publish":[]}"#;
    let token = corecast::auth::sign_token(claims, secret.as_bytes());
    let mut ws = ws_connect(srv.addr, &format!("/ws?token={token}")).await;
    let ask = |id: u32| Message::text(json!({"op":"connect","id":id}).to_string());
    ws.send(ask(1)).await.unwrap();
    let hello = next_json(&mut ws).await;
    assert_eq!(
        (&hello["type"], &hello["user"], &hello["id"]),
        (&json!("connected"), &json!("7"), &json!(1)),
        "the reply is its first frame: {hello}"
    );
    let client = hello["client"].as_str().unwrap().to_string();
    let r = api(srv.addr, "GET", "/api/connections?user=7", json!({})).await;
    assert_eq!(r.json()["connections"][0]["client"], client.as_str());

    let mut hooked = ws_with_cookie(srv.addr, "/ws", "good-42").await;
    let unasked = next_json(&mut hooked).await;
    assert_eq!(unasked["type"], "connected");
    assert_eq!(next_json(&mut hooked).await["type"], "subscribed");
    hooked.send(ask(2)).await.unwrap();
    let asked = next_json(&mut hooked).await;
    assert_eq!(
        (&asked["client"], &asked["user"], &asked["id"]),
        (&unasked["client"], &json!("42"), &json!(2))
    );
    assert_ne!(asked["client"], client.as_str(), "one id per connection");
}

/// `GET /api/connections` in Redis mode lists every instance's
/// connections of the user (asked on the control channel, answered on
/// the asker's reply channel) and says which instances answered; one
/// that does not answer in time (here a bare Redis subscriber of the
/// control channel) is reported missing once `--api-connections-timeout`
/// has passed, with what the others answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_redis_mode_connections_lists_every_instance() {
    one_worker_per_server("counts the instances that answer a listing");
    let backend = Backend::start();
    let redis = RedisServer::start(&[]).await;
    let timeout = std::time::Duration::from_millis(400);
    let tweak = |c: &mut corecast::config::Config| {
        keyed(c, &backend);
        c.proxy.connections_timeout = timeout;
    };
    let a = instance(redis.url("", ""), tweak);
    let b = instance(redis.url("", ""), tweak);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    wait_until("both instances hear the control channel", || async {
        let r = api(a.addr, "POST", "/api/disconnect", json!({"user":"nobody"})).await;
        r.json()["instances"] == 2
    })
    .await;
    let mut on_a = ws_with_cookie(a.addr, "/ws", "good-42").await;
    assert_eq!(next_json(&mut on_a).await["type"], "connected");
    assert_eq!(next_json(&mut on_a).await["type"], "subscribed");
    let mut on_b = Vec::new();
    for path in ["/ws", "/ws/room"] {
        on_b.push(ws_with_cookie(b.addr, path, "good-42").await);
    }
    assert_eq!(next_json(&mut on_b[0]).await["type"], "connected");
    assert_eq!(next_json(&mut on_b[0]).await["type"], "subscribed");
    let _other = ws_with_cookie(b.addr, "/ws", "good-7").await;

    let started = std::time::Instant::now();
    let r = api(a.addr, "GET", "/api/connections?user=42", json!({})).await;
    assert_eq!(r.status, 200, "{r:?}");
    let body = r.json();
    assert!(
        started.elapsed() < timeout,
        "every instance answered: no wait for the deadline"
    );
    let list = body["connections"].as_array().unwrap();
    assert_eq!(list.len(), 3, "both instances' connections of 42: {body}");
    let mut tags: Vec<u64> = list
        .iter()
        .map(|c| c["instance"].as_u64().unwrap())
        .collect();
    tags.sort();
    tags.dedup();
    assert_eq!(tags.len(), 2, "{body}");
    let mut channels: Vec<Value> = list.iter().map(|c| c["channels"].clone()).collect();
    channels.sort_by_key(|c| c.to_string());
    assert_eq!(
        channels,
        [json!(["news"]), json!(["news"]), json!(["room"])]
    );
    let inst = &body["instances"];
    assert_eq!(
        (&inst["asked"], &inst["missing"]),
        (&json!(2), &json!(0)),
        "{body}"
    );
    let mut answered: Vec<u64> = serde_json::from_value(inst["answered"].clone()).unwrap();
    answered.sort();
    assert_eq!(answered, tags);

    // A third subscriber of the control channel that never answers.
    let mut silent = RespConn::open(redis.port, None).await;
    silent.cmd(&["SUBSCRIBE", "corecast:!api"]).await;
    let started = std::time::Instant::now();
    let r = api(b.addr, "GET", "/api/connections?user=42", json!({})).await;
    let waited = started.elapsed();
    let body = r.json();
    assert_eq!(
        body["connections"].as_array().map(Vec::len),
        Some(3),
        "{body}"
    );
    let inst = &body["instances"];
    assert_eq!(
        (&inst["asked"], &inst["missing"]),
        (&json!(3), &json!(1)),
        "{body}"
    );
    assert_eq!(inst["answered"].as_array().map(Vec::len), Some(2));
    assert!(
        waited >= timeout,
        "waited for the third until the deadline: {waited:?}"
    );
    assert!(waited < timeout * 5, "and not much longer: {waited:?}");
}

/// The Pusher HTTP API's `terminate_connections` closes every connection
/// signed in as the user (4005), through the server API's disconnect;
/// others stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_terminate_connections_closes_the_users_connections() {
    use common::pusher::{api_request, auth, connect, now, send};
    let srv = TestServer::start(|c| c.pusher.add_apps("1:key1:secret1").unwrap());
    let signin = |id: &str, user: &str| {
        let ud = format!(r#"{{"id":"{user}"}}"#);
        let signed = auth("key1", "secret1", &format!("{id}::user::{ud}"));
        json!({"event":"pusher:signin","data":{"auth":signed,"user_data":ud}})
    };
    let (mut u1, id1) = connect(srv.addr, "key1").await;
    send(&mut u1, signin(&id1, "u1")).await;
    assert_eq!(next_json(&mut u1).await["event"], "pusher:signin_success");
    let (mut u2, id2) = connect(srv.addr, "key1").await;
    send(&mut u2, signin(&id2, "u2")).await;
    assert_eq!(next_json(&mut u2).await["event"], "pusher:signin_success");

    let path = "/apps/1/users/u1/terminate_connections";
    let r = http_raw(
        srv.addr,
        &api_request(("1", "key1", "secret1"), "POST", (path, ""), b"{}", now()),
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!({})));
    assert_eq!(expect_close(&mut u1).await, 4005);
    send(&mut u2, json!({"event":"pusher:ping","data":{}})).await;
    assert_eq!(
        next_json(&mut u2).await["event"],
        "pusher:pong",
        "u2 untouched"
    );
}
