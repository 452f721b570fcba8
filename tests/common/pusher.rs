//! Pusher protocol helpers for the integration tests: a connection's
//! handshake, subscriptions with signatures, and signed HTTP API
//! requests, computed here the way the Pusher SDKs do.

use std::net::SocketAddr;

use corecast::pusher::sign;
use futures_util::SinkExt;
use md5::{Digest, Md5};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use super::*;

/// Sends `v` as a text frame.
pub async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.expect("send");
}

/// An event's `data`, decoded when it is a JSON string.
pub fn data(v: &Value) -> Value {
    match v["data"].as_str() {
        Some(s) => serde_json::from_str(s).unwrap_or(Value::String(s.into())),
        None => v["data"].clone(),
    }
}

/// Connects to `key`'s app; returns the socket and its socket_id.
pub async fn connect(addr: SocketAddr, key: &str) -> (Ws, String) {
    let mut ws = ws_connect(
        addr,
        &format!("/app/{key}?protocol=7&client=js&version=8.6.0"),
    )
    .await;
    let hello = next_json(&mut ws).await;
    assert_eq!(hello["event"], "pusher:connection_established", "{hello}");
    let id = data(&hello)["socket_id"].as_str().unwrap().to_string();
    (ws, id)
}

/// `pusher:subscribe`; returns the answer.
pub async fn subscribe(
    ws: &mut Ws,
    channel: &str,
    auth: Option<String>,
    channel_data: Option<&str>,
) -> Value {
    let d = json!({ "channel": channel, "auth": auth, "channel_data": channel_data });
    send(ws, json!({ "event": "pusher:subscribe", "data": d })).await;
    next_json(ws).await
}

/// `key:HMAC(secret, signed)`, a channel authorization.
pub fn auth(key: &str, secret: &str, signed: &str) -> String {
    format!("{key}:{}", sign::sign(secret, signed))
}

/// A signed API request (what the server SDKs send).
pub fn api_request(
    app: (&str, &str, &str),
    method: &str,
    path_query: (&str, &str),
    body: &[u8],
    ts: u64,
) -> Vec<u8> {
    let (path, extra) = path_query;
    let md5 = sign::hex(&Md5::digest(body));
    let mut q = format!(
        "auth_key={}&auth_timestamp={ts}&auth_version=1.0&body_md5={md5}",
        app.1
    );
    if !extra.is_empty() {
        q = format!("{q}&{extra}");
    }
    let mut pairs = sign::query_pairs(&q);
    pairs.sort();
    let sorted: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let sig = sign::sign(app.2, &format!("{method}\n{path}\n{}", sorted.join("&")));
    let target = format!("{path}?{q}&auth_signature={sig}");
    if method == "GET" {
        return get_request(&target, false).into_bytes();
    }
    post_request(&target, body, false)
}

/// Unix seconds.
pub fn now() -> u64 {
    corecast::auth::unix_now()
}

/// A webhook receiver: answers every request 200 and collects the events
/// (the requests' `events` arrays, in arrival order). While its gate is
/// closed, a request is read (and counted in `requests`) but neither
/// answered nor collected: the server's one request in flight per app
/// waits, and what happens meanwhile waits in the server's queue.
pub struct WebhookReceiver {
    pub port: u16,
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    pub requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    gate: tokio::sync::watch::Sender<bool>,
}

impl WebhookReceiver {
    /// Listens on a free port, its gate `open` or closed.
    pub async fn start(open: bool) -> WebhookReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (gate, _) = tokio::sync::watch::channel(open);
        let r = WebhookReceiver {
            port,
            seen: Default::default(),
            requests: Default::default(),
            gate,
        };
        let (seen, requests, gate) = (r.seen.clone(), r.requests.clone(), r.gate.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let (seen, requests) = (seen.clone(), requests.clone());
                tokio::spawn(serve_hooks(s, seen, requests, gate.subscribe()));
            }
        });
        r
    }

    /// Opens the gate: held requests are answered and collected.
    pub fn open(&self) {
        self.gate.send_replace(true);
    }

    /// The events collected so far named `name`.
    pub fn named(&self, name: &str) -> Vec<Value> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|e| e["name"] == name).cloned().collect()
    }
}

async fn serve_hooks(
    mut s: tokio::net::TcpStream,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    mut gate: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // One request: head, then Content-Length bytes of body.
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n");
        let len = end.map(|end| {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            end + 4 + len
        });
        let Some(total) = len.filter(|&t| buf.len() >= t) else {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if gate.wait_for(|open| *open).await.is_err() {
            return;
        }
        let body_start = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let body: Value = serde_json::from_slice(&buf[body_start..total]).unwrap();
        buf.drain(..total);
        let events = body["events"].as_array().cloned().unwrap_or_default();
        seen.lock().unwrap().extend(events);
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        if s.write_all(ok).await.is_err() {
            return;
        }
    }
}
