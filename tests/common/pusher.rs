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
