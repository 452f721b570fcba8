//! `--token-jwks-url` on the whole server (issue 31): a real identity
//! provider in the test (`tests/jwks/provider.js`, Node's `crypto` — RSA
//! keys published as a JWKS over HTTP, tokens signed with them), key
//! rotation, the periodic refresh, the unknown-`kid` refresh's rate limit (fetches counted on
//! both sides), a provider that is down, slow, malformed or too large
//! (the cached keys keep working), a server that starts while the
//! provider is down, and a provider that rotates every second.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use corecast::config::{apply_toml, Config};

/// The provider process, killed when dropped.
struct Provider {
    child: Child,
    addr: SocketAddr,
}

impl Provider {
    fn start() -> Provider {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/jwks/provider.js");
        let mut child = Command::new("node")
            .arg(script)
            .stdout(Stdio::piped())
            .spawn()
            .expect("node runs (Node.js is needed for these tests)");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("piped"))
            .read_line(&mut line)
            .expect("the provider prints its port");
        let port: u16 = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("provider said {line:?}"));
        Provider {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    fn url(&self) -> String {
        format!("http://{}/jwks.json", self.addr)
    }

    async fn control(&self, path: &str) -> String {
        let r = get(self.addr, &format!("/control/{path}")).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        String::from_utf8(r.body).unwrap()
    }

    /// A token for `claims` signed with key `kid` (None: the newest).
    async fn token(&self, kid: Option<&str>) -> String {
        let claims = r#"{"exp":9999999999,"sub":"ana"}"#;
        let kid = kid.map(|k| format!("kid={k}&")).unwrap_or_default();
        self.control(&format!("sign?{kid}claims={}", pct(claims)))
            .await
    }

    async fn mode(&self, m: &str) {
        self.control(&format!("mode?m={m}")).await;
    }

    async fn fetches(&self) -> u64 {
        self.control("fetches").await.parse().unwrap()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query value.
fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A server whose keys come from `url` (TOML, as a deployment writes it).
fn server(url: &str, refresh: &str, timeout: &str) -> TestServer {
    TestServer::start(|c: &mut Config| {
        let toml = format!(
            "token-jwks-url = \"{url}\"\ntoken-jwks-refresh = \"{refresh}\"\n\
             token-jwks-timeout = \"{timeout}\"\n"
        );
        apply_toml(c, &toml, "test.toml").expect("valid configuration");
    })
}

async fn upgrade(addr: SocketAddr, token: &str) -> u16 {
    let req = format!(
        "GET /ws?token={token} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {RFC_KEY}\r\n\r\n"
    );
    http_raw(addr, req.as_bytes()).await.status
}

/// The newest key's token with its `kid` swapped for one nobody has
/// (the signature then matches no key either).
async fn unknown_kid_token(p: &Provider) -> String {
    let t = p.token(None).await;
    let (_, rest) = t.split_once('.').unwrap();
    let header = base64_url(r#"{"alg":"RS256","typ":"JWT","kid":"made-up"}"#);
    format!("{header}.{rest}")
}

fn base64_url(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_fetched_on_its_first_token_and_the_old_one_refused() {
    let p = Provider::start();
    let srv = server(&p.url(), "200ms", "2s");
    wait_stat(srv.addr, "token_jwks_keys", |n| n == 1).await;
    let old = p.token(None).await;
    assert_eq!(upgrade(srv.addr, &old).await, 101);
    let new_kid = p.control("rotate").await;
    let new = p.token(Some(&new_kid)).await;
    // The new kid is unknown until the early fetch, at most one refresh
    // interval after the last one.
    let deadline = Instant::now() + DEADLINE;
    let mut refused = 0;
    while upgrade(srv.addr, &new).await != 101 {
        refused += 1;
        assert!(
            Instant::now() < deadline,
            "the rotated key is never accepted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(upgrade(srv.addr, &old).await, 401, "the old key is gone");
    let s = stats(srv.addr).await;
    assert!(counter(&s, "token_jwks_unknown_kid") > refused, "{s}");
    assert_eq!(counter(&s, "token_jwks_failures"), 0, "{s}");
    assert_eq!(counter(&s, "token_jwks_fetches"), p.fetches().await);
    let m = get(srv.addr, "/metrics").await;
    let m = String::from_utf8_lossy(&m.body);
    assert!(m.contains("corecast_token_jwks_keys 1"), "{m}");
    assert!(m.contains("corecast_token_jwks_unknown_kid_total"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kids_cause_at_most_one_fetch_per_refresh_interval() {
    let p = Provider::start();
    let srv = server(&p.url(), "4s", "2s");
    wait_stat(srv.addr, "token_jwks_fetches", |n| n == 1).await;
    let started = Instant::now();
    let bogus = unknown_kid_token(&p).await;
    for _ in 0..50 {
        assert_eq!(upgrade(srv.addr, &bogus).await, 401);
    }
    // One early fetch, four seconds after the first one began.
    wait_stat(srv.addr, "token_jwks_fetches", |n| n == 2).await;
    assert!(started.elapsed() >= Duration::from_millis(3500));
    for _ in 0..50 {
        assert_eq!(upgrade(srv.addr, &bogus).await, 401);
    }
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "token_jwks_unknown_kid"), 100, "{s}");
    if started.elapsed() < Duration::from_secs(7) {
        // The next one is not allowed before 8 s.
        assert_eq!(counter(&s, "token_jwks_fetches"), 2, "{s}");
        assert_eq!(p.fetches().await, 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_provider_leaves_the_cached_keys_in_use() {
    let p = Provider::start();
    let srv = server(&p.url(), "200ms", "500ms");
    wait_stat(srv.addr, "token_jwks_keys", |n| n == 1).await;
    let good = p.token(None).await;
    let bogus = unknown_kid_token(&p).await;
    // Each mode crosses one bound or breaks one rule: connection reset,
    // 503, not JSON, 300 KiB (> 256 KiB), 33 keys (> 32), an answer after
    // 5 s (> --token-jwks-timeout).
    for mode in ["down", "error", "malformed", "huge", "many", "slow"] {
        p.mode(mode).await;
        let failures = counter(&stats(srv.addr).await, "token_jwks_failures");
        // A token with an unknown kid asks for an early fetch.
        assert_eq!(upgrade(srv.addr, &bogus).await, 401);
        wait_stat(srv.addr, "token_jwks_failures", |n| n > failures).await;
        assert_eq!(upgrade(srv.addr, &good).await, 101, "{mode}: cached key");
        let s = stats(srv.addr).await;
        assert_eq!(counter(&s, "token_jwks_keys"), 1, "{mode}: {s}");
    }
    p.mode("ok").await;
    let kid = p.control("rotate").await;
    let rotated = p.token(Some(&kid)).await;
    wait_until("the provider is back", || async {
        upgrade(srv.addr, &rotated).await == 101
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_starts_while_the_provider_is_down_and_takes_keys_later() {
    let p = Provider::start();
    p.mode("down").await;
    let srv = server(&p.url(), "200ms", "1s");
    let token = p.token(None).await;
    wait_stat(srv.addr, "token_jwks_failures", |n| n >= 1).await;
    assert_eq!(get(srv.addr, "/healthz").await.status, 200);
    assert_eq!(upgrade(srv.addr, &token).await, 401, "no keys yet");
    assert_eq!(upgrade(srv.addr, "").await, 401, "tokens are required");
    p.mode("ok").await;
    // Retried with backoff (200 ms doubling, at most 2 s).
    wait_until("keys after the provider came back", || async {
        upgrade(srv.addr, &token).await == 101
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_rotating_every_second_is_followed_within_bounds() {
    let p = Provider::start();
    let srv = server(&p.url(), "200ms", "2s");
    wait_stat(srv.addr, "token_jwks_keys", |n| n == 1).await;
    let started = Instant::now();
    p.mode("rotating").await;
    let mut accepted = std::collections::BTreeSet::new();
    let deadline = Instant::now() + DEADLINE;
    while accepted.len() < 3 {
        assert!(Instant::now() < deadline, "accepted only {accepted:?}");
        let token = p.token(None).await;
        if upgrade(srv.addr, &token).await == 101 {
            accepted.insert(token.split('.').next().unwrap().to_string());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let s = stats(srv.addr).await;
    let fetches = counter(&s, "token_jwks_fetches");
    // One at start, at most one per refresh interval since (early or
    // periodic), and the one in flight.
    assert!(
        fetches <= 2 + elapsed_ms / 200,
        "{fetches} in {elapsed_ms} ms"
    );
    assert!(counter(&s, "token_jwks_unknown_kid") >= 1, "{s}");
    assert_eq!(get(srv.addr, "/healthz").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_set_is_fetched_periodically_without_any_token_asking() {
    let p = Provider::start();
    // Periodic fetches every 10 x 100 ms.
    let srv = server(&p.url(), "100ms", "2s");
    wait_stat(srv.addr, "token_jwks_fetches", |n| n == 1).await;
    let kid = p.control("rotate").await;
    let fetched = p.fetches().await;
    wait_until("a periodic fetch after the rotation", || async {
        p.fetches().await > fetched
    })
    .await;
    wait_stat(srv.addr, "token_jwks_fetches", |n| n > fetched).await;
    let token = p.token(Some(&kid)).await;
    assert_eq!(upgrade(srv.addr, &token).await, 101);
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "token_jwks_unknown_kid"), 0, "{s}");
}

/// A key set decides who is admitted: `--token-jwks-url http://…` to
/// another machine is a start-up error naming the rule (before, it was
/// accepted silently and fetched in clear); plain http to a loopback
/// address (a local sidecar) is allowed, and so is https.
#[test]
fn a_plain_http_key_set_is_refused_unless_on_loopback() {
    let run = |url: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_corecast"))
            .args([
                "check-config",
                "--listen",
                "127.0.0.1:0",
                "--token-jwks-url",
                url,
            ])
            .output()
            .expect("the binary runs")
    };
    let out = run("http://idp.example/keys");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("https://"), "{err}");
    for ok in [
        "http://127.0.0.1:9/keys",
        "http://localhost:9/keys",
        "https://idp.example/keys",
    ] {
        let out = run(ok);
        assert!(
            out.status.success(),
            "{ok}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
