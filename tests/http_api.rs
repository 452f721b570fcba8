//! The HTTP surface: publish, health, stats, errors, keep-alive, routing.

mod common;

use std::time::Duration;

use common::*;
use futures_util::SinkExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{self, Message};

/// `POST /publish/{c}` reaches simple and JSON-mode subscribers, answers
/// 200 JSON with the subscriber count, and moves the `/stats` counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_reaches_both_kinds_of_subscriber() {
    let srv = TestServer::start(|_| {});
    let addr = srv.addr;
    let before = stats(addr).await;
    assert_eq!(counter(&before, "messages_in"), 0);
    assert_eq!(counter(&before, "connections"), 1, "just this request");

    let mut simple = ws_connect(addr, "/ws/news").await;
    let mut multi = ws_connect(addr, "/ws").await;
    multi
        .send(Message::text(r#"{"op":"subscribe","channel":"news"}"#))
        .await
        .unwrap();
    assert_eq!(next_json(&mut multi).await["type"], "subscribed");
    wait_stat(addr, "subscriptions", |n| n == 2).await;

    let resp = post(addr, "/publish/news", "héllo wörld".as_bytes()).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-type"), Some("application/json"));
    assert_eq!(resp.json(), json!({"channel":"news","subscribers":2}));
    assert_eq!(next_text(&mut simple).await, "héllo wörld");
    assert_eq!(
        next_json(&mut multi).await,
        json!({"type":"message","channel":"news","data":"héllo wörld"})
    );
    // An empty body is a valid (empty) message.
    assert_eq!(publish(addr, "news", "").await, 2);
    assert_eq!(next_text(&mut simple).await, "");
    // A body that is not UTF-8 cannot become a text frame.
    let resp = post(addr, "/publish/news", &[0xff, 0xfe]).await;
    assert_eq!(resp.status, 400);
    assert!(resp.json()["error"].is_string());
    assert_eq!(publish(addr, "nobody-here", "x").await, 0);

    let after = stats(addr).await;
    assert_eq!(counter(&after, "messages_in"), 3);
    assert_eq!(counter(&after, "websockets_opened"), 2);
    assert_eq!(counter(&after, "subscriptions"), 2);
    assert_eq!(counter(&after, "channels"), 1);
    assert_eq!(
        counter(&after, "connections"),
        3,
        "two sockets + this request"
    );
    assert!(counter(&after, "http_requests") > counter(&before, "http_requests"));
    assert!(counter(&after, "bytes_out") > counter(&before, "bytes_out"));
    assert!(counter(&after, "deliveries") >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_stats_answer_json() {
    let srv = TestServer::start(|_| {});
    let resp = get(srv.addr, "/healthz").await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json(), json!({"status":"ok"}));
    assert_eq!(resp.header("connection"), Some("close"));
    // A query string does not change the route.
    assert_eq!(get(srv.addr, "/healthz?probe=1").await.status, 200);
    let resp = get(srv.addr, "/stats").await;
    assert_eq!(resp.status, 200);
    let s = resp.json();
    for key in [
        "connections_opened",
        "websockets_opened",
        "handshake_timeouts",
        "idle_timeouts",
        "slow_consumer_disconnects",
        "slow_consumer_drops",
        "messages_in",
        "deliveries",
        "connections",
        "channels",
    ] {
        counter(&s, key);
    }
    assert_eq!(counter(&s, "http_requests"), 3);
}

/// Each refusal gets its status and a JSON `{"error": ...}` body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_their_status() {
    let srv = TestServer::start(|c| c.http.max_body_size = 1024);
    let addr = srv.addr;
    let expect = |status: u16| {
        move |resp: HttpResponse, what: &str| {
            assert_eq!(resp.status, status, "{what}: {resp:?}");
            assert!(resp.json()["error"].is_string(), "{what}: {resp:?}");
            resp
        }
    };
    let ws_head = |path: &str, version: &str, key: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Version: {version}\r\nSec-WebSocket-Key: {key}\r\n\r\n"
        )
    };

    expect(404)(get(addr, "/nope").await, "unknown path");
    expect(404)(get(addr, "/wsx/a").await, "near miss");
    expect(404)(get(addr, "/").await, "no root channel");
    let r = expect(405)(get(addr, "/publish/x").await, "GET /publish");
    assert!(r.header("allow").is_some(), "405 names what is allowed");
    expect(405)(post(addr, "/healthz", b"x").await, "POST /healthz");
    expect(405)(post(addr, "/ws/a", b"").await, "POST /ws/a");
    expect(400)(post(addr, "/publish/bad!name", b"x").await, "bad channel");
    expect(400)(get(addr, "/ws/bad%20name").await, "bad channel");
    let long = format!("/publish/{}", "c".repeat(129));
    expect(400)(post(addr, &long, b"x").await, "channel name too long");
    expect(400)(
        http_raw(addr, b"GET /healthz HTTP/1.1 trailing\r\n\r\n").await,
        "malformed request line",
    );
    expect(400)(
        http_raw(addr, b"G\x01T / HTTP/1.1\r\n\r\n").await,
        "control byte in method",
    );
    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(9000)
    );
    expect(431)(http_raw(addr, big.as_bytes()).await, "head > 8 KiB");
    // Only the head is sent: the server refuses before reading a body.
    expect(413)(
        http_raw(
            addr,
            b"POST /publish/c HTTP/1.1\r\nHost: t\r\nContent-Length: 1025\r\n\r\n",
        )
        .await,
        "body > max_body_size",
    );
    expect(411)(
        http_raw(
            addr,
            b"POST /publish/c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .await,
        "chunked body",
    );
    expect(400)(
        http_raw(
            addr,
            b"POST /publish/c HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        )
        .await,
        "conflicting Content-Length",
    );
    let r = expect(426)(
        http_raw(addr, ws_head("/ws/a", "8", RFC_KEY).as_bytes()).await,
        "version 8",
    );
    assert_eq!(r.header("sec-websocket-version"), Some("13"));
    expect(400)(
        http_raw(addr, ws_head("/ws/a", "13", "c2hvcnQ=").as_bytes()).await,
        "short key",
    );
    expect(400)(
        http_raw(
            addr,
            ws_head("/ws/a", "13", "!!!!!!!!!!!!!!!!!!!!!!==").as_bytes(),
        )
        .await,
        "key not base64",
    );
    let no_key = "GET /ws/a HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n\
                  Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n";
    expect(400)(http_raw(addr, no_key.as_bytes()).await, "missing key");
    // A plain GET of a WebSocket path is refused, not served.
    let r = get(addr, "/ws/a").await;
    assert!(r.status >= 400, "{r:?}");
    // The server survived all of it.
    assert_eq!(get(addr, "/healthz").await.status, 200);
    let s = stats(addr).await;
    assert_eq!(counter(&s, "websockets_opened"), 0);
    assert!(counter(&s, "handshake_failures") >= 4);
}

/// HTTP/1.1 keeps the connection open: sequential and pipelined requests,
/// and an error response that is not fatal, all on one socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_serves_several_requests_on_one_connection() {
    let srv = TestServer::start(|_| {});
    let addr = srv.addr;
    let mut conn = HttpConn::connect(addr).await;
    let r = conn.request(get_request("/healthz", true).as_bytes()).await;
    assert_eq!(
        (r.status, r.header("connection")),
        (200, Some("keep-alive"))
    );
    let r = conn.request(get_request("/stats", true).as_bytes()).await;
    assert_eq!(r.status, 200);
    assert_eq!(counter(&r.json(), "connections_opened"), 1, "same socket");
    let r = conn.request(get_request("/nope", true).as_bytes()).await;
    assert_eq!(r.status, 404);
    assert_eq!(conn.publish("c", "one").await, 0);

    // Two requests in one write, answered in order.
    let mut both = post_request("/publish/c", b"two", true);
    both.extend_from_slice(get_request("/healthz", true).as_bytes());
    conn.stream().write_all(&both).await.unwrap();
    let r = conn.response().await;
    assert_eq!((r.status, r.json()["channel"].clone()), (200, json!("c")));
    let r = conn.response().await;
    assert_eq!(r.json(), json!({"status":"ok"}));

    // HEAD describes the body without sending it: the next response
    // follows its head directly.
    let mut both = b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n".to_vec();
    both.extend_from_slice(get_request("/stats", true).as_bytes());
    conn.stream().write_all(&both).await.unwrap();
    let r = conn.response_head().await;
    assert_eq!((r.status, r.header("content-length")), (200, Some("15")));
    let r = conn.response().await;
    assert_eq!(r.status, 200);
    counter(&r.json(), "http_requests");

    // `Connection: close` is honoured: response, then EOF.
    let r = conn
        .request(get_request("/healthz", false).as_bytes())
        .await;
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    let mut rest = Vec::new();
    let n = within(
        "EOF after Connection: close",
        conn.stream().read_to_end(&mut rest),
    )
    .await
    .unwrap();
    assert_eq!(n, 0);
    let s = stats(addr).await;
    assert_eq!(
        counter(&s, "connections_opened"),
        2,
        "one socket + this one"
    );
    assert_eq!(counter(&s, "messages_in"), 2);

    // HTTP/1.0 closes by default.
    let mut s10 = TcpStream::connect(addr).await.unwrap();
    s10.write_all(b"GET /healthz HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut all = Vec::new();
    within("HTTP/1.0 response and EOF", s10.read_to_end(&mut all))
        .await
        .unwrap();
    let text = String::from_utf8(all).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
}

/// `--root-channel`: `GET /` upgrades into that channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_channel_serves_upgrades_at_slash() {
    let srv = TestServer::start(|c| c.root_channel = Some("lobby".into()));
    let addr = srv.addr;
    let mut root = ws_connect(addr, "/").await;
    let mut named = ws_connect(addr, "/ws/lobby").await;
    wait_stat(addr, "subscriptions", |n| n == 2).await;
    assert_eq!(publish(addr, "lobby", "hi").await, 2);
    assert_eq!(next_text(&mut root).await, "hi");
    assert_eq!(next_text(&mut named).await, "hi");
    root.send(Message::text("from root")).await.unwrap();
    assert_eq!(next_text(&mut named).await, "from root");
    // Only GET upgrades: other methods on `/` are refused.
    assert_eq!(post(addr, "/", b"x").await.status, 405);
}

/// Without `--root-channel`, `GET /` is 404, for upgrades too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_root_channel_means_404_at_slash() {
    let srv = TestServer::start(|_| {});
    let url = format!("ws://{}/", srv.addr);
    match tokio_tungstenite::connect_async(url.as_str()).await {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 404),
        other => panic!("expected a 404 refusal, got {:?}", other.map(|_| ())),
    }
    let mut raw = TcpStream::connect(srv.addr).await.unwrap();
    let head = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {RFC_KEY}\r\n\r\n"
    );
    raw.write_all(head.as_bytes()).await.unwrap();
    let r = within("404", read_response(&mut raw, &mut Vec::new()))
        .await
        .unwrap();
    assert_eq!(r.status, 404);
    assert_eq!(counter(&stats(srv.addr).await, "websockets_opened"), 0);
}

/// RFC 9110 10.1.1: on a request head with `Expect: 100-continue` and a
/// body to come, the server "MUST either send an immediate response with
/// a final status code [...] or send an immediate 100 (Continue)
/// response". Clients such as curl otherwise stall (1 s) before sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_answered_before_the_body() {
    let srv = TestServer::start(|c| c.http.max_body_size = 1024);
    let head = |len: usize| {
        format!(
            "POST /publish/c HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\n\
             Expect: 100-continue\r\n\r\n"
        )
    };
    // Too large: the final status is known from the head alone.
    let mut stream = TcpStream::connect(srv.addr).await.unwrap();
    stream.write_all(head(2048).as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let r = within_for(
        Duration::from_secs(2),
        "413 without waiting for the body",
        read_response(&mut stream, &mut buf),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 413);

    let mut stream = TcpStream::connect(srv.addr).await.unwrap();
    stream.write_all(head(5).as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let r = within_for(
        Duration::from_secs(2),
        "100 Continue before the body is sent",
        read_response(&mut stream, &mut buf),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 100);
    stream.write_all(b"hello").await.unwrap();
    let r = within("publish response", read_response(&mut stream, &mut buf))
        .await
        .unwrap();
    assert_eq!((r.status, r.json()["subscribers"].clone()), (200, json!(0)));
}
