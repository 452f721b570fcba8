//! Python `websockets` (in `.venv`, which scripts/test.sh creates from
//! scripts/requirements.txt) as an independent permessage-deflate peer:
//! it compresses what it publishes (with context takeover) and inflates
//! what corecast sends; `tests/python/deflate_clients.py` does the talking.

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use common::*;

fn python() -> std::path::PathBuf {
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python3");
    assert!(
        venv.exists(),
        "{} is missing: create it with `python3 -m venv .venv && .venv/bin/pip install -r scripts/requirements.txt` (scripts/test.sh does)",
        venv.display()
    );
    venv
}

/// Runs the script against `addr`; its stdout lines arrive on the channel.
fn run_script(addr: std::net::SocketAddr) -> (std::process::Child, mpsc::Receiver<String>) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/deflate_clients.py"
    );
    let mut child = Command::new(python())
        .arg(script)
        .arg(addr.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python starts");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

fn next_line(rx: &mpsc::Receiver<String>) -> serde_json::Value {
    let line = rx
        .recv_timeout(DEADLINE)
        .expect("the python client answers in time (see its stderr above)");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_websockets_compresses_and_inflates_with_corecast() {
    let srv = TestServer::start(|_| {});
    let (mut child, lines) = run_script(srv.addr);
    assert_eq!(next_line(&lines)["ready"], true);
    let ten_kb: String = (0..200)
        .map(|i| format!("{{\"seq\":{i},\"note\":\"browser-like\"}},"))
        .collect::<String>();
    let body = format!("[{}]", ten_kb.trim_end_matches(','));
    assert_eq!(publish(srv.addr, "py", &body).await, 2);
    let result = next_line(&lines);
    let status = child.wait().expect("python exits");
    assert!(status.success(), "python client failed: {status}");
    let ext = result["extensions"].as_str().expect("extension agreed");
    assert!(
        ext.starts_with("permessage-deflate; server_no_context_takeover"),
        "{ext}"
    );
    assert_eq!(result["identical"], true, "{result}");
    assert_eq!(result["http_published"], body.as_str());
    let s = stats(srv.addr).await;
    // The three large messages the publisher compressed (the short one too
    // if websockets compressed it) were inflated by corecast.
    assert!(counter(&s, "compression_inflated_messages") >= 3, "{s}");
    // Each large publish was compressed once for both subscribers.
    assert_eq!(counter(&s, "compression_messages"), 4, "{s}");
    assert_eq!(counter(&s, "protocol_errors"), 0);
}
