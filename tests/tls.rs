//! TLS on `--listen` (`--tls-cert`, `--tls-key`) against clients that
//! share no code with the server: `curl`, `openssl s_client`, Python's
//! `ssl` + `websockets`, tokio-tungstenite on rustls; SNI between two
//! certificates, SIGHUP reloads of the real binary, and bad input (plain
//! HTTP, garbage, a handshake that stops half way, TLS 1.1). The test CA
//! and certificates are made by `openssl` when the tests run; no key is
//! committed.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use futures_util::SinkExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

/// A test CA in a fresh directory, and leaf certificates it signs.
struct Pki {
    dir: PathBuf,
}

/// The kind of a leaf's key, as its PEM file holds it.
#[derive(Clone, Copy)]
enum Key {
    /// EC P-256, PKCS#8 (`PRIVATE KEY`).
    EcPkcs8,
    /// RSA 2048, PKCS#1 (`RSA PRIVATE KEY`).
    RsaPkcs1,
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .expect("the command runs (openssl/curl installed?)");
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        run(Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec"])
            .args([
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
            ])
            .args(["-subj", "/CN=corecast test CA"])
            .arg("-keyout")
            .arg(dir.join("ca.key"))
            .arg("-out")
            .arg(dir.join("ca.pem")));
        Pki { dir }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A leaf `file`.pem / `file`.key for subject `cn` and `sans`
    /// (`DNS:a.test,IP:127.0.0.1`).
    fn leaf(&self, file: &str, cn: &str, sans: &str, key: Key) -> (PathBuf, PathBuf) {
        let (cert, keyf) = (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        );
        let csr = self.dir.join(format!("{file}.csr"));
        let ext = self.dir.join(format!("{file}.ext"));
        std::fs::write(&ext, format!("subjectAltName={sans}\n")).unwrap();
        match key {
            Key::EcPkcs8 => run(Command::new("openssl")
                .args([
                    "genpkey",
                    "-algorithm",
                    "EC",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                ])
                .arg("-out")
                .arg(&keyf)),
            Key::RsaPkcs1 => run(Command::new("openssl")
                .args(["genrsa", "-traditional", "-out"])
                .arg(&keyf)
                .arg("2048")),
        };
        run(Command::new("openssl")
            .args(["req", "-new", "-key"])
            .arg(&keyf)
            .args(["-subj", &format!("/CN={cn}"), "-out"])
            .arg(&csr));
        run(Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-in"])
            .arg(&csr)
            .arg("-CA")
            .arg(self.ca())
            .arg("-CAkey")
            .arg(self.dir.join("ca.key"))
            .args(["-CAcreateserial", "-extfile"])
            .arg(&ext)
            .arg("-out")
            .arg(&cert));
        (cert, keyf)
    }

    /// The usual leaf: `localhost` and 127.0.0.1.
    fn localhost(&self) -> (PathBuf, PathBuf) {
        self.leaf(
            "localhost",
            "localhost",
            "DNS:localhost,IP:127.0.0.1",
            Key::EcPkcs8,
        )
    }
}

/// A TLS server (plain admin listener for /stats) with `pairs`.
fn tls_server(
    pairs: &[(PathBuf, PathBuf)],
    tweak: impl FnOnce(&mut corecast::Config),
) -> TestServer {
    TestServer::start(|c| {
        c.admin_listen = Some("127.0.0.1:0".parse().unwrap());
        c.tls.certs = pairs.iter().map(|p| p.0.clone()).collect();
        c.tls.keys = pairs.iter().map(|p| p.1.clone()).collect();
        tweak(c);
    })
}

/// `openssl s_client` against `addr` with `args`, sending `input` and
/// waiting for the server to close (`-ign_eof`); its stdout and whether
/// it succeeded.
fn s_client(addr: SocketAddr, args: &[&str], input: &str) -> (String, bool) {
    let mut child = Command::new("timeout")
        .args([
            "10",
            "openssl",
            "s_client",
            "-connect",
            &addr.to_string(),
            "-ign_eof",
        ])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl runs");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (text, out.status.success())
}

const HEALTHZ: &str = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

fn curl(args: &[&str]) -> String {
    let out = run(Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args));
    String::from_utf8(out.stdout).unwrap()
}

/// A tokio-tungstenite client on rustls that trusts only `ca`.
async fn wss_connect(addr: SocketAddr, ca: &Path, path: &str) -> Ws {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let url = format!("wss://localhost:{}{path}", addr.port());
    let connector = tokio_tungstenite::Connector::Rustls(Arc::new(cfg));
    let (ws, resp) = within(
        "wss connect",
        tokio_tungstenite::connect_async_tls_with_config(
            url.as_str(),
            None,
            false,
            Some(connector),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    assert_eq!(resp.status(), 101);
    ws
}

use rustls::pki_types::pem::PemObject;

// ------------------------------------------------------------------ 1 --

/// curl over https: `/healthz` and `POST /publish` reach a wss://
/// subscriber (tokio-tungstenite on rustls), whose own large message
/// comes back whole through many records; the handshakes are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_and_a_rustls_websocket_client_speak_https_and_wss() {
    let pki = Pki::new("curl");
    let srv = tls_server(&[pki.localhost()], |_| {});
    let ca = pki.ca();
    let cacert = ca.to_str().unwrap();
    let base = format!("https://localhost:{}", srv.addr.port());
    assert_eq!(
        curl(&["--cacert", cacert, &format!("{base}/healthz")]),
        "{\"status\":\"ok\"}"
    );
    let mut ws = wss_connect(srv.addr, &ca, "/ws/news").await;
    let answer = tokio::task::spawn_blocking({
        let (cacert, base) = (cacert.to_string(), base.clone());
        move || {
            curl(&[
                "--cacert",
                &cacert,
                "--data",
                "over https",
                &format!("{base}/publish/news"),
            ])
        }
    })
    .await
    .unwrap();
    assert!(answer.contains("\"subscribers\":1"), "{answer}");
    assert_eq!(next_text(&mut ws).await, "over https");
    // 300 KB each way: many TLS records in, several bounded writes out.
    let big: String = (0..300_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    ws.send(Message::Text(big.clone())).await.unwrap();
    assert_eq!(next_text(&mut ws).await, big);
    let admin = srv.admin.unwrap();
    let s = stats(admin).await;
    assert_eq!(counter(&s, "tls_handshakes"), 3, "{s}");
    assert_eq!(counter(&s, "tls_handshake_failures"), 0, "{s}");
    let metrics = String::from_utf8(get(admin, "/metrics").await.body).unwrap();
    assert!(
        metrics.contains("corecast_tls_handshakes_total{result=\"full\"} 3"),
        "{metrics}"
    );
    ws.close(None).await.unwrap();
}

/// Idle TLS WebSockets park with their session kept (rustls's state; no
/// task, no buffer) and run again when something concerns them: a
/// publish reaches every parked subscriber, a parked client's own message
/// is published, and a close from a parked client is answered — all
/// without a new handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tls_connections_park_and_resume_with_their_session() {
    let pki = Pki::new("park");
    let srv = tls_server(&[pki.localhost()], |c| {
        c.park_after = Duration::from_millis(100);
    });
    let (ca, admin) = (pki.ca(), srv.admin.unwrap());
    let mut subs = Vec::new();
    for _ in 0..5 {
        subs.push(wss_connect(srv.addr, &ca, "/ws/quiet").await);
    }
    let all_parked = |n: u64| move |s: &serde_json::Value| counter(s, "parked_connections") == n;
    wait_until_stat(admin, all_parked(5)).await;

    // A publish over https wakes every one of them.
    let base = format!("https://localhost:{}", srv.addr.port());
    let cacert = ca.to_str().unwrap().to_string();
    let answer = tokio::task::spawn_blocking(move || {
        curl(&[
            "--cacert",
            &cacert,
            "--data",
            "wake up",
            &format!("{base}/publish/quiet"),
        ])
    })
    .await
    .unwrap();
    assert!(answer.contains("\"subscribers\":5"), "{answer}");
    for ws in &mut subs {
        assert_eq!(next_text(ws).await, "wake up");
    }

    // Parked again, a client's own message is read and published.
    wait_until_stat(admin, all_parked(5)).await;
    subs[0]
        .send(Message::Text("from a parked one".into()))
        .await
        .unwrap();
    for ws in &mut subs {
        assert_eq!(next_text(ws).await, "from a parked one");
    }

    // Parked again, a close is answered with the close handshake.
    wait_until_stat(admin, all_parked(5)).await;
    let mut ws = subs.pop().unwrap();
    ws.close(None).await.unwrap();
    loop {
        match tokio::time::timeout(
            Duration::from_secs(10),
            futures_util::StreamExt::next(&mut ws),
        )
        .await
        .expect("the close handshake completes")
        {
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("close: {e}"),
        }
    }
    let s = wait_until_stat(admin, |s| counter(s, "websockets_closed") == 1).await;
    assert_eq!(
        counter(&s, "tls_handshakes"),
        6,
        "one per client, one for curl: {s}"
    );
    assert!(counter(&s, "parks") >= 15, "{s}");
}

// ------------------------------------------------------------------ 2 --

/// `openssl s_client`: TLS 1.3 and TLS 1.2 are both negotiated, ALPN
/// picks http/1.1, and a saved session resumes (`Reused`) with each.
#[test]
fn openssl_negotiates_both_versions_alpn_and_resumes() {
    let pki = Pki::new("openssl");
    let srv = tls_server(&[pki.localhost()], |_| {});
    let ca = pki.ca();
    let ca = ca.to_str().unwrap();
    for (flag, name) in [("-tls1_3", "TLSv1.3"), ("-tls1_2", "TLSv1.2")] {
        let sess = pki.dir.join(format!("session{flag}.pem"));
        let sess = sess.to_str().unwrap();
        let common = [
            "-CAfile",
            ca,
            "-servername",
            "localhost",
            "-alpn",
            "http/1.1",
            flag,
        ];
        let (out, ok) = s_client(
            srv.addr,
            &[&common[..], &["-sess_out", sess]].concat(),
            HEALTHZ,
        );
        assert!(ok, "{out}");
        assert!(out.contains(&format!("New, {name}")), "{out}");
        assert!(out.contains("ALPN protocol: http/1.1"), "{out}");
        assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
        assert!(out.contains("{\"status\":\"ok\"}"), "{out}");
        let (out, ok) = s_client(
            srv.addr,
            &[&common[..], &["-sess_in", sess]].concat(),
            HEALTHZ,
        );
        assert!(ok, "{out}");
        assert!(out.contains(&format!("Reused, {name}")), "{out}");
    }
    let s = block_on(stats(srv.admin.unwrap()));
    assert_eq!(counter(&s, "tls_handshakes"), 4, "{s}");
    assert_eq!(counter(&s, "tls_resumed"), 2, "{s}");
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

// ------------------------------------------------------------------ 3 --

/// Python's `ssl` (OpenSSL) with `websockets`: a wss:// client checking
/// the host name against the test CA publishes and gets its messages
/// back, one of 100 KB.
#[test]
fn python_ssl_websockets_client_publishes_and_receives() {
    let pki = Pki::new("python");
    let srv = tls_server(&[pki.localhost()], |_| {});
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python3");
    assert!(
        python.exists(),
        "{} is missing (scripts/test.sh creates it)",
        python.display()
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/tls_client.py");
    let out = run(Command::new("timeout")
        .arg("20")
        .arg(&python)
        .arg(script)
        .arg(srv.addr.to_string())
        .arg(pki.ca())
        .arg("py"));
    let line = String::from_utf8(out.stdout).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["version"], "TLSv1.3", "{v}");
    assert_eq!(v["alpn"], "http/1.1", "{v}");
    assert_eq!(v["first"], "hello over tls", "{v}");
    assert_eq!(v["big_back"], true, "{v}");
}

// ------------------------------------------------------------------ 4 --

/// Two certificates: each SNI name gets the one valid for it (an RSA
/// PKCS#1 key for the second), a name neither covers and no SNI get the
/// first.
#[test]
fn sni_chooses_the_certificate_valid_for_the_name() {
    let pki = Pki::new("sni");
    let a = pki.leaf("a", "a.test", "DNS:a.test,DNS:localhost", Key::EcPkcs8);
    let b = pki.leaf("b", "b.test", "DNS:b.test,DNS:*.b.test", Key::RsaPkcs1);
    let srv = tls_server(&[a, b], |_| {});
    let ca = pki.ca();
    let ca = ca.to_str().unwrap();
    let subject = |sni: Option<&str>| {
        let mut args = vec!["-CAfile", ca];
        if let Some(n) = sni {
            args.extend(["-servername", n, "-verify_hostname", n]);
        } else {
            args.push("-noservername");
        }
        let (out, ok) = s_client(srv.addr, &args, HEALTHZ);
        assert!(ok, "{out}");
        if sni.is_some_and(|n| n != "other.test") {
            assert!(out.contains("Verify return code: 0 (ok)"), "{sni:?}: {out}");
        }
        out.lines()
            .find_map(|l| l.strip_prefix("subject="))
            .unwrap_or_else(|| panic!("no subject: {out}"))
            .to_string()
    };
    assert!(subject(Some("b.test")).ends_with("b.test"));
    assert!(subject(Some("www.b.test")).ends_with("b.test"));
    assert!(subject(Some("a.test")).ends_with("a.test"));
    assert!(subject(Some("other.test")).ends_with("a.test"));
    assert!(subject(None).ends_with("a.test"));
}

// ------------------------------------------------------------------ 5 --

/// Bad input on the TLS port, each a clear close, counted, with the
/// server serving others after it: plain HTTP is answered 400 in plain
/// text; garbage gets an alert; a TLS 1.1-only client is refused; a
/// ClientHello that stops half way is cut at the handshake deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_on_the_tls_port_is_closed_and_counted() {
    let pki = Pki::new("bad");
    let srv = tls_server(&[pki.localhost()], |c| {
        c.handshake_timeout = Duration::from_millis(500);
    });
    let admin = srv.admin.unwrap();
    // Plain HTTP: a plain answer saying what to do.
    let plain = http_raw(srv.addr, HEALTHZ.as_bytes()).await;
    assert_eq!(plain.status, 400, "{plain:?}");
    assert!(
        String::from_utf8_lossy(&plain.body).contains("speaks TLS"),
        "{plain:?}"
    );
    // A garbage ClientHello (a record of one handshake message of type
    // ClientHello whose 4 bytes are no hello): an alert, then the close.
    let junk = [
        0x16, 0x03, 0x01, 0x00, 0x08, 0x01, 0x00, 0x00, 0x04, 0xde, 0xad, 0xbe, 0xef,
    ];
    let answer = send_and_read_to_end(srv.addr, &junk).await;
    assert_eq!(answer.first(), Some(&0x15), "an alert record: {answer:?}");
    // TLS 1.1 only: refused (rustls has no TLS 1.0/1.1 at all).
    let addr = srv.addr;
    let (out, ok) = tokio::task::spawn_blocking(move || {
        s_client(addr, &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"], "")
    })
    .await
    .unwrap();
    assert!(!ok, "TLS 1.1 must fail: {out}");
    assert!(out.contains("Cipher is (NONE)"), "no session: {out}");
    assert!(
        out.contains("alert handshake failure"),
        "refused with an alert: {out}"
    );
    // Half a ClientHello (a record header announcing 512 bytes, 10 sent):
    // cut at the 500 ms handshake deadline.
    let started = Instant::now();
    let half = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03];
    let answer = send_and_read_to_end(srv.addr, &half).await;
    assert!(answer.is_empty(), "{answer:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    let s = wait_stat(admin, "tls_handshake_failures", |n| n == 4).await;
    assert!(counter(&s, "handshake_timeouts") >= 1, "{s}");
    // Others are served all along.
    let ca = pki.ca();
    let mut ws = wss_connect(srv.addr, &ca, "/ws/after").await;
    ws.send(Message::Text("still here".into())).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "still here");
    let s = stats(admin).await;
    assert_eq!(counter(&s, "tls_handshakes"), 1, "{s}");
}

/// Sends `bytes` and reads until the server closes (within the deadline).
async fn send_and_read_to_end(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    within("the server closes", async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    got
}

// ------------------------------------------------------------------ 6 --

/// SIGHUP on the real binary: new handshakes get the new certificate
/// while 1,000 open wss:// connections keep working; a broken new file
/// keeps the certificate in use, and the log says which file and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_certificates_without_dropping_connections() {
    let pki = Pki::new("reload");
    let (cert, key) = pki.leaf("live", "first.localhost", "DNS:localhost", Key::EcPkcs8);
    let admin_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut srv = BinServer::spawn(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--admin-listen",
        &admin_port.to_string(),
        "--log-level",
        "info",
    ]);
    let ca = pki.ca();
    let mut ws = wss_connect(srv.addr, &ca, "/ws/reload").await;
    // 999 more clients, held through both reloads (100 handshakes at a
    // time).
    let mut others = Vec::new();
    for _ in 0..10 {
        let batch = (0..if others.is_empty() { 99 } else { 100 })
            .map(|_| wss_connect(srv.addr, &ca, "/ws/reload"));
        others.extend(futures_util::future::join_all(batch).await);
    }
    assert_eq!(others.len(), 999);
    let subject = |addr: SocketAddr| {
        let ca = ca.to_str().unwrap().to_string();
        let (out, ok) = s_client(addr, &["-CAfile", &ca, "-servername", "localhost"], HEALTHZ);
        assert!(ok, "{out}");
        out.lines()
            .find_map(|l| l.strip_prefix("subject="))
            .unwrap()
            .to_string()
    };
    assert!(subject(srv.addr).ends_with("first.localhost"));
    // A new certificate and key in place of the old files.
    let (next_cert, next_key) =
        pki.leaf("next", "second.localhost", "DNS:localhost", Key::RsaPkcs1);
    std::fs::copy(&next_cert, &cert).unwrap();
    std::fs::copy(&next_key, &key).unwrap();
    hangup(&srv);
    wait_stat(admin_port, "tls_reloads", |n| n == 1).await;
    assert!(subject(srv.addr).ends_with("second.localhost"));
    // The 1,000 connections opened before the reload still work both
    // ways: one's message reaches every one.
    ws.send(Message::Text("before reload".into()))
        .await
        .unwrap();
    assert_eq!(next_text(&mut ws).await, "before reload");
    for other in &mut others {
        assert_eq!(next_text(other).await, "before reload");
    }
    // A broken key file: refused, logged, the second certificate stays.
    std::fs::write(
        &key,
        "-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    hangup(&srv);
    wait_stat(admin_port, "tls_reload_failures", |n| n == 1).await;
    assert!(subject(srv.addr).ends_with("second.localhost"));
    ws.send(Message::Text("after a bad reload".into()))
        .await
        .unwrap();
    assert_eq!(next_text(&mut ws).await, "after a bad reload");
    for other in &mut others {
        assert_eq!(next_text(other).await, "after a bad reload");
    }
    let failed = wait_log(&mut srv, "tls reload failed");
    assert!(failed.contains(key.to_str().unwrap()), "{failed}");
    let s = stats(admin_port).await;
    assert_eq!(counter(&s, "tls_reloads"), 1, "{s}");
}

fn hangup(srv: &BinServer) {
    // SAFETY: kill takes no pointers; the pid is our own live child.
    unsafe {
        libc::kill(srv.child.id() as libc::pid_t, libc::SIGHUP);
    }
}

/// The first log line containing `what` (within the deadline).
fn wait_log(srv: &mut BinServer, what: &str) -> String {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = srv
            .logs
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no log line with {what}"));
        if line.contains(what) {
            return line;
        }
    }
}

// ------------------------------------------------------------------ 7 --

/// A certificate file that is not there, or a key of another
/// certificate: the server does not start, and says which file.
#[test]
fn bad_files_stop_the_start_naming_the_file() {
    let pki = Pki::new("start");
    let (cert, _) = pki.localhost();
    let (_, other_key) = pki.leaf("other", "other", "DNS:other", Key::EcPkcs8);
    let start = |cert: &Path, key: &Path| {
        let mut cfg = corecast::Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        };
        cfg.tls.certs = vec![cert.to_path_buf()];
        cfg.tls.keys = vec![key.to_path_buf()];
        corecast::Server::start(cfg)
            .map(drop)
            .unwrap_err()
            .to_string()
    };
    let missing = pki.dir.join("missing.key");
    let e = start(&cert, &missing);
    assert!(e.contains("missing.key"), "{e}");
    let e = start(&cert, &other_key);
    assert!(e.contains("other.key") && e.contains("key"), "{e}");
}

/// A Server-Sent Events stream over TLS: `curl -N` over https gets the
/// head and the `subscribed` event, then a message published over https,
/// then — at shutdown — the `close` event, through the TLS write half.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_over_https() {
    use std::io::BufRead;
    let pki = Pki::new("sse");
    let srv = tls_server(&[pki.localhost()], |_| {});
    let ca = pki.ca();
    let cacert = ca.to_str().unwrap().to_string();
    let base = format!("https://localhost:{}", srv.addr.port());
    let mut child = Command::new("curl")
        .args(["-N", "-sS", "--cacert", &cacert])
        .arg(format!("{base}/sse?channel=t"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl runs");
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let line = || tokio::task::block_in_place(|| lines.recv_timeout(DEADLINE)).expect("a line");
    assert_eq!(line(), "event: subscribed");
    assert_eq!(line(), r#"data: {"type":"subscribed","channel":"t"}"#);
    assert_eq!(line(), "");
    let answer = tokio::task::spawn_blocking(move || {
        curl(&[
            "--cacert",
            &cacert,
            "--data",
            "over tls",
            &format!("{base}/publish/t"),
        ])
    })
    .await
    .unwrap();
    assert!(answer.contains("\"subscribers\":1"), "{answer}");
    assert_eq!(line(), "event: message");
    assert_eq!(
        line(),
        r#"data: {"type":"message","channel":"t","data":"over tls"}"#
    );
    assert_eq!(line(), "");
    srv.stop();
    assert_eq!(line(), "event: close");
    assert!(line().contains(r#""code":1001"#));
    let _ = child.kill();
    let _ = child.wait();
}

/// Issue 34: the console served over TLS (no --admin-listen: on the
/// public listener) sets its session cookie `Secure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_cookie_is_secure_over_tls() {
    let pki = Pki::new("console");
    let (cert, key) = pki.localhost();
    let srv = TestServer::start(|c| {
        c.tls.certs = vec![cert];
        c.tls.keys = vec![key];
        c.admin_key = Some(corecast::config::Secret::new("console-key-0123456789"));
    });
    let (cacert, url) = (
        pki.ca().to_str().unwrap().to_string(),
        format!("https://localhost:{}/console/login", srv.addr.port()),
    );
    let head = tokio::task::spawn_blocking(move || {
        curl(&[
            "--cacert",
            &cacert,
            "-o",
            "/dev/null",
            "-D",
            "-",
            "--data",
            "key=console-key-0123456789",
            &url,
        ])
    })
    .await
    .unwrap();
    assert!(head.starts_with("HTTP/1.1 303"), "{head}");
    let cookie = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .expect("a cookie");
    assert!(cookie.trim_end().ends_with("; Secure"), "{cookie}");
}
