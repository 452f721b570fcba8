//! Hooks per namespace against a real backend
//! (`tests/python/hook_backend.py`): a namespace picks its subscribe and
//! publish hooks — the global `--proxy-subscribe` / `--proxy-publish`,
//! a named `--proxy`, or none (`subscribe-proxy`, `publish-proxy`) — and
//! `subscribe = "hook"` lets the hook admit channels a token does not
//! list. Path mode, event streams and connect-hook connections follow
//! the channel's hooks too.

mod common;
mod hooks_support;

use std::net::SocketAddr;

use common::*;
use corecast::auth::sign_token;
use corecast::config::{Config, Secret};
use hooks_support::*;
use serde_json::{json, Value};

const SECRET: &str = "hook-namespaces-secret-0123456789abcdef";

/// Global subscribe and publish hooks to `backend`, the named proxies
/// `gate` (subscribe) and `mark` (publish), and `namespaces`.
fn configure(backend: &Backend, c: &mut Config, hooks: &[&str], namespaces: &str) {
    backend.configure(c, hooks);
    let named = format!(
        "gate={},mark={}",
        backend.url("subscribe-strict"),
        backend.url("publish-strict")
    );
    c.proxy.add_named(&named).unwrap();
    c.namespaces.specs.add_compact(namespaces, "test").unwrap();
}

fn subscribed(channel: &str, id: u64) -> Value {
    json!({"type":"subscribed","channel":channel,"id":id})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_namespace_uses_its_own_subscribe_hook() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        configure(
            &backend,
            c,
            &["subscribe", "publish"],
            "open:subscribe-proxy=none,publish-proxy=none,chat:,vip:subscribe-proxy=gate,publish-proxy=mark",
        )
    });
    let mut ws = ws_connect(srv.addr, "/ws").await;
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"open:secret","id":1}),
    )
    .await;
    assert_eq!(r, subscribed("open:secret", 1), "no hook in `open`");
    assert_eq!(asked(&backend, "/subscribe").await, 0);

    for (i, ch) in ["chat:secret", "secret"].into_iter().enumerate() {
        let r = call(&mut ws, json!({"op":"subscribe","channel":ch,"id":i})).await;
        assert_eq!(r["backend_code"], 403, "{ch}: the global hook refuses: {r}");
    }
    assert_eq!(asked(&backend, "/subscribe").await, 2);

    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"vip:room","id":3}),
    )
    .await;
    assert_eq!(
        (&r["backend_code"], &r["message"]),
        (&json!(4004), &json!("strict: members only"))
    );
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"vip:member","id":4}),
    )
    .await;
    assert_eq!(r, subscribed("vip:member", 4));
    assert_eq!(asked(&backend, "/subscribe-strict").await, 2);
    assert_eq!(
        asked(&backend, "/subscribe").await,
        2,
        "not the global hook"
    );

    let s = stats(srv.addr).await;
    assert_eq!(
        hook_stats(&s, "subscribe")["requests"],
        4,
        "named calls counted"
    );
    assert_eq!(hook_stats(&s, "subscribe")["refusals"], 3);

    // Path mode and event streams follow the channel's hook as well.
    assert_eq!(publish(srv.addr, "open:secret", "m").await, 1);
    let _path = ws_connect(srv.addr, "/ws/open:path").await;
    let refused = upgrade_status(srv.addr, "/ws/chat:secret").await;
    assert_eq!(refused, 403, "path mode asks chat's hook");
    let refused = upgrade_status(srv.addr, "/ws/vip:room").await;
    assert_eq!(refused, 403, "path mode asks vip's named hook");
    // An event stream's channels are asked of their hooks too; one
    // refusal refuses the stream.
    assert_eq!(get(srv.addr, "/sse?channel=chat:secret").await.status, 403);
    assert_eq!(get(srv.addr, "/sse?channel=vip:room").await.status, 403);
    assert_eq!(asked(&backend, "/subscribe-strict").await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_namespace_uses_its_own_publish_hook() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        configure(
            &backend,
            c,
            &["publish"],
            "open:publish-proxy=none,chat:,vip:publish-proxy=mark",
        )
    });
    let mut reader = ws_connect(srv.addr, "/ws").await;
    for (i, ch) in ["open:deny", "chat:room", "vip:room"]
        .into_iter()
        .enumerate()
    {
        let r = call(&mut reader, json!({"op":"subscribe","channel":ch,"id":i})).await;
        assert_eq!(r, subscribed(ch, i as u64));
    }
    let mut publisher = ws_connect(srv.addr, "/ws").await;
    let pubreq =
        |ch: &str, data: &str, id: u64| json!({"op":"publish","channel":ch,"data":data,"id":id});

    let r = call(&mut publisher, pubreq("open:deny", "plain", 1)).await;
    assert_eq!(r["type"], "published", "no hook in `open`: {r}");
    assert_eq!(next_json(&mut reader).await["data"], "plain");
    assert_eq!(asked(&backend, "/publish").await, 0);

    let r = call(&mut publisher, pubreq("chat:deny", "x", 2)).await;
    assert_eq!(r["backend_code"], 4003, "the global hook refuses: {r}");
    let r = call(&mut publisher, pubreq("chat:room", "y", 3)).await;
    assert_eq!(r["type"], "published");
    assert_eq!(next_json(&mut reader).await["data"], "y");
    assert_eq!(asked(&backend, "/publish").await, 2);

    let r = call(&mut publisher, pubreq("vip:room", "hi", 4)).await;
    assert_eq!(r["type"], "published");
    let got = next_json(&mut reader).await;
    assert_eq!(
        (&got["channel"], &got["data"]),
        (&json!("vip:room"), &json!("strict: hi"))
    );
    assert_eq!(asked(&backend, "/publish-strict").await, 1);
    assert_eq!(asked(&backend, "/publish").await, 2, "not the global hook");

    // Path mode may publish where no publish hook applies, not elsewhere.
    let mut raw = RawWs::connect(srv.addr, "/ws/chat:room").await;
    raw.send(0x81, b"from path").await;
    raw.expect_close(1008).await;
    let mut raw = RawWs::connect(srv.addr, "/ws/open:deny").await;
    raw.send(0x81, b"from path").await;
    assert_eq!(next_json(&mut reader).await["data"], "from path");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_hook_namespaces_admit_what_tokens_do_not_list() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        c.auth.token_secret = Some(Secret(SECRET.into()));
        configure(
            &backend,
            c,
            &["subscribe"],
            "doc:subscribe=hook,plain:subscribe-proxy=none,any:subscribe=anyone",
        );
    });
    let claims = r#"{"exp":9999999999,"sub":"7","subscribe":["plain:a"],"publish":[]}"#;
    let token = sign_token(claims, SECRET.as_bytes());
    let mut ws = ws_connect(srv.addr, &format!("/ws?token={token}")).await;
    let r = call(&mut ws, json!({"op":"subscribe","channel":"doc:1","id":1})).await;
    assert_eq!(r, subscribed("doc:1", 1), "the hook admits it");
    let seen = backend.seen().await;
    assert_eq!(seen["last"]["/subscribe"]["body"]["user"], "7");
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"doc:secret","id":2}),
    )
    .await;
    assert_eq!(r["backend_code"], 403);
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"plain:b","id":3}),
    )
    .await;
    assert_eq!(r["code"], "forbidden", "not in the token, no hook: {r}");
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"plain:a","id":4}),
    )
    .await;
    assert_eq!(r, subscribed("plain:a", 4));
    assert_eq!(
        asked(&backend, "/subscribe").await,
        2,
        "plain is never asked"
    );
    // `anyone` admits what the token does not list, but the hook still
    // decides (before, such a subscribe went around the hook).
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"any:secret","id":5}),
    )
    .await;
    assert_eq!(r["backend_code"], 403, "{r}");
    assert_eq!(asked(&backend, "/subscribe").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_hook_users_publish_only_through_a_publish_hook() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        configure(
            &backend,
            c,
            &["connect", "publish"],
            "open:publish-proxy=none,chat:",
        )
    });
    let mut ws = ws_with_cookie(srv.addr, "/ws", "good-42").await;
    assert_eq!(next_json(&mut ws).await["type"], "connected");
    assert_eq!(next_json(&mut ws).await["type"], "subscribed");
    let r = call(
        &mut ws,
        json!({"op":"publish","channel":"open:x","data":"a","id":1}),
    )
    .await;
    assert_eq!(r["code"], "forbidden", "no publish hook in `open`: {r}");
    let r = call(
        &mut ws,
        json!({"op":"publish","channel":"chat:x","data":"b","id":2}),
    )
    .await;
    assert_eq!(r["type"], "published", "{r}");
    assert_eq!(asked(&backend, "/publish").await, 1);
}

/// The status of a raw upgrade of `path` (a refused one's).
async fn upgrade_status(addr: SocketAddr, path: &str) -> u16 {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    http_raw(addr, req.as_bytes()).await.status
}
