//! One admission on every way in (against the real test backend,
//! `tests/python/hook_backend.py`): a (connection identity, channel)
//! pair is admitted the same over JSON, path mode, an event stream,
//! `GET /history` and `GET /presence` — the identity from a token or,
//! without one, from the connect hook; the channel by its namespace's
//! rules, then its subscribe hook. A client publish is asked of the
//! channel's publish hook whichever rule let it through.

mod common;
mod hooks_support;
mod sse_support;

use std::net::SocketAddr;

use common::*;
use corecast::auth::sign_token;
use corecast::config::{Config, Secret};
use hooks_support::*;
use serde_json::json;
use sse_support::Sse;

const SECRET: &str = "hook-admission-secret-0123456789abcdef";

fn configure(backend: &Backend, c: &mut Config, hooks: &[&str], namespaces: &str) {
    backend.configure(c, hooks);
    if !namespaces.is_empty() {
        c.namespaces.specs.add_compact(namespaces, "test").unwrap();
    }
}

/// The status of a raw upgrade of `path`, with `Cookie: sid={sid}`.
async fn upgrade_status(addr: SocketAddr, path: &str, sid: &str) -> u16 {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\nCookie: sid={sid}\r\n\r\n"
    );
    http_raw(addr, req.as_bytes()).await.status
}

/// `GET path` with `Cookie: sid={sid}` (none if empty).
async fn get_as(addr: SocketAddr, path: &str, sid: &str) -> HttpResponse {
    let cookie = match sid {
        "" => String::new(),
        s => format!("Cookie: sid={s}\r\n"),
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{cookie}\r\n");
    http_raw(addr, req.as_bytes()).await
}

/// A path-mode upgrade admitted by the connect hook is held to the
/// channel's namespace rules, as the same user's JSON subscribe is
/// (before, `/ws/notes:%2342` upgraded for user 666 and received
/// what was published there, and so did `/ws/zzz:secret`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_mode_upgrades_of_connect_hook_users_follow_the_namespace_rules() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        c.auth.token_secret = Some(Secret(SECRET.into()));
        configure(&backend, c, &["connect"], "notes:subscribe=user");
    });
    let mut json = ws_with_cookie(srv.addr, "/ws", "good-666").await;
    assert_eq!(next_json(&mut json).await["type"], "connected");
    assert_eq!(next_json(&mut json).await["type"], "subscribed");
    for ch in ["notes:#42", "zzz:secret"] {
        let r = call(&mut json, json!({"op":"subscribe","channel":ch,"id":1})).await;
        assert_eq!(r["type"], "error", "JSON refuses {ch}: {r}");
    }
    let path = |c: &str| format!("/ws/{}", c.replace('#', "%23"));
    assert_eq!(
        upgrade_status(srv.addr, &path("notes:#42"), "good-666").await,
        403
    );
    assert_eq!(
        upgrade_status(srv.addr, &path("zzz:secret"), "good-666").await,
        404
    );
    // The user's own channel upgrades and receives.
    let mut own = ws_with_cookie(srv.addr, &path("notes:#666"), "good-666").await;
    // `#` percent-encoded in the URL.
    assert_eq!(publish(srv.addr, "notes:%23666", "mine").await, 1);
    assert_eq!(next_text(&mut own).await, "mine");
    assert_eq!(publish(srv.addr, "notes:%2342", "theirs").await, 0);
}

/// With only `--proxy-connect`, a read of a channel asks the connect
/// hook as a WebSocket does: without a session, `GET /history`,
/// `GET /presence` and `GET /sse` are refused as `/ws` is (before, they
/// answered the channel's messages and members).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_without_a_session_are_refused_by_the_connect_hook() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        configure(&backend, c, &["connect"], "");
        c.presence.set_patterns("*").unwrap();
        c.history.size = 10;
    });
    let mut member = ws_with_cookie(srv.addr, "/ws", "good-42").await;
    assert_eq!(next_json(&mut member).await["type"], "connected");
    assert_eq!(next_json(&mut member).await["type"], "subscribed");
    let r = call(
        &mut member,
        json!({"op":"subscribe","channel":"user.42","presence":true,"id":1}),
    )
    .await;
    assert_eq!(r["type"], "subscribed", "{r}");
    assert_eq!(publish(srv.addr, "user.42", "private").await, 1);
    assert_eq!(upgrade_status(srv.addr, "/ws/user.42", "").await, 403);
    for read in ["/history/user.42", "/presence/user.42"] {
        let r = get_as(srv.addr, read, "").await;
        assert_eq!(r.status, 403, "{read}: {r:?}");
        assert!(
            !String::from_utf8_lossy(&r.body).contains("private"),
            "{read}: {r:?}"
        );
        let r = get_as(srv.addr, read, "good-42").await;
        assert_eq!(r.status, 200, "{read} with a session: {r:?}");
    }
    let r = get_as(srv.addr, "/history/user.42", "good-42").await;
    assert!(
        String::from_utf8_lossy(&r.body).contains("private"),
        "{r:?}"
    );
    let mut sse = Sse::request(srv.addr, "/sse?channel=user.42", &[]).await;
    assert_eq!(sse.status, 403, "{}", sse.head);
    assert_eq!(sse.error_body().await["code"], 403);
    let sse = Sse::request(
        srv.addr,
        "/sse?channel=user.42",
        &[("Cookie", "sid=good-42")],
    )
    .await;
    assert_eq!(sse.status, 200, "a session's stream opens: {}", sse.head);
    assert!(asked(&backend, "/connect").await >= 7);
}

/// A read of a channel asks its subscribe hook as a subscribe does:
/// `{"op":"presence"}`, `GET /history`, `GET /presence`, and an event
/// stream (which is refused whole when the hook refuses a channel), in
/// the global hook's channels and in a `subscribe = "hook"` namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_channel_ask_its_subscribe_hook() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        c.auth.token_secret = Some(Secret(SECRET.into()));
        c.presence.set_patterns("*").unwrap();
        c.history.size = 10;
        configure(&backend, c, &["subscribe"], "doc:subscribe=hook");
    });
    let claims = r#"{"exp":9999999999,"sub":"7","subscribe":["*"],"publish":[]}"#;
    let token = sign_token(claims, SECRET.as_bytes());
    let mut ws = ws_connect(srv.addr, &format!("/ws?token={token}")).await;
    for (i, ch) in ["secret", "doc:secret"].into_iter().enumerate() {
        let r = call(&mut ws, json!({"op":"presence","channel":ch,"id":i})).await;
        assert_eq!(
            r["backend_code"], 403,
            "{ch}: the hook refuses the query: {r}"
        );
    }
    assert_eq!(asked(&backend, "/subscribe").await, 2);
    let r = call(&mut ws, json!({"op":"presence","channel":"doc:1","id":9})).await;
    assert_eq!(r["type"], "presence", "{r}");
    assert_eq!(asked(&backend, "/subscribe").await, 3);
    for read in ["/history/", "/presence/"] {
        for (ch, status) in [("secret", 403), ("doc:secret", 403), ("doc:1", 200)] {
            let r = get(srv.addr, &format!("{read}{ch}?token={token}")).await;
            assert_eq!(r.status, status, "{read}{ch}: {r:?}");
        }
    }
    assert_eq!(asked(&backend, "/subscribe").await, 9);
    let target = format!("/sse?channel=doc:1&channel=doc:secret&token={token}");
    let sse = Sse::request(srv.addr, &target, &[]).await;
    assert_eq!(sse.status, 403, "{}", sse.head);
    let sse = Sse::request(srv.addr, &format!("/sse?channel=doc:1&token={token}"), &[]).await;
    assert_eq!(sse.status, 200, "{}", sse.head);
    assert_eq!(asked(&backend, "/subscribe").await, 12);
}

/// In a `publish = "subscribers"` namespace a subscriber whose token
/// grants no publish may publish — and its publish hook is asked (before,
/// the hook was skipped unless the token granted the publish).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_publish_hook_asks_every_publish_it_applies_to() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        c.auth.token_secret = Some(Secret(SECRET.into()));
        configure(&backend, c, &["publish"], "room:publish=subscribers");
    });
    let claims = r#"{"exp":9999999999,"sub":"7","subscribe":["*"],"publish":[]}"#;
    let token = sign_token(claims, SECRET.as_bytes());
    let mut ws = ws_connect(srv.addr, &format!("/ws?token={token}")).await;
    for (i, ch) in ["room:deny", "room:ok"].into_iter().enumerate() {
        let r = call(&mut ws, json!({"op":"subscribe","channel":ch,"id":i})).await;
        assert_eq!(r["type"], "subscribed", "{r}");
    }
    let r = call(
        &mut ws,
        json!({"op":"publish","channel":"room:deny","data":"x","id":5}),
    )
    .await;
    assert_eq!(r["backend_code"], 4003, "the hook refuses: {r}");
    let r = call(
        &mut ws,
        json!({"op":"publish","channel":"room:ok","data":"y","id":6}),
    )
    .await;
    assert_eq!(r["type"], "message", "delivered to itself first: {r}");
    assert_eq!(next_json(&mut ws).await["type"], "published");
    assert_eq!(asked(&backend, "/publish").await, 2);
    // A non-subscriber is refused by the rule, without asking.
    let mut other = ws_connect(srv.addr, &format!("/ws?token={token}")).await;
    let r = call(
        &mut other,
        json!({"op":"publish","channel":"room:ok","data":"z","id":7}),
    )
    .await;
    assert_eq!(r["code"], "forbidden", "{r}");
    assert_eq!(asked(&backend, "/publish").await, 2);
}

/// The connect hook learns the address corecast saw, as a proxy tells
/// it: `X-Forwarded-For` with the peer appended to the client's value
/// (its last element is corecast's), and `X-Real-IP` the peer alone — a
/// client's own `X-Real-IP` is dropped (before, both went verbatim and
/// no header carried the real peer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connect_hook_gets_the_real_peer() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        configure(&backend, c, &["connect"], "");
        c.proxy.http_headers.push("x-real-ip".into());
    });
    let req = format!(
        "GET /ws HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\nCookie: sid=good-1\r\n\
         X-Forwarded-For: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\n\r\n"
    );
    let mut conn = HttpConn::connect(srv.addr).await;
    assert_eq!(conn.request(req.as_bytes()).await.status, 101);
    let seen = backend.seen().await;
    let headers = &seen["last"]["/connect"]["headers"];
    assert_eq!(
        headers["x-forwarded-for"], "6.6.6.6, 127.0.0.1",
        "{headers}"
    );
    assert_eq!(headers["x-real-ip"], "127.0.0.1", "{headers}");
}
