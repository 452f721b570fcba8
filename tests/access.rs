//! Access control end to end: publish keys, signed connection tokens, the
//! Origin allow-list, publish rate limits and the worker-wide outbound
//! budget — driven by tokio-tungstenite and raw HTTP.

mod common;

use common::*;
use corecast::auth::{sign_token, unix_now};
use corecast::config::Secret;
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const SECRET: &str = "test-secret";

fn token(claims: &str) -> String {
    sign_token(claims, SECRET.as_bytes())
}

fn valid(subscribe: &str, publish: &str) -> String {
    let exp = unix_now() + 3600;
    token(&format!(
        r#"{{"exp":{exp},"sub":"t","subscribe":{subscribe},"publish":{publish}}}"#
    ))
}

/// Status of a WebSocket upgrade attempt (101 on success).
async fn upgrade_status(addr: std::net::SocketAddr, path_and_query: &str, extra: &str) -> u16 {
    let req = format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {RFC_KEY}\r\n{extra}\r\n"
    );
    http_raw(addr, req.as_bytes()).await.status
}

#[tokio::test]
async fn tokens_are_required_and_scoped_when_a_secret_is_set() {
    let srv = TestServer::start(|c| c.auth.token_secret = Some(Secret(SECRET.into())));
    let a = srv.addr;
    let news = valid(r#"["news.*"]"#, "[]");
    assert_eq!(upgrade_status(a, "/ws/news.eu", "").await, 401, "missing");
    assert_eq!(
        upgrade_status(a, "/ws/news.eu?token=abc", "").await,
        401,
        "malformed"
    );
    let forged = sign_token(r#"{"exp":9999999999,"subscribe":["*"]}"#, b"other");
    assert_eq!(
        upgrade_status(a, &format!("/ws/x?token={forged}"), "").await,
        401
    );
    let expired = token(r#"{"exp":1,"subscribe":["*"]}"#);
    assert_eq!(
        upgrade_status(a, &format!("/ws/x?token={expired}"), "").await,
        401
    );
    assert_eq!(
        upgrade_status(a, &format!("/ws/sports?token={news}"), "").await,
        403
    );
    assert_eq!(
        upgrade_status(a, &format!("/ws/news.eu?token={news}"), "").await,
        101
    );
    let header = format!("Authorization: Bearer {news}\r\n");
    assert_eq!(upgrade_status(a, "/ws/news.eu", &header).await, 101);
    let s = stats(a).await;
    assert_eq!(counter(&s, "auth_failures"), 5);
}

#[tokio::test]
async fn a_read_only_token_cannot_publish() {
    let srv = TestServer::start(|c| c.auth.token_secret = Some(Secret(SECRET.into())));
    let reader = valid(r#"["room"]"#, "[]");
    let writer = valid(r#"["room"]"#, r#"["room"]"#);
    let mut r = ws_connect(srv.addr, &format!("/ws/room?token={reader}")).await;
    let mut w = ws_connect(srv.addr, &format!("/ws/room?token={writer}")).await;
    w.send(Message::text("allowed")).await.unwrap();
    assert_eq!(next_text(&mut r).await, "allowed");
    r.send(Message::text("not allowed")).await.unwrap();
    assert_eq!(expect_close(&mut r).await, 1008);
    assert_eq!(
        next_text(&mut w).await,
        "allowed",
        "w got only its own message"
    );
    // JSON mode: per-channel grants answered in-band.
    let multi = valid(r#"["a"]"#, r#"["a"]"#);
    let mut m = ws_connect(srv.addr, &format!("/ws?token={multi}")).await;
    m.send(Message::text(r#"{"op":"subscribe","channel":"b","id":1}"#))
        .await
        .unwrap();
    let err = next_json(&mut m).await;
    assert_eq!(
        (err["type"].as_str(), err["code"].as_str()),
        (Some("error"), Some("forbidden"))
    );
    m.send(Message::text(
        r#"{"op":"publish","channel":"room","data":"x","id":2}"#,
    ))
    .await
    .unwrap();
    assert_eq!(next_json(&mut m).await["code"], "forbidden");
    m.send(Message::text(r#"{"op":"subscribe","channel":"a","id":3}"#))
        .await
        .unwrap();
    assert_eq!(next_json(&mut m).await["type"], "subscribed");
}

#[tokio::test]
async fn publish_key_guards_http_publish() {
    let srv = TestServer::start(|c| c.auth.publish_key = Some(Secret("k3y".into())));
    let a = srv.addr;
    let body = "hi";
    let without = format!("POST /publish/c HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{body}");
    let r = http_raw(a, without.as_bytes()).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let wrong = format!(
        "POST /publish/c HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k3z\r\nContent-Length: 2\r\n\r\n{body}"
    );
    assert_eq!(http_raw(a, wrong.as_bytes()).await.status, 401);
    let mut sub = ws_connect(a, "/ws/c").await;
    let right = format!(
        "POST /publish/c HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k3y\r\nContent-Length: 2\r\n\r\n{body}"
    );
    let r = http_raw(a, right.as_bytes()).await;
    assert_eq!(r.status, 200);
    assert_eq!(next_text(&mut sub).await, "hi");
}

#[tokio::test]
async fn browser_origins_are_checked_against_the_allow_list() {
    let srv = TestServer::start(|c| c.auth.allowed_origins = vec!["https://app.example".into()]);
    let a = srv.addr;
    assert_eq!(
        upgrade_status(a, "/ws/c", "Origin: https://evil.example\r\n").await,
        403
    );
    assert_eq!(
        upgrade_status(a, "/ws/c", "Origin: https://app.example\r\n").await,
        101
    );
    assert_eq!(
        upgrade_status(a, "/ws/c", "").await,
        101,
        "non-browser clients send no Origin"
    );
    let mut req = format!("ws://{a}/ws/c").into_client_request().unwrap();
    req.headers_mut()
        .insert("Origin", "https://evil.example".parse().unwrap());
    assert!(tokio_tungstenite::connect_async(req).await.is_err());
}

#[tokio::test]
async fn a_fast_publisher_is_slowed_not_dropped() {
    let srv = TestServer::start(|c| c.auth.publish_rate = 100);
    let mut sub = ws_connect(srv.addr, "/ws/r").await;
    let mut publisher = ws_connect(srv.addr, "/ws/r").await;
    // 150 messages at 100/s with a burst of 100: at least one pause.
    for i in 0..150 {
        publisher.send(Message::text(i.to_string())).await.unwrap();
    }
    for i in 0..150 {
        assert_eq!(next_text(&mut sub).await, i.to_string());
    }
    let s = stats(srv.addr).await;
    assert!(counter(&s, "publish_rate_limited") >= 1, "{s}");
    assert_eq!(counter(&s, "messages_not_delivered"), 0);
}

#[tokio::test]
async fn the_worker_wide_outbound_budget_cuts_off_stalled_readers() {
    // Two raw subscribers that never read, each on its own channel (a
    // frame shared by both is held, and charged, once): each alone is
    // under its own 1 MiB bound, together they cross a 256 KiB budget.
    let srv = TestServer::start(|c| {
        c.max_total_outbound = 256 << 10;
        c.max_outbound_queue = 1 << 20;
        c.close_timeout = std::time::Duration::from_millis(300);
    });
    let mut stalled = Vec::new();
    for i in 0..2 {
        let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
        let req = format!(
            "GET /ws/b{i} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {RFC_KEY}\r\n\r\n"
        );
        tokio::io::AsyncWriteExt::write_all(&mut s, req.as_bytes())
            .await
            .unwrap();
        let mut buf = Vec::new();
        assert_eq!(read_response(&mut s, &mut buf).await.unwrap().status, 101);
        stalled.push(s);
    }
    let mut http = HttpConn::connect(srv.addr).await;
    let body = "x".repeat(16 << 10);
    let s = {
        let mut last = serde_json::Value::Null;
        for i in 0..2000 {
            http.publish(&format!("b{}", i % 2), &body).await;
            last = stats(srv.addr).await;
            if counter(&last, "outbound_budget_exceeded") > 0 {
                break;
            }
        }
        last
    };
    assert!(counter(&s, "outbound_budget_exceeded") > 0, "{s}");
    assert!(counter(&s, "slow_consumer_disconnects") >= 1, "{s}");
    // The subscriber that crossed the budget is cut off; the other one,
    // under its own bound, keeps its subscription.
    let s = wait_stat(srv.addr, "websockets_closed", |n| n == 1).await;
    assert_eq!(counter(&s, "subscriptions"), 1, "{s}");
    drop(stalled);
}

/// Issue 12 item 1: with only `--publish-key`, WebSockets may subscribe
/// freely but publish only when they presented the key at the upgrade.
#[tokio::test]
async fn a_publish_key_also_guards_websocket_publishing() {
    let srv = TestServer::start(|c| c.auth.publish_key = Some(Secret("k3y".into())));
    let a = srv.addr;
    let mut sub = ws_connect(a, "/ws/news").await;
    // Path mode without the key: subscribing works, publishing closes 1008.
    let mut anon = ws_connect(a, "/ws/news").await;
    anon.send(Message::text("forged")).await.unwrap();
    assert_eq!(expect_close(&mut anon).await, 1008);
    // JSON mode without the key: an in-band `forbidden`, the connection stays.
    let mut multi = ws_connect(a, "/ws").await;
    multi
        .send(Message::text(
            r#"{"op":"publish","channel":"news","data":"forged","id":1}"#,
        ))
        .await
        .unwrap();
    let err = next_json(&mut multi).await;
    assert_eq!(
        (err["type"].as_str(), err["code"].as_str()),
        (Some("error"), Some("forbidden")),
        "{err}"
    );
    multi
        .send(Message::text(
            r#"{"op":"subscribe","channel":"news","id":2}"#,
        ))
        .await
        .unwrap();
    assert_eq!(next_json(&mut multi).await["type"], "subscribed");
    // A wrong key is refused at the upgrade.
    assert_eq!(upgrade_status(a, "/ws/news?key=k3z", "").await, 401);
    assert_eq!(
        upgrade_status(a, "/ws/news", "Authorization: Bearer nope\r\n").await,
        401
    );
    // The key as a query parameter or a bearer header grants publishing.
    let mut keyed = ws_connect(a, "/ws/news?key=k3y").await;
    keyed.send(Message::text("by query")).await.unwrap();
    assert_eq!(next_text(&mut sub).await, "by query");
    assert_eq!(next_json(&mut multi).await["data"], "by query");
    let mut req = format!("ws://{a}/ws").into_client_request().unwrap();
    req.headers_mut()
        .insert("Authorization", "Bearer k3y".parse().unwrap());
    let (mut bearer, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    bearer
        .send(Message::text(
            r#"{"op":"publish","channel":"news","data":"by header","id":3}"#,
        ))
        .await
        .unwrap();
    assert_eq!(next_json(&mut bearer).await["type"], "published");
    assert_eq!(next_text(&mut sub).await, "by header");
    assert_eq!(next_json(&mut multi).await["data"], "by header");
    let s = stats(a).await;
    assert_eq!(counter(&s, "publish_forbidden"), 2, "{s}");
    assert_eq!(counter(&s, "auth_failures"), 2, "{s}");
}

/// Issue 12 item 8: a connection does not outlive its token. Both
/// connections hold a token expiring in 1-2 s; the one that refreshes in
/// JSON mode stays, the other is closed with 4001.
#[tokio::test]
async fn an_expired_token_closes_its_connection_unless_refreshed() {
    let srv = TestServer::start(|c| c.auth.token_secret = Some(Secret(SECRET.into())));
    let a = srv.addr;
    let short = |grants: &str| {
        let exp = unix_now() + 2;
        token(&format!(r#"{{"exp":{exp},{grants}}}"#))
    };
    let grants = r#""subscribe":["room"],"publish":["room"]"#;
    let mut path = ws_connect(a, &format!("/ws/room?token={}", short(grants))).await;
    let mut plain = ws_connect(a, &format!("/ws?token={}", short(grants))).await;
    let mut refreshed = ws_connect(a, &format!("/ws?token={}", short(grants))).await;
    let mut status = ws_connect(a, &format!("/status/ws?token={}", short(grants))).await;
    // A refresh must keep the channels: a wider token is refused.
    let wider = valid(r#"["*"]"#, r#"["*"]"#);
    let req = format!(r#"{{"op":"refresh","token":"{wider}","id":1}}"#);
    refreshed.send(Message::text(req)).await.unwrap();
    let err = next_json(&mut refreshed).await;
    assert_eq!(err["code"], "invalid_token", "{err}");
    let bad = format!(
        r#"{{"op":"refresh","token":"{}x","id":2}}"#,
        valid("[]", "[]")
    );
    refreshed.send(Message::text(bad)).await.unwrap();
    assert_eq!(next_json(&mut refreshed).await["code"], "invalid_token");
    let later = token(&format!(r#"{{"exp":{},{grants}}}"#, unix_now() + 3600));
    let req = format!(r#"{{"op":"refresh","token":"{later}","id":3}}"#);
    refreshed.send(Message::text(req)).await.unwrap();
    let ok = next_json(&mut refreshed).await;
    assert_eq!(
        (ok["type"].as_str(), ok["id"].as_u64()),
        (Some("refreshed"), Some(3)),
        "{ok}"
    );
    // The unrefreshed ones are closed with 4001 once exp passes.
    let limit = std::time::Duration::from_secs(5);
    assert_eq!(
        within_for(limit, "path close", expect_close(&mut path)).await,
        4001
    );
    assert_eq!(
        within_for(limit, "json close", expect_close(&mut plain)).await,
        4001
    );
    // The read-only status feed too (it may get a sample or two first).
    let status_close = async {
        loop {
            if let Message::Close(f) = next_msg(&mut status).await {
                return f.map_or(1005, |f| u16::from(f.code));
            }
        }
    };
    assert_eq!(within_for(limit, "status close", status_close).await, 4001);
    // The refreshed one outlived its first token.
    let sub = r#"{"op":"subscribe","channel":"room","id":4}"#;
    refreshed.send(Message::text(sub)).await.unwrap();
    assert_eq!(next_json(&mut refreshed).await["type"], "subscribed");
    let s = stats(a).await;
    assert_eq!(counter(&s, "token_expirations"), 3, "{s}");
    assert_eq!(counter(&s, "token_refreshes"), 1, "{s}");
}

/// Issue 12 item 8: `nbf`, `--token-audience` and `--token-issuer`.
#[tokio::test]
async fn nbf_audience_and_issuer_are_enforced_at_the_upgrade() {
    let srv = TestServer::start(|c| {
        c.auth.token_secret = Some(Secret(SECRET.into()));
        c.auth.token_audience = Some("corecast".into());
        c.auth.token_issuer = Some("https://id.example".into());
    });
    let a = srv.addr;
    let exp = unix_now() + 3600;
    let with = |extra: &str| token(&format!(r#"{{"exp":{exp},"subscribe":["*"]{extra}}}"#));
    let good = r#","aud":"corecast","iss":"https://id.example""#;
    let cases = [
        (with(good), 101),
        (
            with(r#","aud":["x","corecast"],"iss":"https://id.example""#),
            101,
        ),
        (with(r#","iss":"https://id.example""#), 401),
        (with(r#","aud":"other","iss":"https://id.example""#), 401),
        (
            with(r#","aud":"corecast","iss":"https://evil.example""#),
            401,
        ),
        (with(&format!(r#"{good},"nbf":{}"#, unix_now() + 600)), 401),
        (with(&format!(r#"{good},"nbf":{}"#, unix_now() - 5)), 101),
    ];
    for (i, (t, want)) in cases.iter().enumerate() {
        let got = upgrade_status(a, &format!("/ws/x?token={t}"), "").await;
        assert_eq!(got, *want, "case {i}");
    }
}

/// Issue 12 item 7: 1,000 wrong purge tokens, 1,000 refused upgrades and
/// 1,000 wrong publish keys write a bounded number of log lines (one per
/// kind per 10 s, with the number suppressed), and are all counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refusals_writes_a_bounded_number_of_log_lines() {
    let secret = "0123456789abcdef0123456789abcdef";
    let srv = BinServer::spawn(&[
        "--log-level",
        "info",
        "--origin",
        "http://127.0.0.1:9",
        "--cache-purge-token",
        "purge-t0ken",
        "--publish-key",
        "k3y",
        "--token-secret",
        secret,
    ]);
    let a = srv.addr;
    for _ in 0..1000 {
        let purge = "POST /cache/purge HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n\
                     Content-Length: 2\r\n\r\n{}";
        assert_eq!(http_raw(a, purge.as_bytes()).await.status, 401);
        assert_eq!(upgrade_status(a, "/ws/c?token=bad", "").await, 401);
        let publish = "POST /publish/c HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k3z\r\n\
                       Content-Length: 2\r\n\r\nhi";
        assert_eq!(http_raw(a, publish.as_bytes()).await.status, 401);
    }
    let s = stats(a).await;
    assert_eq!(counter(&s, "cache_purge_refused"), 1000, "{s}");
    assert_eq!(counter(&s, "auth_failures"), 2000, "{s}");
    let suppressed = counter(&s, "refusal_logs_suppressed");
    let lines = srv.stop_and_collect();
    let refusals: Vec<&String> = lines.iter().filter(|l| l.contains("refused")).collect();
    // One line per kind, or two if the run straddled a 10 s interval.
    assert!(
        (3..=6).contains(&refusals.len()),
        "{} refusal lines: {refusals:#?}",
        refusals.len()
    );
    assert_eq!(suppressed + refusals.len() as u64, 3000, "{s}");
    assert!(lines
        .iter()
        .all(|l| !l.contains("nope") && !l.contains("k3z")));
}

/// Issue 12 item 9: with `--admin-listen`, the admin routes are served
/// only there; the public listener answers them 404 and the admin one
/// serves nothing public.
#[tokio::test]
async fn admin_routes_move_to_the_admin_listener() {
    let srv = TestServer::start(|c| c.admin_listen = Some("127.0.0.1:0".parse().unwrap()));
    let (public, admin) = (srv.addr, srv.admin.expect("admin listener"));
    assert_ne!(public, admin);
    for path in ["/stats", "/metrics", "/status"] {
        assert_eq!(get(public, path).await.status, 404, "public {path}");
        assert_eq!(get(admin, path).await.status, 200, "admin {path}");
    }
    assert_eq!(upgrade_status(public, "/status/ws", "").await, 404);
    assert_eq!(upgrade_status(admin, "/status/ws", "").await, 101);
    // The public surface stays public, and only there.
    assert_eq!(upgrade_status(public, "/ws/c", "").await, 101);
    assert_eq!(upgrade_status(admin, "/ws/c", "").await, 404);
    let publish = post_request("/publish/c", b"hi", false);
    assert_eq!(http_raw(public, &publish).await.status, 200);
    assert_eq!(http_raw(admin, &publish).await.status, 404);
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(get(public, probe).await.status, 200);
        assert_eq!(get(admin, probe).await.status, 200);
    }
    // Without --admin-listen, everything stays on the one listener.
    let one = TestServer::start(|_| {});
    assert!(one.admin.is_none());
    assert_eq!(get(one.addr, "/metrics").await.status, 200);
}

/// A refresh must name the connection's own user: another user's token
/// granting the same channels is refused, and the connection still ends
/// at its own token's expiry (before, it was accepted and the connection
/// lived on as the first user past its expiry).
#[tokio::test]
async fn a_refresh_with_another_users_token_is_refused() {
    let srv = TestServer::start(|c| c.auth.token_secret = Some(Secret(SECRET.into())));
    let grants = r#""subscribe":["room"],"publish":[]"#;
    let mine = token(&format!(
        r#"{{"exp":{},"sub":"alice",{grants}}}"#,
        unix_now() + 2
    ));
    let theirs = token(&format!(
        r#"{{"exp":{},"sub":"mallory",{grants}}}"#,
        unix_now() + 3600
    ));
    let mut ws = ws_connect(srv.addr, &format!("/ws?token={mine}")).await;
    let req = format!(r#"{{"op":"refresh","token":"{theirs}","id":1}}"#);
    ws.send(Message::text(req)).await.unwrap();
    let err = next_json(&mut ws).await;
    assert_eq!(err["code"], "invalid_token", "{err}");
    let limit = std::time::Duration::from_secs(10);
    assert_eq!(
        within_for(limit, "close at its own expiry", expect_close(&mut ws)).await,
        4001
    );
}
