//! The hooks' test backend (`tests/python/hook_backend.py`, a real HTTP
//! server on a free port) and clients that carry cookies.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use corecast::config::Config;
use futures_util::SinkExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

/// The backend process; killed when dropped.
pub struct Backend {
    child: Child,
    pub port: u16,
}

impl Backend {
    pub fn start() -> Backend {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/hook_backend.py");
        Backend::spawn(Command::new("python3").arg(script))
    }

    /// A backend from Python source that prints `port N` when it listens
    /// (its access log is not shown).
    pub fn from_source(code: &str) -> Backend {
        Backend::spawn(
            Command::new("python3")
                .arg("-c")
                .arg(code)
                .stderr(Stdio::null()),
        )
    }

    fn spawn(cmd: &mut Command) -> Backend {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs (the hooks' test backend needs it)");
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        out.read_line(&mut line).expect("backend output");
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the backend prints its port, got {line:?}"));
        Backend { child, port }
    }

    pub fn url(&self, hook: &str) -> String {
        format!("http://127.0.0.1:{}/{hook}", self.port)
    }

    /// What the backend saw (`GET /seen`).
    pub async fn seen(&self) -> Value {
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        get(addr, "/seen").await.json()
    }

    /// Sets hooks `names` to this backend, with its shared secret.
    pub fn configure(&self, cfg: &mut Config, names: &[&str]) {
        use corecast::hooks::HookKind;
        for kind in HookKind::ALL {
            if names.contains(&kind.name()) {
                cfg.proxy.set_url(kind, &self.url(kind.name())).unwrap();
            }
        }
        cfg.proxy
            .set_static_headers("X-Hook-Secret: s3cret")
            .unwrap();
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A WebSocket client of `path` sending `Cookie: sid={sid}`.
pub async fn ws_with_cookie(addr: SocketAddr, path: &str, sid: &str) -> Ws {
    let mut req = format!("ws://{addr}{path}").into_client_request().unwrap();
    let h = req.headers_mut();
    h.insert("Cookie", format!("theme=dark; sid={sid}").parse().unwrap());
    h.insert("X-Not-Forwarded", "1".parse().unwrap());
    let (ws, resp) = within("WebSocket connect", tokio_tungstenite::connect_async(req))
        .await
        .unwrap_or_else(|e| panic!("connect with sid={sid}: {e}"));
    assert_eq!(resp.status(), 101);
    ws
}

/// A raw upgrade of `/ws` with `Cookie: sid={sid}` (none if empty): the
/// server's answer.
pub async fn upgrade_with_cookie(addr: SocketAddr, sid: &str) -> HttpResponse {
    let cookie = if sid.is_empty() {
        String::new()
    } else {
        format!("Cookie: sid={sid}\r\n")
    };
    let req = format!(
        "GET /ws HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\n{cookie}\r\n"
    );
    http_raw(addr, req.as_bytes()).await
}

/// The counters of hook `name` in `/stats`.
pub fn hook_stats(stats: &Value, name: &str) -> Value {
    stats["proxy"][name].clone()
}

/// A server API request (`/api/...`) with the publish key `key`.
pub async fn server_api(
    addr: SocketAddr,
    key: &str,
    (method, path): (&str, &str),
    body: &Value,
) -> HttpResponse {
    let body = body.to_string();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    http_raw(addr, req.as_bytes()).await
}

/// Sends a JSON request and reads the next JSON frame.
pub async fn call(ws: &mut Ws, request: Value) -> Value {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
    next_json(ws).await
}

/// How many requests the backend saw on `path`.
pub async fn asked(backend: &Backend, path: &str) -> u64 {
    backend.seen().await["requests"][path].as_u64().unwrap_or(0)
}
