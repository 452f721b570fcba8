//! The JSON protocol's hooks against a real backend
//! (`tests/python/hook_backend.py`): subscribe allowed, refused with the
//! backend's code, or closed with its code; publish rewritten and
//! refused; rpc round trips; a slow backend answered `unavailable`.

mod common;
mod hooks_support;

use common::*;
use futures_util::SinkExt;
use hooks_support::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

async fn call(ws: &mut Ws, request: Value) -> Value {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
    next_json(ws).await
}

/// A cookie-admitted client (user `42`), its `connected` frame and its
/// server-side subscription's `subscribed` read.
async fn admitted(addr: std::net::SocketAddr) -> (Ws, String) {
    let mut ws = ws_with_cookie(addr, "/ws", "good-42").await;
    let hello = next_json(&mut ws).await;
    assert_eq!(hello["type"], "connected");
    // Its server-side channel (`news`), answered as a subscribe is.
    assert_eq!(next_json(&mut ws).await["type"], "subscribed");
    (ws, hello["client"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_hook_allows_refuses_and_disconnects() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| backend.configure(c, &["connect", "subscribe"]));
    let (mut ws, client) = admitted(srv.addr).await;
    let r = call(&mut ws, json!({"op":"subscribe","channel":"doc","id":1})).await;
    assert_eq!(r, json!({"type":"subscribed","channel":"doc","id":1}));
    let seen = backend.seen().await;
    let body = &seen["last"]["/subscribe"]["body"];
    assert_eq!(
        (&body["user"], &body["channel"], &body["client"]),
        (&json!("42"), &json!("doc"), &json!(client))
    );
    assert_eq!(publish(srv.addr, "doc", "v2").await, 1);
    assert_eq!(next_json(&mut ws).await["data"], "v2");

    let r = call(&mut ws, json!({"op":"subscribe","channel":"secret","id":2})).await;
    assert_eq!(
        r,
        json!({"type":"error","code":"refused","backend_code":403,"message":"not a member","id":2})
    );
    assert_eq!(
        publish(srv.addr, "secret", "x").await,
        0,
        "a refused subscribe subscribes nothing"
    );

    ws.send(Message::text(
        json!({"op":"subscribe","channel":"kick"}).to_string(),
    ))
    .await
    .unwrap();
    let close = match next_msg(&mut ws).await {
        Message::Close(Some(f)) => (u16::from(f.code), f.reason.to_string()),
        other => panic!("expected a close, got {other:?}"),
    };
    assert_eq!(close, (4999, "kicked by backend".to_string()));
    let s = stats(srv.addr).await;
    let sub = hook_stats(&s, "subscribe");
    assert_eq!(
        (sub["requests"].as_u64(), sub["refusals"].as_u64()),
        (Some(3), Some(2))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_hook_rewrites_and_refuses() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| backend.configure(c, &["connect", "publish"]));
    let (mut publisher, _) = admitted(srv.addr).await;
    let mut reader = ws_with_cookie(srv.addr, "/ws/rewrite", "good-9").await;
    let r = call(
        &mut publisher,
        json!({"op":"publish","channel":"rewrite","data":"hi","id":1}),
    )
    .await;
    assert_eq!(
        r,
        json!({"type":"published","channel":"rewrite","subscribers":1,"id":1})
    );
    assert_eq!(next_text(&mut reader).await, "rewritten: hi");
    let seen = backend.seen().await;
    assert_eq!(seen["last"]["/publish"]["body"]["data"], "hi");

    let mut denied = ws_with_cookie(srv.addr, "/ws/deny", "good-9").await;
    let r = call(
        &mut publisher,
        json!({"op":"publish","channel":"deny","data":"no","id":2}),
    )
    .await;
    assert_eq!(r["code"], "refused");
    assert_eq!(
        (&r["backend_code"], &r["message"]),
        (&json!(4003), &json!("not allowed to post"))
    );
    // The refused message went nowhere: the next one is the first seen.
    assert_eq!(publish(srv.addr, "deny", "from the server").await, 1);
    assert_eq!(next_text(&mut denied).await, "from the server");
}

/// `skip_history`: the message is delivered but not kept (embedded mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_hook_skip_history_keeps_it_out_of_history() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        backend.configure(c, &["publish"]);
        c.history.size = 16;
    });
    let mut reader = ws_connect(srv.addr, "/ws/ephemeral").await;
    let mut publisher = ws_connect(srv.addr, "/ws").await;
    let r = call(
        &mut publisher,
        json!({"op":"publish","channel":"ephemeral","data":"gone","id":1}),
    )
    .await;
    assert_eq!(r["type"], "published");
    assert_eq!(next_text(&mut reader).await, "gone");
    assert_eq!(publish(srv.addr, "ephemeral", "kept").await, 1);
    assert_eq!(next_text(&mut reader).await, "kept");
    let h = get(srv.addr, "/history/ephemeral").await.json();
    let kept: Vec<&Value> = h["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["data"])
        .collect();
    assert_eq!(kept, [&json!("kept")], "{h}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_round_trips_through_the_backend() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| backend.configure(c, &["connect", "rpc"]));
    let (mut ws, _) = admitted(srv.addr).await;
    let r = call(
        &mut ws,
        json!({"op":"rpc","method":"sum","data":{"a":1,"b":2},"id":7}),
    )
    .await;
    assert_eq!(r, json!({"type":"rpc","id":7,"data":{"sum":3,"user":"42"}}));
    let r = call(&mut ws, json!({"op":"rpc","method":"nope","id":"x"})).await;
    assert_eq!(
        r,
        json!({"type":"error","code":"refused","backend_code":404,"message":"no such method","id":"x"})
    );
    // Without --proxy-rpc, rpc is a bad request.
    let plain = TestServer::start(|_| {});
    let mut ws = ws_connect(plain.addr, "/ws").await;
    let r = call(&mut ws, json!({"op":"rpc","method":"sum","id":1})).await;
    assert_eq!(
        (&r["type"], &r["code"]),
        (&json!("error"), &json!("bad_request"))
    );
}

/// A subscribe whose backend is over `--proxy-timeout` is answered
/// `unavailable` (not subscribed); the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscribe_hook_is_unavailable_not_a_hang() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        backend.configure(c, &["subscribe"]);
        c.proxy.timeout = std::time::Duration::from_millis(300);
    });
    let mut ws = ws_connect(srv.addr, "/ws").await;
    let r = call(&mut ws, json!({"op":"subscribe","channel":"slow","id":1})).await;
    assert_eq!(
        r,
        json!({"type":"error","code":"unavailable","message":"backend timed out","id":1})
    );
    let r = call(&mut ws, json!({"op":"subscribe","channel":"fine","id":2})).await;
    assert_eq!(r["type"], "subscribed");
    let s = stats(srv.addr).await;
    assert_eq!(hook_stats(&s, "subscribe")["timeouts"], 1);
}

/// A connection the connect hook gave an `expire_at` (2 s) is asked
/// about before it: extended again and again it outlives the first
/// expiry; `expired` closes it with 4001; without a refresh hook it
/// closes at its `expire_at`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_hook_extends_or_expires() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        backend.configure(c, &["connect", "refresh"]);
        c.proxy.timeout = std::time::Duration::from_millis(500);
    });
    let mut gone = ws_with_cookie(srv.addr, "/ws/ticker", "short-gone").await;
    assert_eq!(expect_close(&mut gone).await, 4001);
    let seen = backend.seen().await;
    assert_eq!(seen["last"]["/refresh"]["body"]["user"], "gone");

    let started = std::time::Instant::now();
    let mut kept = ws_with_cookie(srv.addr, "/ws/ticker", "short-keep").await;
    wait_until("three refreshes of the kept one", || async {
        backend.seen().await["refreshes"].as_u64() >= Some(4)
    })
    .await;
    assert!(
        started.elapsed() > std::time::Duration::from_secs(2),
        "past the first expire_at"
    );
    assert_eq!(publish(srv.addr, "ticker", "still here").await, 1);
    assert_eq!(next_text(&mut kept).await, "still here");

    let plain = TestServer::start(|c| backend.configure(c, &["connect"]));
    let mut short = ws_with_cookie(plain.addr, "/ws/ticker", "short-x").await;
    assert_eq!(expect_close(&mut short).await, 4001);
}

/// Path mode (`/ws/{channel}`) cannot go around the hooks: its channel is
/// asked of the subscribe hook before the `101`, and with a publish hook
/// it may not publish (it has no way to carry a refusal: close 1008).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_mode_goes_through_the_hooks() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| backend.configure(c, &["subscribe", "publish"]));
    let req = format!(
        "GET /ws/secret HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    let r = http_raw(srv.addr, req.as_bytes()).await;
    assert_eq!(
        (r.status, r.json()),
        (403, json!({"error":"not a member","code":403}))
    );
    let seen = backend.seen().await;
    assert_eq!(seen["last"]["/subscribe"]["body"]["channel"], "secret");

    let mut ws = ws_connect(srv.addr, "/ws/doc").await;
    ws.send(Message::text("hello")).await.unwrap();
    assert_eq!(expect_close(&mut ws).await, 1008);
    assert_eq!(
        backend.seen().await["requests"].get("/publish"),
        None,
        "not asked: refused"
    );
}
