//! The Pusher protocol with real clients: pusher-js (its Node build),
//! Laravel Echo and the `pusher` server SDK (npm), run by `tests/pusher/scenario.mjs`
//! against a corecast started here. Each scenario prints one JSON line
//! per thing its clients saw; these tests assert on them. Node and npm
//! must be installed; the npm packages are installed here when missing.

mod common;
mod redis_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};

const APP: (&str, &str, &str) = ("1", "appkey", "appsecret");

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pusher")
}

/// `npm ci` once per test binary when the packages are missing.
fn node_deps() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        if dir().join("node_modules/pusher-js").exists()
            && dir().join("node_modules/pusher").exists()
        {
            return;
        }
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--silent"])
            .current_dir(dir())
            .status()
            .expect("npm runs (Node.js and npm are needed for these tests)");
        assert!(status.success(), "npm ci in tests/pusher failed");
    });
}

fn server() -> TestServer {
    TestServer::start(|c| {
        c.pusher
            .add_apps(&format!("{}:{}:{}:client-events", APP.0, APP.1, APP.2))
            .unwrap();
    })
}

/// A port nothing listens on now (bound, then released), for a receiver
/// the scenario starts.
fn unused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `node scenario.mjs MODE` against `addr`.
fn node(addr: std::net::SocketAddr, mode: &str) -> Command {
    node_deps();
    let mut cmd = Command::new("node");
    cmd.arg("scenario.mjs")
        .arg(mode)
        .current_dir(dir())
        .env("CORECAST_ADDR", addr.to_string())
        .env("APP_ID", APP.0)
        .env("APP_KEY", APP.1)
        .env("APP_SECRET", APP.2);
    cmd
}

/// Runs `mode` of scenario.mjs; every line it printed, as JSON.
async fn scenario(srv: &TestServer, mode: &str) -> Vec<Value> {
    scenario_with(srv, mode, &[]).await
}

/// [`scenario`] with extra environment variables.
async fn scenario_with(srv: &TestServer, mode: &str, env: &[(&str, String)]) -> Vec<Value> {
    let mut cmd = node(srv.addr, mode);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    run(cmd, mode).await
}

async fn run(mut cmd: Command, mode: &str) -> Vec<Value> {
    // The script's own 15 s timer bounds it; this bounds the rest (Node
    // starting on a loaded machine).
    let limit = std::time::Duration::from_secs(30);
    let run = tokio::task::spawn_blocking(move || cmd.output());
    let out = within_for(limit, "node scenario", run)
        .await
        .unwrap()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scenario {mode} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn of_kind<'a>(lines: &'a [Value], client: &str, kind: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["client"] == client && l["kind"] == kind)
        .collect()
}

/// pusher-js connects (socket_id "N.N"), subscribes to a public and a
/// private channel (authorized with the SDK's authorizeChannel), and
/// receives an event the SDK triggers on both through the HTTP API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_js_receives_events_triggered_by_the_sdk() {
    let srv = server();
    let lines = scenario(&srv, "events").await;
    let connected = of_kind(&lines, "a", "connected");
    let id = connected[0]["socket_id"].as_str().unwrap();
    let (a, b) = id.split_once('.').unwrap();
    assert!(a.parse::<u64>().is_ok() && b.parse::<u64>().is_ok(), "{id}");
    let subscribed: Vec<_> = of_kind(&lines, "a", "subscribed")
        .iter()
        .map(|l| l["channel"].clone())
        .collect();
    assert_eq!(subscribed, [json!("news"), json!("private-room")]);
    let events = of_kind(&lines, "a", "event");
    assert_eq!(events.len(), 2, "{lines:?}");
    for e in events {
        assert_eq!(e["event"], "greet");
        assert_eq!(e["data"], json!({"hi": 1}));
    }
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "pusher_api_events"), 2);
}

/// A private channel signed with the wrong secret: subscription_error 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_js_sees_a_bad_signature_refused() {
    let srv = server();
    let lines = scenario(&srv, "bad_signature").await;
    let err = of_kind(&lines, "a", "subscription_error");
    assert_eq!(err.len(), 1, "{lines:?}");
    assert_eq!(err[0]["status"], 401);
    assert!(of_kind(&lines, "a", "subscribed").is_empty());
    assert_eq!(counter(&stats(srv.addr).await, "pusher_auth_failures"), 1);
}

/// Client events reach the other subscriber and are never echoed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_js_client_events_reach_others_only() {
    let srv = server();
    let lines = scenario(&srv, "client_events").await;
    let to_b = of_kind(&lines, "b", "event");
    let to_a = of_kind(&lines, "a", "event");
    assert_eq!(to_b.len(), 1, "{lines:?}");
    assert_eq!(to_b[0]["event"], "client-typing");
    assert_eq!(to_b[0]["data"], json!({"who": "a"}));
    assert_eq!(to_a.len(), 1, "a got its own event back: {lines:?}");
    assert_eq!(to_a[0]["event"], "client-reply");
    assert_eq!(counter(&stats(srv.addr).await, "pusher_client_events"), 2);
}

/// Presence: member_added once per user, member_removed with the user's
/// last connection, counts in subscription_succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_js_presence_members_come_and_go_per_user() {
    let srv = server();
    let lines = scenario(&srv, "presence").await;
    let counts: Vec<_> = ["a", "b", "b2"]
        .iter()
        .map(|c| of_kind(&lines, c, "subscribed")[0]["members"].clone())
        .collect();
    assert_eq!(counts, [json!(1), json!(2), json!(2)]);
    let added = of_kind(&lines, "a", "member_added");
    assert_eq!(
        added.len(),
        1,
        "bob's second connection re-added him: {lines:?}"
    );
    assert_eq!(added[0]["user"], "bob");
    assert_eq!(added[0]["info"], json!({"name": "bob"}));
    let removed = of_kind(&lines, "a", "member_removed");
    assert_eq!(removed.len(), 1, "{lines:?}");
    assert_eq!(of_kind(&lines, "a", "members")[0]["count"], 1);
}

/// The same presence scenario across two instances in Redis mode: alice
/// on the first, bob's two connections on the second — pusher-js sees
/// bob added once and removed once, and the member counts span both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_js_presence_across_two_instances() {
    let redis = redis_support::RedisServer::start(&[]).await;
    let tweak = |c: &mut corecast::Config| {
        let app = format!("{}:{}:{}:client-events", APP.0, APP.1, APP.2);
        c.pusher.add_apps(&app).unwrap();
    };
    let one = redis_support::instance(redis.url("", ""), tweak);
    let two = redis_support::instance(redis.url("", ""), tweak);
    redis_support::wait_readyz(one.addr, 200).await;
    redis_support::wait_readyz(two.addr, 200).await;
    let mut cmd = node(one.addr, "presence");
    cmd.env("CORECAST_ADDR2", two.addr.to_string());
    let lines = run(cmd, "presence").await;
    let counts: Vec<_> = ["a", "b", "b2"]
        .iter()
        .map(|c| of_kind(&lines, c, "subscribed")[0]["members"].clone())
        .collect();
    assert_eq!(counts, [json!(1), json!(2), json!(2)], "{lines:?}");
    let added = of_kind(&lines, "a", "member_added");
    assert_eq!(added.len(), 1, "{lines:?}");
    assert_eq!(added[0]["user"], "bob");
    assert_eq!(added[0]["info"], json!({"name": "bob"}));
    assert_eq!(of_kind(&lines, "a", "member_removed").len(), 1, "{lines:?}");
    assert_eq!(of_kind(&lines, "a", "members")[0]["count"], 1);
}

/// Channel state across two instances in Redis mode: pusher-js clients
/// on the second instance, and the `pusher` SDK's `get('/channels')` and
/// `get('/channels/news', {info: 'subscription_count'})` on the first
/// list the channel and count both subscriptions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_lists_channels_of_every_instance() {
    let redis = redis_support::RedisServer::start(&[]).await;
    let tweak = |c: &mut corecast::Config| {
        let app = format!("{}:{}:{}", APP.0, APP.1, APP.2);
        c.pusher.add_apps(&app).unwrap();
    };
    let one = redis_support::instance(redis.url("", ""), tweak);
    let two = redis_support::instance(redis.url("", ""), tweak);
    redis_support::wait_readyz(one.addr, 200).await;
    redis_support::wait_readyz(two.addr, 200).await;
    let mut cmd = node(one.addr, "channels_across");
    cmd.env("CORECAST_ADDR2", two.addr.to_string());
    let lines = run(cmd, "channels_across").await;
    let listed = of_kind(&lines, "sdk", "channels");
    assert_eq!(listed[0]["channels"], json!({"news": {}}), "{lines:?}");
    let info = of_kind(&lines, "sdk", "channel");
    assert_eq!(
        info[0]["info"],
        json!({"occupied": true, "subscription_count": 2}),
        "{lines:?}"
    );
}

/// Laravel Echo (`broadcaster: 'pusher'`) on a private channel receives a
/// Laravel-style event (`App\\Events\\OrderShipped`) broadcast by the SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn laravel_echo_private_channel_receives_a_broadcast() {
    let srv = server();
    let lines = scenario(&srv, "echo").await;
    assert_eq!(of_kind(&lines, "echo", "subscribed").len(), 1, "{lines:?}");
    let events = of_kind(&lines, "echo", "event");
    assert_eq!(events.len(), 1, "{lines:?}");
    assert_eq!(events[0]["data"], json!({"id": 1}));
}

/// User authentication: pusher-js signs in (the SDK's authenticateUser),
/// and an event the SDK sends to that user (sendToUser) arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_js_signin_and_server_to_user_events() {
    let srv = server();
    let lines = scenario(&srv, "signin").await;
    assert_eq!(of_kind(&lines, "a", "signed_in")[0]["user"], "u1");
    assert_eq!(
        of_kind(&lines, "a", "user_event")[0]["data"],
        json!({"x": 1})
    );
}

/// A signin signed with the wrong secret: pusher:error 4009 (and close).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_js_bad_signin_is_refused_with_4009() {
    let srv = server();
    let lines = scenario(&srv, "bad_signin").await;
    assert!(
        of_kind(&lines, "a", "error")
            .iter()
            .any(|e| e["code"] == 4009),
        "{lines:?}"
    );
    assert_eq!(counter(&stats(srv.addr).await, "pusher_signin_failures"), 1);
}

/// Webhooks, checked by the `pusher` SDK's `webhook(...).isValid()`:
/// channel_occupied, member_added ×2, client_event (with the sender's
/// socket_id and user_id), member_removed ×2, channel_vacated, in order;
/// the first request answered 500 is retried, nothing is lost or doubled;
/// a receiver with the wrong secret would refuse them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_reach_the_sdk_signed_in_order_and_retried() {
    let port = unused_port();
    let srv = TestServer::start(|c| {
        c.pusher
            .add_apps(&format!("{}:{}:{}:client-events", APP.0, APP.1, APP.2))
            .unwrap();
        c.pusher
            .add_webhooks(&format!("{}=http://127.0.0.1:{port}/hooks", APP.0))
            .unwrap();
    });
    let lines = scenario_with(&srv, "webhooks", &[("WEBHOOK_PORT", port.to_string())]).await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["kind"] == "webhook_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{lines:?}");
    assert_eq!(refused[0]["valid"], true);
    let hooks: Vec<_> = lines.iter().filter(|l| l["kind"] == "webhook").collect();
    let seen: Vec<(String, String)> = hooks
        .iter()
        .map(|h| {
            let who = h["user_id"].as_str().unwrap_or("");
            (h["name"].as_str().unwrap().to_string(), who.to_string())
        })
        .collect();
    let want = [
        ("channel_occupied", ""),
        ("member_added", "alice"),
        ("member_added", "bob"),
        ("client_event", "alice"),
        ("member_removed", "bob"),
        ("member_removed", "alice"),
        ("channel_vacated", ""),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(seen, want, "{lines:?}");
    for h in &hooks {
        assert_eq!(h["channel"], "presence-room");
        assert_eq!(
            (&h["valid"], &h["forged_valid"]),
            (&json!(true), &json!(false))
        );
    }
    let socket_a = of_kind(&lines, "a", "connected")[0]["socket_id"].clone();
    let ev = hooks[3];
    assert_eq!(
        (&ev["event"], &ev["socket_id"]),
        (&json!("client-typing"), &socket_a)
    );
    assert_eq!(ev["data"], r#"{"who":"a"}"#);
    // Counted when the 200 is read, which may follow the receiver's print.
    let s = wait_stat(srv.addr, "pusher_webhook_events", |n| n == 7).await;
    assert_eq!(counter(&s, "pusher_webhook_failures"), 1);
    assert_eq!(counter(&s, "pusher_webhook_dropped"), 0);
}

/// pusher-js reconnects on corecast's 4201 (a connection silent for
/// `--idle-timeout`): a new socket_id, the channel subscribed again, and
/// the next event delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_js_reconnects_after_4201() {
    let srv = TestServer::start(|c| {
        c.pusher
            .add_apps(&format!("{}:{}:{}", APP.0, APP.1, APP.2))
            .unwrap();
        c.ping_interval = std::time::Duration::ZERO;
        c.idle_timeout = std::time::Duration::from_millis(700);
    });
    let lines = scenario(&srv, "reconnect").await;
    let ids: Vec<_> = of_kind(&lines, "a", "connected")
        .iter()
        .map(|l| l["socket_id"].clone())
        .collect();
    assert!(ids.len() >= 2 && ids[0] != ids[1], "{lines:?}");
    // pusher-js reports the close code it acted on.
    assert_eq!(of_kind(&lines, "a", "error")[0]["code"], 4201, "{lines:?}");
    assert_eq!(of_kind(&lines, "a", "resubscribed").len(), 1);
    let events = of_kind(&lines, "a", "event");
    assert_eq!(events[0]["data"], json!({"n": 2}), "{lines:?}");
    assert!(counter(&stats(srv.addr).await, "idle_timeouts") >= 1);
}
