//! Server-side subscriptions (the connect hook's `channels`) behave as
//! the client's own subscribes: each is answered `subscribed` with the
//! channel's history position, and joins the channel's presence with the
//! hook's user and info — embedded and in Redis mode, against the real
//! backend (`tests/python/hook_backend.py`: `good-<user>` is subscribed
//! to `news`, with info `{"name": USER}`). The server API's subscribe and
//! unsubscribe do the same: join and leave presence, with positions.

mod common;
mod hooks_support;
mod redis_support;

use common::*;
use futures_util::SinkExt;
use hooks_support::*;
use redis_support::RedisServer;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

async fn call(ws: &mut Ws, request: Value) -> Value {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
    next_json(ws).await
}

/// A JSON client of the connect hook as `user`: its `connected` frame,
/// then the `subscribed` of its server-side channel `news`.
async fn admitted(addr: std::net::SocketAddr, user: &str) -> (Ws, Value) {
    let mut ws = ws_with_cookie(addr, "/ws", &format!("good-{user}")).await;
    assert_eq!(next_json(&mut ws).await["type"], "connected");
    let subscribed = next_json(&mut ws).await;
    assert_eq!(
        (&subscribed["type"], &subscribed["channel"]),
        (&json!("subscribed"), &json!("news")),
        "{subscribed}"
    );
    (ws, subscribed)
}

/// A server with the connect hook, 16 messages of history, presence on
/// `presence` and, with `key`, the server API; ready (`/readyz` 200).
async fn started(
    backend: &Backend,
    redis: Option<corecast::redis::RedisUrl>,
    presence: &str,
    key: Option<&str>,
) -> TestServer {
    let srv = TestServer::start(|c| {
        backend.configure(c, &["connect"]);
        c.auth.publish_key = key.map(|k| corecast::config::Secret(k.into()));
        c.redis.url = redis.clone();
        c.history.size = 16;
        c.presence.set_patterns(presence).unwrap();
    });
    let addr = srv.addr;
    wait_until("ready", || async move {
        get(addr, "/readyz").await.status == 200
    })
    .await;
    srv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_subscriptions_join_presence_and_carry_history_positions() {
    let backend = Backend::start();
    let redis = RedisServer::start(&[]).await;
    for url in [None, Some(redis.url("", ""))] {
        let mode = if url.is_some() { "redis" } else { "embedded" };
        let srv = started(&backend, url.clone(), "news", None).await;
        let addr = srv.addr;
        let (mut watcher, first) = admitted(addr, "7").await;
        assert!(first["epoch"].is_string(), "{mode}: a position: {first}");
        let r = call(
            &mut watcher,
            json!({"op":"subscribe","channel":"news","presence":true,"id":1}),
        )
        .await;
        assert_eq!(r["type"], "subscribed", "{mode}: {r}");
        publish(addr, "news", "one").await;
        let m = next_json(&mut watcher).await;
        assert_eq!(
            (&m["data"], &m["offset"]),
            (&json!("one"), &json!(1)),
            "{mode}"
        );

        let (mut ws, subscribed) = admitted(addr, "42").await;
        assert_eq!(
            (&subscribed["epoch"], &subscribed["offset"]),
            (&first["epoch"], &json!(1)),
            "{mode}: the channel's position, as a client subscribe's reply"
        );
        let join = next_json(&mut watcher).await;
        assert_eq!(
            join,
            json!({"type":"join","channel":"news","user":"42","info":{"name":"42"}}),
            "{mode}"
        );
        let p = call(&mut ws, json!({"op":"presence","channel":"news","id":2})).await;
        let mut users: Vec<&str> = p["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["user"].as_str().unwrap())
            .collect();
        users.sort();
        assert_eq!(users, ["42", "7"], "{mode}: {p}");
        publish(addr, "news", "two").await;
        assert_eq!(next_json(&mut ws).await["offset"], 2, "{mode}");
        assert_eq!(next_json(&mut watcher).await["offset"], 2, "{mode}");
        drop(ws);
        let leave = next_json(&mut watcher).await;
        assert_eq!(
            (&leave["type"], &leave["user"]),
            (&json!("leave"), &json!("42")),
            "{mode}: {leave}"
        );
    }
}

/// The watcher's next frame, past its own presence join (which comes
/// before or after the first message, depending on the mode).
async fn watched(ws: &mut Ws) -> Value {
    loop {
        let v = next_json(ws).await;
        if !(v["type"] == "join" && v["user"] == "7") {
            return v;
        }
    }
}

/// `POST /api/subscribe` and `/api/unsubscribe` act as the connection's
/// own subscribe and unsubscribe would: the position in `subscribed`, a
/// presence join with the user's info, and a leave on the way out (before,
/// the API's subscribe joined nothing and its unsubscribe left the member
/// listed until the connection closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_api_subscribes_and_unsubscribes_as_the_client_would() {
    const KEY: &str = "pk-api";
    let backend = Backend::start();
    let redis = RedisServer::start(&[]).await;
    for url in [None, Some(redis.url("", ""))] {
        let mode = if url.is_some() { "redis" } else { "embedded" };
        let srv = started(&backend, url.clone(), "room", Some(KEY)).await;
        let addr = srv.addr;
        // Embedded mode counts the connections acted on; Redis mode the
        // instances that heard the command (each acts on its own).
        let answer = |n: u64| match mode {
            "redis" => json!({ "instances": default_workers() }),
            _ => json!({"connections": n}),
        };
        let nobody = json!({"user":"nobody"});
        wait_until("the control channel heard", || {
            let nobody = nobody.clone();
            async move {
                let r = server_api(addr, KEY, ("POST", "/api/disconnect"), &nobody).await;
                r.status == 200 && r.json() == answer(0)
            }
        })
        .await;
        let (mut watcher, _) = admitted(addr, "7").await;
        let r = call(
            &mut watcher,
            json!({"op":"subscribe","channel":"room","presence":true,"id":1}),
        )
        .await;
        assert_eq!(r["type"], "subscribed", "{mode}: {r}");
        let one = server_api(addr, KEY, ("POST", "/publish/room"), &json!("one")).await;
        assert_eq!(one.status, 200, "{mode}: {one:?}");
        assert_eq!(watched(&mut watcher).await["offset"], 1, "{mode}");
        let (mut ws, _) = admitted(addr, "42").await;

        let body = json!({"user":"42","channel":"room"});
        let r = server_api(addr, KEY, ("POST", "/api/subscribe"), &body).await;
        assert_eq!(r.json(), answer(1), "{mode}");
        let subscribed = next_json(&mut ws).await;
        assert_eq!(
            (
                &subscribed["type"],
                &subscribed["channel"],
                &subscribed["offset"]
            ),
            (&json!("subscribed"), &json!("room"), &json!(1)),
            "{mode}: {subscribed}"
        );
        let join = watched(&mut watcher).await;
        assert_eq!(
            join,
            json!({"type":"join","channel":"room","user":"42","info":{"name":"42"}}),
            "{mode}"
        );
        // Subscribed already: nothing to do, nobody told twice (the next
        // frame is the unsubscribe's).
        let r = server_api(addr, KEY, ("POST", "/api/subscribe"), &body).await;
        assert_eq!(r.json(), answer(0), "{mode}");

        let r = server_api(addr, KEY, ("POST", "/api/unsubscribe"), &body).await;
        assert_eq!(r.json(), answer(1), "{mode}");
        assert_eq!(
            next_json(&mut ws).await,
            json!({"type":"unsubscribed","channel":"room"}),
            "{mode}"
        );
        let leave = watched(&mut watcher).await;
        assert_eq!(
            (&leave["type"], &leave["user"]),
            (&json!("leave"), &json!("42")),
            "{mode}: {leave}"
        );
        let p = call(
            &mut watcher,
            json!({"op":"presence","channel":"room","id":2}),
        )
        .await;
        let users: Vec<&str> = p["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["user"].as_str().unwrap())
            .collect();
        assert_eq!(users, ["7"], "{mode}: {p}");
    }
}
