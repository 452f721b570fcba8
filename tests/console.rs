//! The operator console's HTTP contract (issue 34): the login (right and
//! wrong key, the cookie's attributes, the per-address limit), the page
//! and feed refused without a session, the feed's snapshot and its
//! bound, every instance listed in Redis mode, and actions (header
//! required, audited in the log with the admin's address).

mod common;
mod redis_support;

use std::collections::HashSet;
use std::net::SocketAddr;

use common::*;
use corecast::config::Secret;
use corecast::config::{Command, Config};
use corecast::console::session::{LOGIN_ATTEMPTS, SESSION_TTL_MS};
use corecast::console::snapshot::TOP_CHANNELS;
use futures_util::SinkExt;
use redis_support::RedisServer;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const KEY: &str = "console-key-0123456789";

fn keyed(c: &mut Config) {
    c.admin_key = Some(Secret::new(KEY));
}

/// `POST /console/login` with a form body (and extra header lines).
async fn login_with(addr: SocketAddr, key: &str) -> HttpResponse {
    let body = format!("key={key}");
    let req = format!(
        "POST /console/login HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    http_raw(addr, req.as_bytes()).await
}

/// Logs in; the `name=value` of the session cookie.
async fn login(addr: SocketAddr) -> String {
    let r = login_with(addr, KEY).await;
    assert_eq!(r.status, 303, "{r:?}");
    let cookie = r.header("set-cookie").expect("a cookie");
    cookie.split(';').next().unwrap().to_string()
}

/// `GET path` with the cookie.
async fn get_with(addr: SocketAddr, path: &str, cookie: &str) -> HttpResponse {
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nCookie: {cookie}\r\n\r\n");
    http_raw(addr, req.as_bytes()).await
}

/// `POST /console/api/{action}` with the cookie and (if `header`) the
/// action header.
async fn action(
    addr: SocketAddr,
    name: &str,
    body: Value,
    cookie: &str,
    header: bool,
) -> HttpResponse {
    let body = body.to_string();
    let extra = if header {
        "X-Corecast-Console: 1\r\n"
    } else {
        ""
    };
    let req = format!(
        "POST /console/api/{name} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nCookie: {cookie}\r\n{extra}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    http_raw(addr, req.as_bytes()).await
}

/// Opens the feed with the cookie.
async fn feed(addr: SocketAddr, cookie: &str) -> Ws {
    let mut req = format!("ws://{addr}/console/feed")
        .into_client_request()
        .unwrap();
    req.headers_mut().insert("Cookie", cookie.parse().unwrap());
    let (ws, resp) = within("feed connect", tokio_tungstenite::connect_async(req))
        .await
        .expect("feed upgrade");
    assert_eq!(resp.status(), 101);
    ws
}

/// The next snapshot on the feed that satisfies `pred`.
async fn snapshot_where(ws: &mut Ws, pred: impl Fn(&Value) -> bool) -> Value {
    within("a matching snapshot", async {
        loop {
            let s = next_json(ws).await;
            if pred(&s) {
                return s;
            }
        }
    })
    .await
}

/// Sends `req` and reads until the server closes.
async fn raw_to_eof(addr: SocketAddr, req: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    within("the answer to EOF", s.read_to_end(&mut out))
        .await
        .unwrap();
    String::from_utf8(out).unwrap()
}

/// The status of an upgrade request to `path` (with `extra` header lines).
async fn upgrade_status(addr: SocketAddr, path: &str, extra: &str) -> u16 {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    );
    http_raw(addr, req.as_bytes()).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_page_cookie_and_feed() {
    one_worker_per_server("the feed shows the view of its own worker, one instance of several (as in Redis mode); tests/workers.rs lists every worker");
    let srv = TestServer::start(keyed);
    // No session: the login page, a form posting `key` to the login.
    let page = get(srv.addr, "/console").await;
    assert_eq!(page.status, 401);
    let html = String::from_utf8_lossy(&page.body);
    assert!(html.contains(r#"action="/console/login""#) && html.contains(r#"name="key""#));
    assert!(page.header("set-cookie").is_none());
    // HEAD: the same head, no body.
    let head = raw_to_eof(
        srv.addr,
        "HEAD /console HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let (status_line, rest) = head.split_once("\r\n\r\n").unwrap();
    assert!(status_line.starts_with("HTTP/1.1 401"), "{status_line}");
    assert!(status_line.contains(&format!("Content-Length: {}", page.body.len())));
    assert_eq!(rest, "");
    // A wrong key: 401, no cookie.
    let wrong = login_with(srv.addr, "not-the-console-key").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    // The right key (form-encoded): 303 to /console with the cookie.
    let right = login_with(srv.addr, &KEY.replace('-', "%2D")).await;
    assert_eq!(right.status, 303);
    assert_eq!(right.header("location"), Some("/console"));
    let set = right.header("set-cookie").unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.split("; ").any(|a| a == attr), "{attr} in {set}");
    }
    assert!(
        set.contains(&format!("Max-Age={}", SESSION_TTL_MS / 1000)),
        "{set}"
    );
    assert!(!set.contains("Secure"), "plain HTTP: no Secure ({set})");
    let cookie = set.split(';').next().unwrap();
    // With the cookie: the console page; a made-up cookie is no session.
    let console = get_with(srv.addr, "/console", cookie).await;
    assert_eq!(console.status, 200);
    assert!(String::from_utf8_lossy(&console.body).contains(r#"id="console""#));
    let forged = format!("corecast_console={}", "0".repeat(64));
    assert_eq!(get_with(srv.addr, "/console", &forged).await.status, 401);
    // The feed: 401 before the upgrade without a session.
    assert_eq!(upgrade_status(srv.addr, "/console/feed", "").await, 401);
    let forged_hdr = format!("Cookie: {forged}\r\n");
    assert_eq!(
        upgrade_status(srv.addr, "/console/feed", &forged_hdr).await,
        401
    );
    assert_eq!(get(srv.addr, "/console/series").await.status, 401);
    // With it: snapshots with the contract's fields.
    let mut ws = feed(srv.addr, cookie).await;
    let mut sub = ws_connect(srv.addr, "/ws/news").await;
    let mut json_ws = ws_connect(srv.addr, "/ws").await;
    let snap = snapshot_where(&mut ws, |s| {
        s["channels"][0]["name"] == "news" && s["kinds"]["json"] == 1
    })
    .await;
    assert_eq!(snap["channels"][0]["subscribers"], 1);
    // The feed and the subscriber are path mode; the control one is JSON.
    assert_eq!(snap["kinds"]["path"], 2);
    // Internal channels (the feed's) are not counted.
    assert_eq!(snap["channel_count"], 1);
    json_ws.close(None).await.ok();
    assert!(snap["connections"].as_u64().unwrap() >= 2);
    let instances = snap["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0]["id"], snap["instance"]);
    // The series has the seconds since the start.
    let series = get_with(srv.addr, "/console/series", cookie).await;
    assert_eq!(series.status, 200);
    assert!(!series.json().as_array().unwrap().is_empty());
    sub.close(None).await.ok();
}

/// The feed's upgrade honours `--allowed-origins` as `/status/ws` does:
/// a page of another origin is refused even with the session cookie
/// (before, it was upgraded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_honours_allowed_origins() {
    let srv = TestServer::start(|c| {
        keyed(c);
        c.auth.allowed_origins = vec!["https://app.example".into()];
    });
    let cookie = login(srv.addr).await;
    let with = |origin: &str| format!("Cookie: {cookie}\r\nOrigin: {origin}\r\n");
    let evil = with("https://evil.example");
    assert_eq!(upgrade_status(srv.addr, "/console/feed", &evil).await, 403);
    assert_eq!(
        upgrade_status(srv.addr, "/status/ws", "Origin: https://evil.example\r\n").await,
        403
    );
    let good = with("https://app.example");
    assert_eq!(upgrade_status(srv.addr, "/console/feed", &good).await, 101);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_are_limited_per_address() {
    let srv = TestServer::start(keyed);
    // Right keys do not count (scripts logging in often are fine).
    for _ in 0..LOGIN_ATTEMPTS + 1 {
        login(srv.addr).await;
    }
    for _ in 0..LOGIN_ATTEMPTS {
        assert_eq!(login_with(srv.addr, "wrong-wrong-wrong").await.status, 401);
    }
    // Over the limit of failures even the right key waits, with Retry-After.
    let limited = login_with(srv.addr, KEY).await;
    assert_eq!(limited.status, 429);
    assert!(limited.header("set-cookie").is_none());
    let after: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&after));
}

/// `POST /console/login` with `key`, sent from source address `from`.
async fn login_from(from: std::net::Ipv4Addr, addr: SocketAddr, key: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from.into(), 0)).unwrap();
    let mut s = within("connect", sock.connect(addr)).await.unwrap();
    let body = format!("key={key}");
    let req = format!(
        "POST /console/login HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    within("the answer", s.read_to_end(&mut out)).await.unwrap();
    String::from_utf8_lossy(&out[9..12]).parse().unwrap()
}

/// Failed logins are bounded from all addresses together: twelve
/// addresses failing five times each use the minute's 60, and a thirteenth
/// address is refused at once, the right key too (before, each new
/// address got five more guesses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_are_bounded_across_addresses() {
    let srv = TestServer::start(keyed);
    for a in 0..12u8 {
        let from = std::net::Ipv4Addr::new(127, 0, 0, 2 + a);
        for _ in 0..LOGIN_ATTEMPTS {
            assert_eq!(login_from(from, srv.addr, "wrong-wrong-wrong").await, 401);
        }
    }
    let fresh = std::net::Ipv4Addr::new(127, 0, 0, 40);
    assert_eq!(login_from(fresh, srv.addr, KEY).await, 429);
}

#[test]
fn the_key_is_checked_at_start() {
    let args = |key: &str| vec!["--admin-key".to_string(), key.to_string()];
    let short = Config::from_args(args("fifteen-bytes!!"), |_| None);
    let Err(e) = short else {
        panic!("a 15-byte key is refused")
    };
    let e = e.to_string();
    assert!(e.contains("at least 16"), "{e}");
    assert!(matches!(
        Config::from_args(args("sixteen-bytes!!!"), |_| None),
        Ok(Command::Serve(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_no_console_and_the_admin_listener_keeps_it() {
    let open = TestServer::start(|_| {});
    assert_eq!(get(open.addr, "/console").await.status, 404);
    assert_eq!(login_with(open.addr, KEY).await.status, 404);
    let split = TestServer::start(|c| {
        keyed(c);
        c.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    });
    let admin = split.admin.unwrap();
    assert_eq!(get(split.addr, "/console").await.status, 404);
    assert_eq!(login_with(split.addr, KEY).await.status, 404);
    assert_eq!(get(admin, "/console").await.status, 401);
    let cookie = login(admin).await;
    assert_eq!(get_with(admin, "/console", &cookie).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_is_bounded() {
    one_worker_per_server("the feed shows the view of its own worker, one instance of several (as in Redis mode); tests/workers.rs lists every worker");
    let srv = TestServer::start(|c| {
        keyed(c);
        c.max_subscriptions = 1000;
    });
    let cookie = login(srv.addr).await;
    let mut ws = feed(srv.addr, &cookie).await;
    // Many more channels than a top list holds.
    let n = TOP_CHANNELS * 5;
    let mut sub = ws_connect(srv.addr, "/ws").await;
    for i in 0..n {
        let op = json!({"op":"subscribe","channel":format!("ch-{i:03}"),"id":i});
        sub.send(Message::text(op.to_string())).await.unwrap();
        next_json(&mut sub).await;
    }
    for i in 0..10 {
        publish(srv.addr, "ch-007", &format!("m{i}")).await;
    }
    let snap = snapshot_where(&mut ws, |s| s["channel_count"].as_u64() >= Some(n as u64)).await;
    assert_eq!(snap["channels"].as_array().unwrap().len(), TOP_CHANNELS);
    assert!(snap["channels_by_rate"].as_array().unwrap().len() <= TOP_CHANNELS);
    let size = snap.to_string().len();
    assert!(size < 16 * 1024, "snapshot of {size} bytes");
    // The one channel with messages leads the list by rate.
    for i in 0..10 {
        publish(srv.addr, "ch-007", &format!("again {i}")).await;
    }
    let rated = snapshot_where(&mut ws, |s| {
        s["channels_by_rate"][0]["messages_per_s"].as_u64() > Some(0)
    })
    .await;
    assert_eq!(rated["channels_by_rate"][0]["name"], "ch-007");
    // A search finds one channel among them.
    let found = action(
        srv.addr,
        "channels",
        json!({"search":"ch-042"}),
        &cookie,
        true,
    )
    .await;
    assert_eq!(found.json()["channels"][0]["name"], "ch-042");
    assert_eq!(found.json()["channels"].as_array().unwrap().len(), 1);
}

/// Several workers without Redis: each worker is a row of the instances
/// table, and the console's listing and disconnect reach a user's
/// connections on every worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_is_listed_without_redis() {
    const SECRET: &str = "console-test-secret-0123456789abcdef";
    let srv = TestServer::start(|c| {
        keyed(c);
        c.workers = corecast::config::Workers::Count(2);
        c.auth.token_secret = Some(Secret::new(SECRET));
    });
    let claims = r#"{"exp":9999999999,"sub":"bob","subscribe":["*"]}"#;
    let token = corecast::auth::sign_token(claims, SECRET.as_bytes());
    // Connections go to the least loaded worker, in turn: one each.
    let mut one = ws_connect(srv.addr, &format!("/ws/room?token={token}")).await;
    let mut two = ws_connect(srv.addr, &format!("/ws/room?token={token}")).await;
    let cookie = login(srv.addr).await;
    let mut ws = feed(srv.addr, &cookie).await;
    let snap = snapshot_where(&mut ws, |s| {
        let list = s["instances"].as_array().unwrap();
        list.len() == 2 && list.iter().all(|i| i["connections"].as_u64() >= Some(1))
    })
    .await;
    let ids: HashSet<&str> = snap["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "a row per worker: {snap}");
    let list = action(
        srv.addr,
        "connections",
        json!({"user":"bob"}),
        &cookie,
        true,
    )
    .await;
    let listed = list.json()["connections"].as_array().unwrap().len();
    assert_eq!(listed, 2, "both workers' connections: {}", list.json());
    let gone = action(srv.addr, "disconnect", json!({"user":"bob"}), &cookie, true).await;
    assert_eq!(gone.json(), json!({ "connections": 2 }));
    assert_eq!(expect_close(&mut one).await, 4005);
    assert_eq!(expect_close(&mut two).await, 4005);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_is_listed_in_redis_mode() {
    const SECRET: &str = "console-test-secret-0123456789abcdef";
    let redis = RedisServer::start(&[]).await;
    let on_redis = |c: &mut Config| {
        keyed(c);
        c.redis.url = Some(redis.url("", ""));
        c.auth.token_secret = Some(Secret::new(SECRET));
    };
    let a = TestServer::start(on_redis);
    let b = TestServer::start(on_redis);
    let claims = r#"{"exp":9999999999,"sub":"bob","subscribe":["*"]}"#;
    let token = corecast::auth::sign_token(claims, SECRET.as_bytes());
    let mut bob = ws_connect(b.addr, &format!("/ws/room?token={token}")).await;
    let cookie = login(a.addr).await;
    let mut ws = feed(a.addr, &cookie).await;
    // In Redis mode each worker is an instance: a row each.
    let rows = 2 * default_workers();
    let snap = snapshot_where(&mut ws, |s| {
        let list = s["instances"].as_array().unwrap();
        list.len() == rows
            && list
                .iter()
                .any(|i| i["connections"].as_u64() >= Some(1) && i["id"] != s["instance"])
    })
    .await;
    let list = snap["instances"].as_array().unwrap();
    let total: u64 = list
        .iter()
        .map(|i| i["connections"].as_u64().unwrap())
        .sum();
    assert_eq!(snap["sum"]["connections"], total);
    assert_eq!(snap["redis"]["mode"], "single");
    // A disconnect from a's console reaches b's connection of the user,
    // through the server API's control channel.
    let gone = action(a.addr, "disconnect", json!({"user":"bob"}), &cookie, true).await;
    assert_eq!(gone.json(), json!({ "instances": rows }));
    assert_eq!(expect_close(&mut bob).await, 4005);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_the_header_and_are_audited() {
    let srv = BinServer::spawn(&["--admin-key", KEY, "--log-level", "info"]);
    let addr = srv.addr;
    let cookie = login(addr).await;
    let mut sub = ws_connect(addr, "/ws/news").await;
    // Without the action header (a cross-site form): refused.
    let csrf = action(
        addr,
        "publish",
        json!({"channel":"news","data":"x"}),
        &cookie,
        false,
    )
    .await;
    assert_eq!(csrf.status, 403);
    // Without the session: refused.
    let anon = action(
        addr,
        "publish",
        json!({"channel":"news","data":"x"}),
        "a=b",
        true,
    )
    .await;
    assert_eq!(anon.status, 401);
    let ok = action(
        addr,
        "publish",
        json!({"channel":"news","data":"from the console"}),
        &cookie,
        true,
    )
    .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(next_text(&mut sub).await, "from the console");
    let gone = action(addr, "disconnect", json!({"user":"alice"}), &cookie, true).await;
    assert_eq!(gone.json(), json!({"connections": 0}));
    // Each action is in the log with the admin's address.
    let mut audited = Vec::new();
    while audited.len() < 2 {
        let line = srv.logs.recv_timeout(DEADLINE).expect("audit lines");
        if line.contains(r#"msg="console action""#) {
            assert!(line.contains("admin=127.0.0.1"), "{line}");
            audited.push(line);
        }
    }
    assert!(
        audited[0].contains("action=publish target=news"),
        "{}",
        audited[0]
    );
    assert!(
        audited[1].contains("action=disconnect target=alice"),
        "{}",
        audited[1]
    );
    // Logging out ends the session and clears the cookie.
    let out = action(addr, "logout", json!({}), &cookie, true).await;
    assert_eq!(out.status, 200);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(get_with(addr, "/console", &cookie).await.status, 401);
}

/// Runs `corecast top ARGS` to its end (off the async runtime).
async fn top_output(args: Vec<String>) -> std::process::Output {
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_corecast"))
            .arg("top")
            .args(args)
            .output()
            .expect("corecast top runs")
    });
    within("corecast top", run).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_prints_one_snapshot() {
    one_worker_per_server("the feed shows the view of its own worker, one instance of several (as in Redis mode); tests/workers.rs lists every worker");
    let srv = TestServer::start(keyed);
    let mut sub = ws_connect(srv.addr, "/ws/news").await;
    let url = format!("http://{}", srv.addr);
    let args = |key: &str| {
        vec![
            "--url".into(),
            url.clone(),
            "--admin-key".into(),
            key.into(),
            "--once".into(),
        ]
    };
    let out = top_output(args(KEY)).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("corecast top — instance "), "{text}");
    assert!(
        text.contains("connections") && text.contains("CHANNEL") && text.contains("INSTANCE"),
        "{text}"
    );
    let news = text
        .lines()
        .find(|l| l.starts_with("news "))
        .expect("the channel's line");
    assert_eq!(news.split_whitespace().nth(1), Some("1"), "{news}");
    assert!(
        !text.contains('\x1b'),
        "--once prints no screen control: {text:?}"
    );
    // A wrong key: refused, said on stderr, exit 1.
    let wrong = top_output(args("not-the-console-key")).await;
    assert_eq!(wrong.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("wrong key (401)"));
    sub.close(None).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_refreshes_in_a_terminal() {
    one_worker_per_server("the feed shows the view of its own worker, one instance of several (as in Redis mode); tests/workers.rs lists every worker");
    use std::io::Read;
    let srv = TestServer::start(keyed);
    let mut sub = ws_connect(srv.addr, "/ws/news").await;
    // `script` gives `corecast top` a pseudo-terminal; its output is ours.
    let cmd = format!(
        "{} top --url http://{} --admin-key {KEY}",
        env!("CARGO_BIN_EXE_corecast"),
        srv.addr
    );
    let mut child = std::process::Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux");
    let mut stdout = child.stdout.take().unwrap();
    // Two screens: each starts with home + clear, and shows the channel.
    let screens = tokio::task::spawn_blocking(move || {
        let (mut seen, mut chunk) = (Vec::new(), [0u8; 4096]);
        loop {
            let n = stdout.read(&mut chunk).expect("read the terminal");
            assert!(n > 0, "top ended: {:?}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&seen).to_string();
            let screens: Vec<&str> = text.split("\x1b[H\x1b[2J").skip(1).collect();
            if screens.len() >= 3 {
                return screens[..2]
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>();
            }
        }
    });
    let screens = within("two refreshes", screens).await.unwrap();
    child.kill().ok();
    child.wait().ok();
    for s in &screens {
        assert!(s.starts_with("corecast top — instance "), "{s:?}");
        assert!(s.lines().any(|l| l.starts_with("news ")), "{s:?}");
    }
    sub.close(None).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_of_a_user_is_disconnected() {
    const SECRET: &str = "console-test-secret-0123456789abcdef";
    let srv = TestServer::start(|c| {
        keyed(c);
        c.auth.token_secret = Some(Secret::new(SECRET));
    });
    let claims = r#"{"exp":9999999999,"sub":"alice","subscribe":["*"]}"#;
    let token = corecast::auth::sign_token(claims, SECRET.as_bytes());
    let mut first = ws_connect(srv.addr, &format!("/ws/news?token={token}")).await;
    let mut second = ws_connect(srv.addr, &format!("/ws/news?token={token}")).await;
    let cookie = login(srv.addr).await;
    let list = action(
        srv.addr,
        "connections",
        json!({"user":"alice"}),
        &cookie,
        true,
    )
    .await;
    let clients: Vec<String> = list.json()["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["client"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(clients.len(), 2, "{:?}", list.json());
    // One of them, by its client id (with several workers the two may
    // be on different workers, each numbering its own connections).
    let body = json!({"user":"alice","client":&clients[0]});
    let gone = action(srv.addr, "disconnect", body, &cookie, true).await;
    assert_eq!(gone.json(), json!({"connections": 1}));
    // That one is closed; the other stays: it still gets what is published.
    publish(srv.addr, "news", "still here").await;
    let (closed, stays) = match next_msg(&mut first).await {
        Message::Text(t) => {
            assert_eq!(t, "still here");
            (&mut second, "first")
        }
        Message::Close(Some(f)) => {
            assert_eq!(u16::from(f.code), 4005);
            assert_eq!(next_text(&mut second).await, "still here");
            return;
        }
        other => panic!("expected the message or the close, got {other:?}"),
    };
    assert_eq!(
        expect_close(closed).await,
        4005,
        "{stays} stayed, second closed"
    );
}

/// An origin answering every request with a small cacheable body, one
/// request per connection.
async fn tiny_origin() -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut chunk = [0u8; 1024];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = "{\"ok\":true}";
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_shows_hits_and_origin_latency() {
    one_worker_per_server("the feed shows the view of its own worker, one instance of several (as in Redis mode); tests/workers.rs lists every worker");
    let origin = tiny_origin().await;
    let srv = TestServer::start(|c| {
        keyed(c);
        c.cache.origin = Some(format!("http://{origin}").parse().unwrap());
    });
    let cookie = login(srv.addr).await;
    let mut ws = feed(srv.addr, &cookie).await;
    // A miss (one origin request), then hits.
    for _ in 0..3 {
        assert_eq!(get(srv.addr, "/api/thing").await.status, 200);
    }
    // The miss's origin latency is in the snapshot of its second; the
    // counts are totals.
    let latency = std::cell::Cell::new(None);
    let snap = snapshot_where(&mut ws, |s| {
        if let Some(ms) = s["cache"]["origin_latency_ms"].as_f64() {
            latency.set(Some(ms));
        }
        s["cache"]["hits"] == 2 && latency.get().is_some()
    })
    .await;
    let c = &snap["cache"];
    assert_eq!(
        (c["enabled"].as_bool(), c["misses"].as_u64()),
        (Some(true), Some(1))
    );
    assert!(latency.get().unwrap() > 0.0);
    assert!((c["hit_ratio"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9);
    assert!(c["bytes_stored"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_shards_are_shown() {
    let cluster = redis_support::RedisCluster::start(3, 0).await;
    let a = redis_support::cluster_instance(&cluster, keyed);
    let b = redis_support::cluster_instance(&cluster, keyed);
    let cookie = login(a.addr).await;
    let mut ws = feed(a.addr, &cookie).await;
    // Both instances heard through the cluster (a row per worker), every
    // shard up, every slot placed.
    let rows = 2 * default_workers();
    let snap = snapshot_where(&mut ws, |s| {
        let shards = s["redis"]["shards"].as_array().map_or(0, |v| v.len());
        s["instances"].as_array().unwrap().len() == rows
            && shards == 3
            && s["redis"]["shards"]
                .as_array()
                .unwrap()
                .iter()
                .all(|h| h["connected"] == 1)
    })
    .await;
    assert_eq!(snap["redis"]["mode"], "cluster");
    assert_eq!(snap["redis"]["connected"], true);
    let shards = snap["redis"]["shards"].as_array().unwrap();
    let slots: u64 = shards.iter().map(|h| h["slots"].as_u64().unwrap()).sum();
    assert_eq!(slots, 16384);
    assert!(shards
        .iter()
        .all(|h| h["addr"].as_str().unwrap().starts_with("127.0.0.1:")));
    drop(b);
}
