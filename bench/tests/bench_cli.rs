//! `corecast-bench` end to end: the built binary against an in-process
//! server on an ephemeral port, its JSON report checked against what was
//! sent.

use std::process::{Command, Output};

use corecast::{Config, Server};
use serde_json::Value;

#[path = "../../tests/tls_support/mod.rs"]
mod tls_support;

/// The `corecast` binary of the same build. It is another package's, so
/// cargo does not name it for us (`CARGO_BIN_EXE_*` covers this package
/// only); `cargo test --workspace` and `cargo build` put it next to ours.
fn corecast_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_corecast-bench")).with_file_name("corecast");
        assert!(
            bin.is_file(),
            "no corecast binary at {}: run `cargo build -p corecast` (or `cargo test --workspace`) first",
            bin.display()
        );
        bin.to_string_lossy().into_owned()
    })
}

fn start_server() -> Server {
    let cfg = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    Server::start(cfg).expect("server starts")
}

fn run_bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_corecast-bench"))
        .args(args)
        .output()
        .expect("corecast-bench runs")
}

/// Runs the generator with `--json --quiet` and parses its report.
fn bench_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--json", "--quiet"]);
    let out = run_bench(&all);
    assert!(
        out.status.success(),
        "corecast-bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON report")
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` missing in {v:#}"))
}

#[test]
fn connect_opens_holds_and_closes_every_connection() {
    let server = start_server();
    let url = format!("ws://{}/ws/idle", server.local_addr());
    // The server runs in this process, so its RSS is ours.
    let pid = std::process::id().to_string();
    let v = bench_json(&[
        "connect",
        "--url",
        &url,
        "-n",
        "50",
        "--hold",
        "200ms",
        "--server-pid",
        &pid,
    ]);
    assert_eq!(u(&v, "requested"), 50);
    assert_eq!(u(&v, "connected"), 50, "{v:#}");
    assert_eq!(u(&v, "failed"), 0);
    assert_eq!(v["failures"], serde_json::json!({}));
    assert_eq!(u(&v, "dropped_during_hold"), 0);
    assert_eq!(u(&v, "closed_clean"), 50);
    assert_eq!(u(&v["handshake"], "count"), 50);
    assert!(u(&v["server"], "rss_connected_kib") > 0);
    server.stop();
    server.join().unwrap();
}

/// Deliveries must add up exactly: no loss, no duplicates, no reordering.
fn assert_exact_delivery(v: &Value, subscribers: u64) {
    let sent = u(v, "sent");
    assert!(sent > 0, "{v:#}");
    assert_eq!(u(v, "publish_rejected"), 0);
    assert_eq!(u(v, "expected"), sent * subscribers, "{v:#}");
    assert_eq!(u(v, "received"), u(v, "expected"), "{v:#}");
    assert_eq!(u(v, "unique"), u(v, "expected"));
    for key in [
        "lost",
        "duplicates",
        "out_of_order",
        "stale",
        "malformed",
        "disconnected",
    ] {
        assert_eq!(u(v, key), 0, "{key} in {v:#}");
    }
    assert!(u(&v["latency_parse"], "count") > 0);
}

#[test]
fn broadcast_over_websocket_delivers_everything_to_everyone() {
    let server = start_server();
    let url = format!("ws://{}/ws/fan", server.local_addr());
    let v = bench_json(&[
        "broadcast",
        "--url",
        &url,
        "-n",
        "6",
        "-p",
        "2",
        "--rate",
        "200",
        "--size",
        "64",
        "--duration",
        "1.5",
        "--warmup",
        "0.5",
    ]);
    assert_exact_delivery(&v, 6);
    // 200 msg/s for 2 s, give or take the schedule's edges.
    let sent = u(&v, "sent");
    assert!((390..=402).contains(&sent), "sent {sent}");
    assert!(v["generator"]["cpu_percent"].as_f64().is_some());
    server.stop();
    server.join().unwrap();
}

#[test]
fn broadcast_over_http_publish_delivers_everything_to_everyone() {
    let server = start_server();
    let url = format!("ws://{}/ws/posted", server.local_addr());
    let v = bench_json(&[
        "broadcast",
        "--url",
        &url,
        "-n",
        "4",
        "-p",
        "2",
        "--rate",
        "100",
        "--duration",
        "1",
        "--warmup",
        "0.5",
        "--via",
        "http",
    ]);
    assert_exact_delivery(&v, 4);
    assert_eq!(v["via"], "http");
    server.stop();
    server.join().unwrap();
}

/// A corecast serving TLS with a leaf of a fresh test CA.
fn start_tls_server(pki: &tls_support::Pki) -> Server {
    let (cert, key) = pki.localhost();
    let mut cfg = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    cfg.tls.certs = vec![cert];
    cfg.tls.keys = vec![key];
    Server::start(cfg).expect("TLS server starts")
}

#[test]
fn broadcast_over_wss_delivers_everything_and_verifies_the_certificate() {
    let pki = tls_support::Pki::new("bench-wss");
    let server = start_tls_server(&pki);
    let url = format!("wss://localhost:{}/ws/sealed", server.local_addr().port());
    let ca = pki.ca();
    let ca = ca.to_str().unwrap();
    let v = bench_json(&[
        "broadcast",
        "--url",
        &url,
        "--tls-ca",
        ca,
        "-n",
        "4",
        "-p",
        "2",
        "--rate",
        "100",
        "--duration",
        "1",
        "--warmup",
        "0.5",
        "--via",
        "http",
    ]);
    assert_exact_delivery(&v, 4);
    assert_eq!(v["urls"][0], url.as_str(), "{v:#}");

    // Held connections close cleanly through TLS too.
    let v = bench_json(&["connect", "--url", &url, "--tls-ca", ca, "-n", "20"]);
    assert_eq!(u(&v, "connected"), 20, "{v:#}");

    // Without the test CA the system's roots refuse the certificate: every
    // connection fails, counted under the TLS cause.
    let out = run_bench(&["connect", "--url", &url, "-n", "3", "--json", "--quiet"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tls: "), "{text}");
    // --tls-insecure takes it anyway (a benchmark's self-signed server).
    let v = bench_json(&["connect", "--url", &url, "--tls-insecure", "-n", "3"]);
    assert_eq!(u(&v, "connected"), 3, "{v:#}");
    server.stop();
    server.join().unwrap();
}

#[test]
fn broadcast_over_wss_refuses_publishing_on_subscriber_sockets() {
    let out = run_bench(&[
        "broadcast",
        "--url",
        "wss://localhost:1/ws/x",
        "-n",
        "2",
        "-p",
        "1",
        "--rate",
        "1",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--via http"), "{err}");
}

#[test]
fn an_unreachable_target_is_one_clear_error() {
    // A port that was free a moment ago and has no listener now.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("ws://127.0.0.1:{port}/ws/x");
    let out = run_bench(&["connect", "--url", &url, "-n", "3", "--json"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach 127.0.0.1"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_arguments_print_usage() {
    let out = run_bench(&["broadcast", "-n", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("USAGE"));
}

#[test]
fn http_load_counts_every_answer() {
    let server = start_server();
    let url = format!("http://{}/healthz", server.local_addr());
    let v = bench_json(&[
        "http",
        "--url",
        &url,
        "-c",
        "4",
        "--duration",
        "1",
        "--warmup",
        "200ms",
    ]);
    assert_eq!(v["command"], "http");
    let requests = u(&v, "requests");
    assert!(requests > 0, "{v}");
    assert_eq!(v["statuses"]["200"].as_u64(), Some(requests), "{v}");
    assert_eq!(u(&v, "errors"), 0, "{v}");
    assert_eq!(u(&v["latency"], "count"), requests, "{v}");
    server.stop();
    server.join().unwrap();
}

#[test]
fn http_load_speaks_https_and_verifies_the_certificate() {
    let pki = tls_support::Pki::new("bench-https");
    let server = start_tls_server(&pki);
    let url = format!("https://localhost:{}/healthz", server.local_addr().port());
    let ca = pki.ca();
    let ca = ca.to_str().unwrap();
    let args = |extra: &[&'static str]| {
        let mut a = vec!["http", "--url", &url, "-c", "3", "--duration", "1"];
        a.extend(["--warmup", "200ms"]);
        a.extend(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let with_ca: Vec<String> = args(&[])
        .into_iter()
        .chain(["--tls-ca".into(), ca.into()])
        .collect();
    let v = bench_json(&with_ca.iter().map(String::as_str).collect::<Vec<_>>());
    let requests = u(&v, "requests");
    assert!(requests > 0, "{v}");
    assert_eq!(v["statuses"]["200"].as_u64(), Some(requests), "{v}");
    assert_eq!(u(&v, "errors"), 0, "{v}");

    // The system's roots do not know the test CA: every attempt is an
    // error, no request is answered.
    let mut plain_roots = args(&[]);
    plain_roots.extend(["--json".into(), "--quiet".into()]);
    let out = run_bench(&plain_roots.iter().map(String::as_str).collect::<Vec<_>>());
    let v: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert_eq!(u(&v, "requests"), 0, "{v}");
    assert!(u(&v, "errors") > 0, "{v}");
    // --tls-insecure takes the certificate anyway.
    let insecure = args(&["--tls-insecure"]);
    let v = bench_json(&insecure.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        v["statuses"]["200"].as_u64(),
        Some(u(&v, "requests")),
        "{v}"
    );
    assert!(u(&v, "requests") > 0, "{v}");
    server.stop();
    server.join().unwrap();
}

#[test]
fn paced_http_load_keeps_to_its_rate() {
    let server = start_server();
    let url = format!("http://{}/healthz", server.local_addr());
    let v = bench_json(&[
        "http",
        "--url",
        &url,
        "-c",
        "4",
        "--rate",
        "100",
        "--duration",
        "1",
        "--warmup",
        "0",
    ]);
    // 100 requests/s for 1 s, spread over 4 connections: 25 each, never a
    // catch-up burst; a few may fall behind on a loaded machine.
    let requests = u(&v, "requests");
    assert!((85..=104).contains(&requests), "{v}");
    assert_eq!(v["statuses"]["200"].as_u64(), Some(requests), "{v}");
    server.stop();
    server.join().unwrap();
}

#[test]
fn paper_runs_the_matrix_and_writes_the_report() {
    let out = std::env::temp_dir().join(format!("corecast-paper-test-{}", std::process::id()));
    let out_s = out.to_str().unwrap();
    let v = bench_json(&[
        "paper",
        "--out",
        out_s,
        "--server-bin",
        corecast_bin(),
        "--scales",
        "20,40",
        "--duration",
        "1",
        "--warmup",
        "500ms",
        "--deliveries",
        "2000",
        "--api-duration",
        "1",
        "--api-rate",
        "100",
    ]);
    let cells = v["cells"].as_array().expect("cells");
    let shape: Vec<(String, u64, u64)> = cells
        .iter()
        .map(|c| {
            (
                c["setup"].as_str().unwrap().to_string(),
                u(c, "clients"),
                u(c, "instances"),
            )
        })
        .collect();
    let want: Vec<(String, u64, u64)> = [("C1", 1), ("C2", 2), ("C3", 2)]
        .iter()
        .flat_map(|(s, i)| [20, 40].map(|n| (s.to_string(), n, *i)))
        .collect();
    assert_eq!(shape, want);
    for c in cells {
        // Every message reached every client of every instance, once.
        assert!(u(c, "sent") > 0, "{c}");
        assert_eq!(u(c, "expected"), u(c, "sent") * u(c, "clients"), "{c}");
        assert_eq!(u(c, "unique"), u(c, "expected"), "{c}");
        for zero in ["lost", "duplicates", "out_of_order", "disconnected"] {
            assert_eq!(u(c, zero), 0, "{zero}: {c}");
        }
        assert!(c["latency"]["percentiles"].as_array().unwrap().len() > 10);
        let api = &c["api_load"];
        if c["setup"] == "C3" {
            // Hits on one key: at most the first request reached the origin.
            assert!(u(api, "requests_total") > 0, "{api}");
            assert_eq!(u(api, "failed"), 0, "{api}");
            assert!(u(api, "origin_requests") <= 1, "{api}");
        } else {
            assert!(api.is_null(), "{c}");
        }
    }
    let api = &v["api"];
    for phase in ["direct", "miss"] {
        // Straight to the origin, and every miss: one origin request each.
        let p = &api[phase];
        assert_eq!(u(p, "origin_requests"), u(p, "requests_total"), "{p}");
        assert_eq!(u(p, "failed"), 0, "{p}");
    }
    assert_eq!(u(&api["hit"], "origin_requests"), 0, "{api}");
    assert!(api["hit_faster_percent"].as_f64().unwrap() > 50.0, "{api}");

    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
    let md = read("report.md");
    assert!(md.contains("| connections held | 335 of 500 |"), "{md}");
    assert!(md.contains("23.78 ms") && md.contains("42.05 ms"), "{md}");
    for svg in [
        "latency-distribution-20.svg",
        "latency-distribution-40.svg",
        "latency-vs-clients.svg",
    ] {
        assert!(read(svg).starts_with("<svg"), "{svg}");
        assert!(md.contains(&format!("]({svg})")), "{svg} linked");
    }
    let json: Value = serde_json::from_str(&read("paper.json")).unwrap();
    assert_eq!(json["cells"], v["cells"]);
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn paper_tls_runs_the_matrix_encrypted() {
    let out = std::env::temp_dir().join(format!("corecast-paper-tls-{}", std::process::id()));
    let out_s = out.to_str().unwrap();
    let v = bench_json(&[
        "paper",
        "--tls",
        "--out",
        out_s,
        "--server-bin",
        corecast_bin(),
        "--configs",
        "c1,c3",
        "--scales",
        "20",
        "--duration",
        "1",
        "--warmup",
        "500ms",
        "--deliveries",
        "2000",
        "--api-duration",
        "1",
        "--api-rate",
        "100",
    ]);
    assert_eq!(v["params"]["tls"], true, "{v:#}");
    let cells = v["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2, "{v:#}");
    for c in cells {
        assert!(u(c, "sent") > 0, "{c}");
        assert_eq!(u(c, "unique"), u(c, "sent") * u(c, "clients"), "{c}");
        for zero in ["lost", "duplicates", "disconnected"] {
            assert_eq!(u(c, zero), 0, "{zero}: {c}");
        }
    }
    let c3 = &cells[1]["api_load"];
    assert!(u(c3, "requests_total") > 0 && u(c3, "failed") == 0, "{c3}");
    for phase in ["miss", "hit"] {
        let p = &v["api"][phase];
        assert!(u(p, "requests_total") > 0 && u(p, "failed") == 0, "{p}");
    }
    // Every corecast of the run served TLS (its start line says so).
    let logs: Vec<String> = std::fs::read_dir(out.join("logs"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .filter(|t| t.contains("corecast listening"))
        .collect();
    assert!(logs.len() >= 4, "C1, C3 x2, the cache comparison's");
    assert!(logs.iter().all(|t| t.contains("tls=true")), "{logs:?}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("over TLS"), "{md}");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn paper_without_redis_is_one_clear_error() {
    let out = std::env::temp_dir().join(format!("corecast-paper-noredis-{}", std::process::id()));
    let o = run_bench(&[
        "paper",
        "--out",
        out.to_str().unwrap(),
        "--server-bin",
        corecast_bin(),
        "--configs",
        "c2",
        "--scales",
        "20",
        "--redis-bin",
        "/nonexistent/redis-server",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not found") && err.contains("need Redis"),
        "{err}"
    );
    let o = run_bench(&["paper", "--server-bin", "/nonexistent/corecast"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("no corecast binary"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Children of process `pid` (from /proc).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state, ppid, ...
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        if after.split_whitespace().nth(1) == Some(&pid.to_string()) {
            out.push(child);
        }
    }
    out
}

#[test]
fn a_killed_paper_run_leaves_no_server_or_redis_behind() {
    use std::time::{Duration, Instant};
    let out = std::env::temp_dir().join(format!("corecast-paper-kill-{}", std::process::id()));
    let mut paper = Command::new(env!("CARGO_BIN_EXE_corecast-bench"))
        .args(["paper", "--quiet", "--out", out.to_str().unwrap()])
        .args(["--server-bin", corecast_bin()])
        .args(["--configs", "c2", "--scales", "20", "--duration", "60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Redis, two corecast instances and the load generator.
    let deadline = Instant::now() + Duration::from_secs(20);
    let kids = loop {
        let kids = children_of(paper.id());
        if kids.len() >= 4 {
            break kids;
        }
        assert!(Instant::now() < deadline, "paper started {kids:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    paper.kill().unwrap(); // SIGKILL: no destructor runs
    paper.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive: Vec<u32> = kids
            .iter()
            .copied()
            .filter(|k| {
                std::fs::read_to_string(format!("/proc/{k}/stat")).is_ok_and(|s| {
                    !s.rsplit_once(')')
                        .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
                })
            })
            .collect();
        if alive.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still running: {alive:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn an_oversized_response_is_an_error_not_an_allocation() {
    use std::io::{Read, Write};
    // A server that claims a terabyte body and streams it: the generator
    // must refuse it at the head (one error per connection, reconnecting)
    // instead of buffering it until its response timeout.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n");
                let chunk = [0u8; 64 * 1024];
                while s.write_all(&chunk).is_ok() {}
            });
        }
    });
    let url = format!("http://{addr}/big");
    let v = bench_json(&[
        "http",
        "--url",
        &url,
        "-c",
        "1",
        "--duration",
        "300ms",
        "--warmup",
        "0",
    ]);
    assert_eq!(u(&v, "requests"), 0, "{v}");
    // Refused at once, so many times in the window (buffering would take
    // the 10 s response timeout for the first error).
    assert!(u(&v, "errors") >= 2, "{v}");
}

#[test]
fn a_node_baseline_without_node_is_one_clear_error() {
    let out = std::env::temp_dir().join(format!("corecast-paper-nonode-{}", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_corecast-bench"))
        .args(["paper", "--out", out.to_str().unwrap()])
        .args(["--server-bin", corecast_bin(), "--configs", "c1"])
        .args(["--scales", "20", "--baseline", "node"])
        .env("PATH", "/nonexistent")
        .output()
        .expect("run corecast-bench");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("needs Node.js"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `--baseline node` runs the reference architecture (bench/reference-node)
/// in every cell right after corecast, and the report has both.
#[test]
fn paper_measures_the_node_reference_beside_corecast() {
    let out = std::env::temp_dir().join(format!("corecast-paper-node-{}", std::process::id()));
    let o = run_bench(&[
        "paper",
        "--out",
        out.to_str().unwrap(),
        "--server-bin",
        corecast_bin(),
        "--configs",
        "c1,c2",
        "--scales",
        "20",
        "--deliveries",
        "2000",
        "--duration",
        "1",
        "--warmup",
        "1",
        "--baseline",
        "node",
        "--json",
        "--quiet",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&o.stdout).expect("paper JSON");
    let cells = v["cells"].as_array().unwrap();
    let servers: Vec<(&str, &str)> = cells
        .iter()
        .map(|c| (c["server"].as_str().unwrap(), c["setup"].as_str().unwrap()))
        .collect();
    assert_eq!(
        servers,
        [
            ("corecast", "C1"),
            ("node", "C1"),
            ("corecast", "C2"),
            ("node", "C2")
        ]
    );
    for c in cells {
        assert_eq!(u(c, "lost"), 0, "{c}");
        assert!(u(c, "unique") > 0, "{c}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("node, measured here"), "{md}");
    std::fs::remove_dir_all(&out).unwrap();
}

/// `--deflate` offers permessage-deflate and inflates what comes
/// compressed: every message arrives (its stamp readable), and the server
/// compressed them (`--json-payload` pads with JSON that deflates).
#[test]
fn broadcast_with_deflate_inflates_every_message() {
    let server = start_server();
    let addr = server.local_addr();
    let url = format!("ws://{addr}/ws/z");
    let v = bench_json(&[
        "broadcast",
        "--url",
        &url,
        "-n",
        "4",
        "-p",
        "1",
        "--rate",
        "100",
        "--size",
        "2048",
        "--duration",
        "1",
        "--warmup",
        "0.5",
        "--deflate",
        "--json-payload",
    ]);
    assert_exact_delivery(&v, 4);
    let stats = corecast_stats(addr);
    assert!(
        stats["compression_messages"].as_u64().unwrap() > 0,
        "{stats}"
    );
    let (bin, bout) = (
        stats["compression_bytes_in"].as_u64().unwrap(),
        stats["compression_bytes_out"].as_u64().unwrap(),
    );
    assert!(bout * 2 < bin, "JSON padding deflates: {bin} -> {bout}");
    server.stop();
    server.join().unwrap();
}

/// `--via pusher`: subscribers speak the Pusher protocol on `/app/{key}`
/// and publishers trigger through the signed HTTP API; every event
/// arrives, and the server counted the API's events.
#[test]
fn broadcast_via_pusher_delivers_everything_to_everyone() {
    let mut cfg = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    cfg.pusher
        .apps
        .push(corecast::pusher::config::parse_app("4:bench-key:bench-secret").unwrap());
    let server = Server::start(cfg).expect("server starts");
    let addr = server.local_addr();
    let url = format!("ws://{addr}/ws/ticker");
    let v = bench_json(&[
        "broadcast",
        "--url",
        &url,
        "-n",
        "6",
        "-p",
        "2",
        "--rate",
        "100",
        "--duration",
        "1",
        "--warmup",
        "0.5",
        "--via",
        "pusher",
        "--pusher-app",
        "4:bench-key:bench-secret",
        "--json-payload",
    ]);
    assert_exact_delivery(&v, 6);
    assert_eq!(v["via"], "pusher");
    let stats = corecast_stats(addr);
    let sent = u(&v, "sent");
    assert_eq!(stats["pusher_api_events"].as_u64(), Some(sent), "{stats}");
    server.stop();
    server.join().unwrap();
}

fn corecast_stats(addr: std::net::SocketAddr) -> Value {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let body = resp.split("\r\n\r\n").nth(1).unwrap();
    serde_json::from_str(body).unwrap()
}
