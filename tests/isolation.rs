//! Native clients cannot reach the names the edge keeps for itself:
//! Pusher channels (`pusher/{app}/{name}`), presence event channels
//! (`presence/{channel}`) and Redis-side names (`!…`). A JSON client that
//! names one in any op gets `invalid_channel`, an HTTP request a `400`,
//! and nothing of the channel leaks (issue 28, item 1).

mod common;

use common::pusher::*;
use common::*;
use serde_json::{json, Value};

const APP: (&str, &str, &str) = ("1", "k1", "s1");

fn server() -> TestServer {
    TestServer::start(|c| {
        c.pusher.add_apps("1:k1:s1").unwrap();
        c.presence.set_patterns("*").unwrap();
        c.history.size = 10;
    })
}

/// A signed Pusher member of `presence-room` (user `secret-user`).
async fn pusher_member(addr: std::net::SocketAddr) -> Ws {
    let (mut ws, socket) = connect(addr, APP.1).await;
    let cdata = r#"{"user_id":"secret-user","user_info":{"email":"ana@example.com"}}"#;
    let signed = format!("{socket}:presence-room:{cdata}");
    let answer = subscribe(
        &mut ws,
        "presence-room",
        Some(auth(APP.1, APP.2, &signed)),
        Some(cdata),
    )
    .await;
    assert_eq!(
        answer["event"], "pusher_internal:subscription_succeeded",
        "{answer}"
    );
    ws
}

async fn ask(ws: &mut Ws, v: Value) -> Value {
    send(ws, v).await;
    next_json(ws).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_json_op_reaches_a_reserved_name() {
    let srv = server();
    let _member = pusher_member(srv.addr).await;
    let mut native = ws_connect(srv.addr, "/ws").await;
    let names = [
        "pusher/1/presence-room",
        "presence/pusher/1/presence-room",
        "presence/room",
        "!p{room}",
        "room/x",
    ];
    for (i, name) in names.iter().enumerate() {
        let ops = [
            json!({"op":"presence","channel":name,"id":i}),
            json!({"op":"subscribe","channel":name,"presence":true,"id":i}),
            json!({"op":"subscribe","channel":name,"id":i}),
            json!({"op":"unsubscribe","channel":name,"id":i}),
            json!({"op":"publish","channel":name,"data":"x","id":i}),
        ];
        for op in ops {
            let r = ask(&mut native, op.clone()).await;
            assert_eq!(r["type"], "error", "{op} -> {r}");
            assert_eq!(r["code"], "invalid_channel", "{op} -> {r}");
            assert_eq!(r["id"], json!(i), "{op} -> {r}");
            assert!(!r.to_string().contains("secret-user"), "{op} -> {r}");
        }
    }
    // Nothing joined anywhere, nothing subscribed: the connection still
    // works for a valid channel.
    let r = ask(
        &mut native,
        json!({"op":"subscribe","channel":"room","id":99}),
    )
    .await;
    assert_eq!(r["type"], "subscribed", "{r}");
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "subscriptions"), 2, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_http_route_reaches_a_reserved_name() {
    let srv = server();
    let _member = pusher_member(srv.addr).await;
    for name in [
        "pusher%2F1%2Fpresence-room",
        "pusher/1/presence-room",
        "!p{room}",
    ] {
        for path in [
            format!("/presence/{name}"),
            format!("/history/{name}"),
            format!("/ws/{name}"),
        ] {
            let r = get(srv.addr, &path).await;
            assert!(matches!(r.status, 400 | 404), "{path}: {}", r.status);
            assert!(!String::from_utf8_lossy(&r.body).contains("secret-user"));
        }
        let r = post(srv.addr, &format!("/publish/{name}"), b"x").await;
        assert!(matches!(r.status, 400 | 404), "{name}: {}", r.status);
    }
}
