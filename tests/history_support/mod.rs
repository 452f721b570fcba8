//! The seam test shared by embedded and Redis mode: clients resume while
//! a publisher keeps going, and every client's offsets must run without a
//! gap or a duplicate across the replay and the live messages.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

async fn call(ws: &mut Ws, request: Value) -> Value {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
    next_json(ws).await
}

/// Publishes to `channel` on `addr` at about `rate` messages per second
/// (JSON mode, no echo) until `stop`.
async fn publisher(addr: SocketAddr, channel: String, rate: u64, stop: Arc<AtomicBool>) -> u64 {
    let mut ws = ws_connect(addr, "/ws").await;
    let per_ms = (rate / 1000).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut sent = 0u64;
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        for _ in 0..per_ms {
            let m = json!({"op":"publish","channel":channel,"data":format!("m{sent}")});
            ws.send(Message::text(m.to_string()))
                .await
                .expect("publish");
            sent += 1;
        }
    }
    sent
}

/// Reads `channel` messages until `n` were checked, asserting each offset
/// follows `last`; returns the last offset.
async fn read_in_order(ws: &mut Ws, mut last: u64, n: usize, who: usize) -> u64 {
    for _ in 0..n {
        let m = next_json(ws).await;
        assert_eq!(m["type"], "message", "client {who}: {m}");
        let o = m["offset"].as_u64().expect("offset");
        assert_eq!(o, last + 1, "client {who}: offset {o} after {last}");
        last = o;
    }
    last
}

/// One client: subscribe on `first`, read a few, leave, resume on
/// `second`, and read 200 more across the seam.
async fn client(first: SocketAddr, second: SocketAddr, who: usize) {
    let mut ws = ws_connect(first, "/ws").await;
    let r = call(&mut ws, json!({"op":"subscribe","channel":"seam"})).await;
    let epoch = r["epoch"].as_str().expect("epoch").to_string();
    let start = r["offset"].as_u64().expect("offset");
    let last = read_in_order(&mut ws, start, 3 + who % 7, who).await;
    drop(ws);
    let mut ws = ws_connect(second, "/ws").await;
    let since = json!({"epoch": epoch, "offset": last});
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"seam","since":since}),
    )
    .await;
    assert_eq!(r["recovered"], true, "client {who}: {r}");
    read_in_order(&mut ws, last, 200, who).await;
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
    let stop = Arc::new(AtomicBool::new(false));
    let p = tokio::spawn(publisher(publish_on, "seam".into(), rate, stop.clone()));
    let tasks: Vec<_> = (0..clients)
        .map(|who| tokio::spawn(client(first, second, who)))
        .collect();
    for t in tasks {
        within_for(Duration::from_secs(60), "a resuming client", t)
            .await
            .expect("client task");
    }
    stop.store(true, Ordering::SeqCst);
    let sent = p.await.expect("publisher");
    assert!(sent > 0);
}
