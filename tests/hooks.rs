//! The connect hook against a real backend (Python's `http.server`,
//! `tests/python/hook_backend.py`): session-cookie auth without a token,
//! the backend's refusals, failures that fail closed and harm nobody
//! else, the pool's bound under a connect storm.

mod common;
mod hooks_support;

use common::*;
use hooks_support::*;
use serde_json::json;

/// A browser with a session cookie and no token is admitted: its first
/// frame says who it is (the backend's user and data), the backend's
/// channels are subscribed server-side, and the backend saw the cookie
/// and the allow-listed headers only, plus the static shared secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cookie_admits_without_a_token() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| backend.configure(c, &["connect"]));
    let mut ws = ws_with_cookie(srv.addr, "/ws", "good-42").await;
    let hello = next_json(&mut ws).await;
    assert_eq!(hello["type"], "connected");
    assert_eq!(
        (&hello["user"], &hello["data"]),
        (&json!("42"), &json!({"motd":"hello 42"}))
    );
    let client = hello["client"].as_str().expect("a client id").to_string();
    assert_eq!(
        next_json(&mut ws).await,
        json!({"type":"subscribed","channel":"news"}),
        "the server-side subscription is answered as a client's"
    );
    assert_eq!(publish(srv.addr, "news", "breaking").await, 1);
    let m = next_json(&mut ws).await;
    assert_eq!(
        (&m["channel"], &m["data"]),
        (&json!("news"), &json!("breaking"))
    );

    let seen = backend.seen().await;
    let last = &seen["last"]["/connect"];
    assert_eq!(
        last["body"],
        json!({"client": client, "transport":"websocket","protocol":"json","encoding":"json"})
    );
    let headers = &last["headers"];
    assert_eq!(headers["cookie"], "theme=dark; sid=good-42");
    assert_eq!(headers["x-hook-secret"], "s3cret");
    assert!(headers.get("x-not-forwarded").is_none(), "{headers}");

    // Path mode is admitted alike, without a `connected` frame.
    let mut path = ws_with_cookie(srv.addr, "/ws/room", "good-7").await;
    assert_eq!(publish(srv.addr, "room", "hi").await, 1);
    assert_eq!(next_text(&mut path).await, "hi");
    let s = stats(srv.addr).await;
    assert_eq!(hook_stats(&s, "connect")["requests"], 2);
}

/// `error` 401 → 401, any other `error` or a `disconnect` → 403, the
/// backend's reason in the body; counted as refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_refusals_answer_the_upgrade() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| backend.configure(c, &["connect"]));
    let r = upgrade_with_cookie(srv.addr, "expired").await;
    assert_eq!(
        (r.status, r.json()),
        (401, json!({"error":"session expired","code":401}))
    );
    let r = upgrade_with_cookie(srv.addr, "").await;
    assert_eq!(
        (r.status, r.json()),
        (403, json!({"error":"no session","code":403}))
    );
    let r = upgrade_with_cookie(srv.addr, "banned").await;
    assert_eq!(
        (r.status, r.json()),
        (403, json!({"error":"banned","code":4403}))
    );
    let s = stats(srv.addr).await;
    let c = hook_stats(&s, "connect");
    assert_eq!(
        (c["requests"].as_u64(), c["refusals"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(
        counter(&s, "connections"),
        1,
        "only the /stats request is open"
    );
}

/// A slow backend (over the 1 s timeout), garbage, a 10 MB answer, a
/// missing shared secret: each is a 503 with a clear reason, counted —
/// and a good client connecting meanwhile is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_backend_fails_closed_and_harms_nobody_else() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| backend.configure(c, &["connect"]));
    let addr = srv.addr;
    let slow = tokio::spawn(async move { upgrade_with_cookie(addr, "slow").await });
    // While the slow call waits, others are admitted and served.
    wait_until("the slow call reached the backend", || async {
        backend.seen().await["requests"]["/connect"].as_u64() == Some(1)
    })
    .await;
    let mut good = ws_with_cookie(addr, "/ws", "good-1").await;
    assert_eq!(next_json(&mut good).await["type"], "connected");
    assert_eq!(next_json(&mut good).await["type"], "subscribed");
    let r = slow.await.unwrap();
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (503, Some("backend timed out"))
    );

    for sid in ["garbage", "huge"] {
        let r = upgrade_with_cookie(addr, sid).await;
        assert_eq!(
            (r.status, r.json()["error"].as_str()),
            (503, Some("backend unavailable")),
            "{sid}"
        );
    }
    let s = stats(addr).await;
    let c = hook_stats(&s, "connect");
    assert_eq!(
        (c["timeouts"].as_u64(), c["errors"].as_u64()),
        (Some(1), Some(2)),
        "{c}"
    );
    let m = get(addr, "/metrics").await;
    let text = String::from_utf8(m.body).unwrap();
    assert!(
        text.contains("corecast_proxy_timeouts_total{hook=\"connect\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("corecast_proxy_connect_duration_seconds_count"));
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus text");
    let errors = scrape.samples.iter().find(|x| {
        x.metric == "corecast_proxy_errors_total" && x.labels.get("hook") == Some("connect")
    });
    assert!(
        matches!(errors.map(|e| &e.value), Some(prometheus_parse::Value::Counter(v)) if *v == 2.0),
        "{errors:?}"
    );
    assert_eq!(publish(addr, "news", "still fine").await, 1);
    assert_eq!(next_json(&mut good).await["data"], "still fine");
}

/// Without the shared secret the backend answers 400: refused (503).
/// A backend that is down: refused (503), counted as an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_is_down_or_says_400_refuses() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        c.proxy
            .set_url(corecast::hooks::HookKind::Connect, &backend.url("connect"))
            .unwrap();
    });
    let r = upgrade_with_cookie(srv.addr, "good-1").await;
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (503, Some("backend unavailable"))
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = TestServer::start(|c| {
        let url = format!("http://127.0.0.1:{port}/connect");
        c.proxy
            .set_url(corecast::hooks::HookKind::Connect, &url)
            .unwrap();
    });
    let r = upgrade_with_cookie(down.addr, "good-1").await;
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (503, Some("backend unavailable"))
    );
    let s = stats(down.addr).await;
    assert_eq!(hook_stats(&s, "connect")["errors"], 1);
}

/// 200 clients connecting at once open at most `--proxy-max-connections`
/// (4) connections to the backend, kept alive and reused; all are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_storm_is_bounded_by_the_pool() {
    let backend = Backend::start();
    let srv = TestServer::start(|c| {
        backend.configure(c, &["connect"]);
        c.proxy.max_connections = 4;
        c.proxy.timeout = std::time::Duration::from_secs(8);
        c.proxy.concurrency = 256;
    });
    let addr = srv.addr;
    let clients: Vec<_> = (0..200)
        .map(|i| {
            tokio::spawn(async move { ws_with_cookie(addr, "/ws", &format!("good-{i}")).await })
        })
        .collect();
    let mut open = Vec::new();
    for c in clients {
        open.push(c.await.unwrap());
    }
    let seen = backend.seen().await;
    assert_eq!(seen["requests"]["/connect"], 200);
    let conns = seen["connections"].as_u64().unwrap();
    // The pool is per worker: each opens up to --proxy-max-connections.
    let most = 4 * default_workers() as u64;
    assert!(
        (1..=most).contains(&conns),
        "backend saw {conns} connections"
    );
    let s = stats(addr).await;
    assert!(
        counter(&s, "proxy_backend_connections_opened") <= most,
        "{s}"
    );
    assert_eq!(counter(&s, "connections"), 201);
}

/// The book's example backend (its Python block in docs/src/hooks.md, run
/// as written but on a free port) drives corecast through all five hooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_books_backend_works_as_documented() {
    let readme = include_str!("../docs/src/hooks.md");
    let start = readme
        .find("import http.server, json, time")
        .expect("the book's backend");
    let code = &readme[start..start + readme[start..].find("```").unwrap()];
    let listen = r#"http.server.ThreadingHTTPServer(("127.0.0.1", 9000), Handler).serve_forever()"#;
    assert!(code.contains(listen), "the book's backend listens on 9000");
    let code = code.replace(
        listen,
        "srv = http.server.ThreadingHTTPServer((\"127.0.0.1\", 0), Handler)\n\
         print(\"port\", srv.server_address[1], flush=True)\nsrv.serve_forever()",
    );
    let backend = Backend::from_source(&code);
    let srv = TestServer::start(|c| {
        backend.configure(c, &["connect", "subscribe", "publish", "rpc", "refresh"])
    });
    let r = upgrade_with_cookie(srv.addr, "nobody").await;
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (401, Some("log in first"))
    );
    let mut ws = ws_with_cookie(srv.addr, "/ws", "abc").await;
    let hello = next_json(&mut ws).await;
    assert_eq!(
        (&hello["user"], &hello["data"]),
        (&json!("42"), &json!({"motd":"welcome back"}))
    );
    let sub = next_json(&mut ws).await;
    assert_eq!(sub, json!({"type":"subscribed","channel":"user.42"}));
    let r = ask(&mut ws, json!({"op":"subscribe","channel":"doc.1","id":1})).await;
    assert_eq!(r["type"], "subscribed");
    // The publisher is a subscriber: its (rewritten) message and the ack.
    let first = ask(
        &mut ws,
        json!({"op":"publish","channel":"doc.1","data":"  hi  ","id":2}),
    )
    .await;
    let second = next_json(&mut ws).await;
    let message = [&first, &second]
        .into_iter()
        .find(|m| m["type"] == "message");
    assert_eq!(
        message.expect("the message")["data"],
        "hi",
        "{first} {second}"
    );
    let r = ask(&mut ws, json!({"op":"rpc","method":"time","id":3})).await;
    assert!(r["data"]["now"].as_f64().is_some(), "{r}");
    let r = publish(srv.addr, "user.42", "to the user").await;
    assert_eq!(r, 1, "subscribed to user.42 by the connect result");
}

async fn ask(ws: &mut Ws, req: serde_json::Value) -> serde_json::Value {
    use futures_util::SinkExt;
    let text = tokio_tungstenite::tungstenite::Message::text(req.to_string());
    ws.send(text).await.expect("send");
    next_json(ws).await
}
