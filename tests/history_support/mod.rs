//! The seam test shared by embedded and Redis mode: clients resume while
//! a publisher sends a fixed number of messages at a steady rate, and
//! every client's offsets must run without a gap or a duplicate across
//! the replay and the live messages. The work is bounded (the publisher
//! stops at its total), so a loaded machine makes the test slower, not
//! larger.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

/// Messages the publisher sends in all.
const TOTAL: u64 = 5_000;

async fn call(ws: &mut Ws, request: Value) -> Value {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
    next_json(ws).await
}

/// Publishes [`TOTAL`] messages to `channel` on `addr` at about `rate`
/// per second (JSON mode, no echo).
async fn publisher(addr: SocketAddr, channel: String, rate: u64) {
    let mut ws = ws_connect(addr, "/ws").await;
    let per_ms = (rate / 1000).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut sent = 0u64;
    while sent < TOTAL {
        tick.tick().await;
        for _ in 0..per_ms.min(TOTAL - sent) {
            let m = json!({"op":"publish","channel":channel,"data":format!("m{sent}")});
            ws.send(Message::text(m.to_string()))
                .await
                .expect("publish");
            sent += 1;
        }
    }
}

/// Reads messages until offset `until`, asserting each offset follows
/// `last`; returns the last offset.
async fn read_in_order(ws: &mut Ws, mut last: u64, until: u64, who: usize) -> u64 {
    while last < until {
        let m = next_json(ws).await;
        assert_eq!(m["type"], "message", "client {who}: {m}");
        let o = m["offset"].as_u64().expect("offset");
        assert_eq!(o, last + 1, "client {who}: offset {o} after {last}");
        last = o;
    }
    last
}

/// One client: subscribe on `first`, read a few, leave, resume on
/// `second`, and read across the seam: the replay, then up to 200 live
/// messages (fewer once the publisher is done).
async fn client(first: SocketAddr, second: SocketAddr, who: usize) {
    let mut ws = ws_connect(first, "/ws").await;
    let r = call(&mut ws, json!({"op":"subscribe","channel":"seam"})).await;
    let epoch = r["epoch"].as_str().expect("epoch").to_string();
    let start = r["offset"].as_u64().expect("offset");
    let first_part = (start + 3 + who as u64 % 7).min(TOTAL);
    let last = read_in_order(&mut ws, start, first_part, who).await;
    drop(ws);
    let mut ws = ws_connect(second, "/ws").await;
    let since = json!({"epoch": epoch, "offset": last});
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"seam","since":since}),
    )
    .await;
    assert_eq!(r["recovered"], true, "client {who}: {r}");
    let top = r["offset"].as_u64().expect("offset");
    read_in_order(&mut ws, last, (top + 200).min(TOTAL), who).await;
}

/// `clients` resume concurrently while a publisher sends at `rate`/s to
/// `publish_on`; each subscribes on `first` and resumes on `second`.
pub async fn seam(
    publish_on: SocketAddr,
    first: SocketAddr,
    second: SocketAddr,
    clients: usize,
    rate: u64,
) {
    let p = tokio::spawn(publisher(publish_on, "seam".into(), rate));
    let tasks: Vec<_> = (0..clients)
        .map(|who| tokio::spawn(client(first, second, who)))
        .collect();
    for t in tasks {
        within_for(Duration::from_secs(60), "a resuming client", t)
            .await
            .expect("client task");
    }
    within_for(Duration::from_secs(60), "the publisher", p)
        .await
        .expect("publisher");
}
