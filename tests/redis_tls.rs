//! Redis over TLS (`rediss://`) against a real `redis-server --tls-port`
//! (Debian's build has TLS): two instances deliver through it and come
//! back after a Redis restart, and through a Redis Cluster whose nodes
//! serve TLS beside plain TCP; a server whose certificate does not chain
//! to `--redis-tls-ca`, or is not valid for the host name, or that does
//! not speak TLS, is refused with a clear log line, `/readyz` 503 and a
//! count — never a hang.
//!
//! The CA and the certificates are made by `openssl` when the tests run
//! (no key is committed); Redis is looked at from outside with
//! `redis-cli --tls`. Waits are conditions polled against deadlines.

mod common;
mod redis_support;
mod tls_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use redis_support::RedisCluster;
use tls_support::{free_port, Pki};
use tokio_tungstenite::tungstenite::Message;

/// Interval between two polls of a condition.
const POLL: Duration = Duration::from_millis(20);

/// `redis-server` serving TLS only (`--port 0`) on `port`; SIGKILLed on
/// drop.
struct TlsRedis {
    port: u16,
    args: Vec<String>,
    ca: PathBuf,
    child: Option<Child>,
}

impl TlsRedis {
    fn start(pki: &Pki) -> TlsRedis {
        let (cert, key) = pki.localhost();
        let path = |p: &Path| p.display().to_string();
        let port = free_port();
        let mut r = TlsRedis {
            port,
            args: vec![
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                port.to_string(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--tls-cert-file".into(),
                path(&cert),
                "--tls-key-file".into(),
                path(&key),
                "--tls-ca-cert-file".into(),
                path(&pki.ca()),
                "--tls-auth-clients".into(),
                "no".into(),
                "--save".into(),
                "".into(),
                "--appendonly".into(),
                "no".into(),
            ],
            ca: pki.ca(),
            child: None,
        };
        r.spawn_and_wait();
        r
    }

    /// `rediss://localhost:PORT`.
    fn url(&self) -> String {
        format!("rediss://localhost:{}", self.port)
    }

    fn spawn_and_wait(&mut self) {
        let child = Command::new("redis-server")
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + DEADLINE;
        while self.cli(&["PING"]) != "PONG" {
            assert!(
                Instant::now() < deadline,
                "redis-server --tls-port never answered"
            );
            std::thread::sleep(POLL);
        }
    }

    /// `redis-cli --tls` (verifying with the test CA): its output, trimmed.
    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["--tls", "--cacert"])
            .arg(&self.ca)
            .args(["-h", "localhost", "-p", &self.port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until `PUBSUB NUMSUB corecast:{channel}` is `want`.
    fn wait_numsub(&self, channel: &str, want: &str) {
        let key = format!("corecast:{channel}");
        let deadline = Instant::now() + DEADLINE;
        loop {
            let out = self.cli(&["PUBSUB", "NUMSUB", &key]);
            if out.lines().nth(1) == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "NUMSUB {key}: {out:?}, want {want}"
            );
            std::thread::sleep(POLL);
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `/readyz` until it answers `status`.
async fn wait_readyz(addr: SocketAddr, status: u16) -> HttpResponse {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let r = get(addr, "/readyz").await;
        if r.status == status {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {r:?}, want {status}"
        );
        tokio::time::sleep(POLL).await;
    }
}

fn instance(url: &str, ca: &Path) -> TestServer {
    let url = url.parse().expect("a rediss:// URL");
    TestServer::start(|cfg| {
        cfg.redis.url = Some(url);
        cfg.redis.tls_ca = Some(ca.to_path_buf());
        cfg.redis.canary_interval = Duration::from_millis(100);
        cfg.redis.resume_delay = Duration::from_millis(100);
    })
}

/// Publishes `text` on `b` and waits for it on `ws` (a subscriber on
/// another instance).
async fn crosses(b: SocketAddr, ws: &mut Ws, text: &str) {
    let r = post(b, "/publish/news", text.as_bytes()).await;
    assert_eq!(r.status, 200, "publish {text}: {r:?}");
    assert_eq!(next_msg(ws).await, Message::text(text));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_deliver_through_tls_redis_and_survive_its_restart() {
    let pki = Pki::new("deliver");
    let mut redis = TlsRedis::start(&pki);
    let a = instance(&redis.url(), &pki.ca());
    let b = instance(&redis.url(), &pki.ca());
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;

    let mut ws = ws_connect(a.addr, "/ws/news").await;
    redis.wait_numsub("news", "1");
    for i in 0..20 {
        crosses(b.addr, &mut ws, &format!("before:{i}")).await;
    }
    // A large message: several TLS records each way.
    let big = "x".repeat(100_000);
    crosses(b.addr, &mut ws, &big).await;

    redis.kill();
    wait_readyz(a.addr, 503).await;
    redis.spawn_and_wait();
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    redis.wait_numsub("news", "1");
    crosses(b.addr, &mut ws, "after the restart").await;
    let s = stats(a.addr).await;
    assert!(counter(&s, "redis_reconnects") >= 1, "{s}");
    assert_eq!(counter(&s, "redis_tls_failures"), 0, "{s}");
}

/// Runs the binary against `url` with `--redis-tls-ca ca`; waits for the
/// refusal's log line (containing `want`), then checks `/readyz` and the
/// count.
async fn refused(url: &str, ca: &Path, want: &str) {
    let srv = BinServer::spawn(&[
        "--log-level",
        "info",
        "--redis-url",
        url,
        "--redis-tls-ca",
        &ca.display().to_string(),
        "--redis-connect-timeout",
        "1s",
    ]);
    let deadline = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    let line = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let l = srv.logs.recv_timeout(left);
        let l = l.unwrap_or_else(|_| panic!("no refusal naming {want} logged: {seen:#?}"));
        if l.contains("redis") && l.contains(want) {
            break l;
        }
        seen.push(l);
    };
    assert!(line.contains("tls handshake"), "{line}");
    let r = wait_readyz(srv.addr, 503).await;
    assert!(String::from_utf8_lossy(&r.body).contains(want), "{r:?}");
    wait_stat(srv.addr, "redis_tls_failures", |n| n >= 2).await;
    let m = get(srv.addr, "/metrics").await;
    let m = String::from_utf8_lossy(&m.body);
    assert!(m.contains("corecast_redis_tls_failures_total"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused_clearly_and_counted() {
    let pki = Pki::new("right");
    let other = Pki::new("other");
    let redis = TlsRedis::start(&pki);
    refused(&redis.url(), &other.ca(), "UnknownIssuer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused() {
    let pki = Pki::new("name");
    let redis = TlsRedis::start(&pki);
    // The certificate names localhost, not 127.0.0.1.
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    refused(&url, &pki.ca(), "not valid for name").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_redis_behind_a_rediss_url_is_refused_not_waited_for() {
    let pki = Pki::new("plain");
    let port = free_port();
    let plain = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .map(KillOnDrop)
        .expect("redis-server runs");
    let deadline = Instant::now() + DEADLINE;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server never listened");
        std::thread::sleep(POLL);
    }
    let url = format!("rediss://localhost:{port}");
    // Redis reads the ClientHello as the start of an inline command and
    // waits for its end: the handshake's deadline ends the attempt.
    refused(&url, &pki.ca(), "tls handshake timed out").await;
    drop(plain);
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_deliver_through_a_tls_cluster() {
    let pki = Pki::new("cluster");
    // The topology names nodes by address: the certificate says 127.0.0.1.
    let (cert, key) = pki.leaf("node", "DNS:localhost,IP:127.0.0.1");
    let cluster = RedisCluster::start_with(3, 0, Some((cert, key, pki.ca()))).await;
    let seeds: corecast::redis::ClusterSeeds = cluster.tls_seeds().parse().expect("seeds");
    assert!(seeds.url.tls);
    let start = || {
        TestServer::start(|cfg| {
            cfg.redis.cluster = Some(seeds.clone());
            cfg.redis.tls_ca = Some(pki.ca());
            cfg.redis.canary_interval = Duration::from_millis(100);
            cfg.redis.resume_delay = Duration::from_millis(100);
        })
    };
    let (a, b) = (start(), start());
    // Ready means every master reached over TLS: its tls-port, not the
    // plain port the topology also lists.
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut ws = ws_connect(a.addr, "/ws/news").await;
    // Until A's SSUBSCRIBE is in, B's publishes reach no instance.
    wait_until("A's subscription in the cluster", || async {
        let r = post(b.addr, "/publish/news", b"probe").await;
        r.status == 200 && r.json()["instances"] == 1
    })
    .await;
    let r = post(b.addr, "/publish/news", b"fence").await;
    assert_eq!(r.status, 200, "{r:?}");
    while next_msg(&mut ws).await != Message::text("fence") {}
    crosses(b.addr, &mut ws, "through the cluster").await;
    let s = stats(a.addr).await;
    assert_eq!(counter(&s, "redis_tls_failures"), 0, "{s}");
}

/// `--redis-cluster` seeds that mix `redis://` and `rediss://` are a
/// configuration error naming the rule (before, `rediss://h2` was taken
/// for a host name).
#[test]
fn mixed_cluster_seed_schemes_are_a_configuration_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_corecast"))
        .args([
            "check-config",
            "--redis-cluster",
            "redis://127.0.0.1:7000,rediss://127.0.0.1:7001",
        ])
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("mixed redis:// and rediss://"), "{err}");
}
