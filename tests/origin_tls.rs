//! `https://` origins and webhooks: the cache fetches through TLS from a
//! small Python `ssl` HTTPS server, sending the host name as SNI and
//! verifying the certificate against the CA the process trusts
//! (`SSL_CERT_FILE`, read by rustls-native-certs as OpenSSL would); a
//! certificate from another CA is refused with a 502, one log line and a
//! count — never a hang. Pusher webhooks reach the same server over TLS.
//!
//! The binary runs in its own process (its environment names the CA, its
//! stderr is read). The CA and certificates are made by `openssl` when the
//! test runs.

mod common;
mod tls_support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Instant;

use common::*;
use tls_support::Pki;

/// The origin: HTTPS on a free port; prints `port N` once listening,
/// `sni NAME` for every handshake and `post PATH BODY` for every POST;
/// answers every GET with its path.
const ORIGIN: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = ('{"path":"%s"}' % self.path).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "max-age=60")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        print("post", self.path, body.decode(), flush=True)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
def sni(sock, name, c):
    print("sni", name, flush=True)
ctx.sni_callback = sni
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("port", srv.server_address[1], flush=True)
srv.serve_forever()
"#;

struct PyOrigin {
    child: Child,
    /// Its output (`None` once taken by a reader thread).
    out: Option<BufReader<ChildStdout>>,
    port: u16,
}

impl PyOrigin {
    fn start(pki: &Pki) -> PyOrigin {
        let (cert, key) = pki.localhost();
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(ORIGIN)
            .arg(&cert)
            .arg(&key)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let port = next_line(&mut out)
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .expect("the origin prints its port");
        PyOrigin {
            child,
            out: Some(out),
            port,
        }
    }
}

impl Drop for PyOrigin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn next_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("origin output");
    line.trim().to_string()
}

/// corecast caching `https://localhost:PORT`, trusting only `ca`.
fn corecast(origin: &PyOrigin, ca: &Path) -> BinServer {
    corecast_with(
        ca,
        &["--origin", &format!("https://localhost:{}", origin.port)],
    )
}

/// corecast with `args`, trusting only `ca` (`SSL_CERT_FILE`).
fn corecast_with(ca: &Path, args: &[&str]) -> BinServer {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_corecast"));
    cmd.args(["--listen", "127.0.0.1:0", "--log-level", "info"])
        .args(args)
        .env("SSL_CERT_FILE", ca)
        .env_remove("SSL_CERT_DIR");
    BinServer::start(cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_origin_is_fetched_with_sni_and_cached() {
    let pki = Pki::new("origin");
    let mut origin = PyOrigin::start(&pki);
    let srv = corecast(&origin, &pki.ca());
    let r = get(srv.addr, "/api/users/1").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), serde_json::json!({"path": "/users/1"}));
    assert_eq!(
        next_line(origin.out.as_mut().expect("output")),
        "sni localhost"
    );
    // The second is a hit: no new request, no new connection.
    let r = get(srv.addr, "/api/users/1").await;
    assert_eq!(r.status, 200, "{r:?}");
    // Another path reuses the pooled TLS connection.
    let r = get(srv.addr, "/api/users/2").await;
    assert_eq!(r.json(), serde_json::json!({"path": "/users/2"}));
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "cache_origin_requests"), 2, "{s}");
    assert_eq!(counter(&s, "cache_origin_connects"), 1, "{s}");
    assert_eq!(counter(&s, "cache_origin_tls_failures"), 0, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_certificate_from_another_ca_is_refused_and_counted() {
    let pki = Pki::new("origin-right");
    let other = Pki::new("origin-other");
    let origin = PyOrigin::start(&pki);
    let srv = corecast(&origin, &other.ca());
    let r = get(srv.addr, "/api/x").await;
    assert_eq!(r.status, 502, "{r:?}");
    assert_eq!(r.json(), serde_json::json!({"error": "origin unreachable"}));
    let deadline = Instant::now() + DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let l = srv.logs.recv_timeout(left).expect("the refusal is logged");
        if l.contains("origin tls failed") {
            assert!(l.contains("UnknownIssuer"), "{l}");
            break;
        }
    }
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "cache_origin_tls_failures"), 1, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_webhooks_are_posted_to_an_https_url() {
    let pki = Pki::new("webhook");
    let mut origin = PyOrigin::start(&pki);
    let hook = format!("1=https://localhost:{}/hooks", origin.port);
    let srv = corecast_with(
        &pki.ca(),
        &["--pusher-app", "1:key:secret", "--pusher-webhook", &hook],
    );
    let (mut ws, _) = common::pusher::connect(srv.addr, "key").await;
    let ok = common::pusher::subscribe(&mut ws, "news", None, None).await;
    assert_eq!(
        ok["event"], "pusher_internal:subscription_succeeded",
        "{ok}"
    );
    // The origin's output: one SNI line, then the POST (read off the
    // test's thread: a blocking read).
    let lines = tokio::task::spawn_blocking(move || {
        let sni = next_line(origin.out.as_mut().expect("output"));
        (sni, next_line(origin.out.as_mut().expect("output")), origin)
    });
    let (sni, post, _origin) = within("the webhook", lines).await.expect("reader");
    assert_eq!(sni, "sni localhost");
    assert!(post.starts_with("post /hooks "), "{post}");
    assert!(
        post.contains("channel_occupied") && post.contains("news"),
        "{post}"
    );
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "pusher_webhook_failures"), 0, "{s}");
}

/// A named proxy with an `https://` URL that only a namespace uses
/// (`subscribe-proxy=gate`) is called over TLS, verified — with no other
/// `https://` URL configured (before, it was called over plain TCP: its
/// shared-secret header and requests readable, its answers forgeable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_proxy_only_a_namespace_uses_is_called_over_tls() {
    let pki = Pki::new("named-proxy");
    let mut origin = PyOrigin::start(&pki);
    let gate = format!("gate=https://localhost:{}/gate", origin.port);
    let srv = corecast_with(
        &pki.ca(),
        &[
            "--proxy",
            &gate,
            "--proxy-static-headers",
            "X-Hook-Secret: s3cret",
            "--namespace",
            "vip:subscribe-proxy=gate",
        ],
    );
    let mut ws = ws_connect(srv.addr, "/ws").await;
    let req = serde_json::json!({"op":"subscribe","channel":"vip:room","id":1});
    futures_util::SinkExt::send(&mut ws, req.to_string().into())
        .await
        .expect("send");
    // The origin answers the POST with no body: not the proxy's JSON, so
    // the subscribe is refused — after a TLS handshake and the POST.
    let r = next_json(&mut ws).await;
    assert_eq!(r["type"], "error", "{r}");
    // Read off a thread of its own that the test does not wait for: a
    // server called in clear prints nothing, and the test must fail by
    // its deadline, not hang on the read.
    let (tx, rx) = std::sync::mpsc::channel();
    let mut out = origin.out.take().expect("output");
    std::thread::spawn(move || while tx.send(next_line(&mut out)).is_ok() {});
    let line = |what: &str| {
        rx.recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("{what}: nothing from the origin (called in clear?)"))
    };
    let (sni, post) = (line("the handshake"), line("the POST"));
    assert_eq!(sni, "sni localhost", "a TLS handshake first");
    assert!(post.starts_with("post /gate "), "{post}");
    assert!(post.contains("vip:room"), "{post}");
}
