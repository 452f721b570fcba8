//! What a hop between workers adds to a delivery (`--workers 2`): two
//! subscribers, one on each worker, and a publisher, all path-mode
//! WebSockets of one client process; the latency of each message from
//! its send to each subscriber's receipt (one clock: this process's).
//!
//! Connections go to the least loaded worker, ties in turn, so the
//! first three land on workers 0, 1, 0: subscriber `A` and the publisher
//! share worker 0, subscriber `B` is on worker 1. Two channels:
//! - `own`: owned by worker 0 (the publisher's): `A` gets each message
//!   with no hop, `B` after one (owner → worker 1);
//! - `far`: owned by worker 1: the publish crosses to the owner first,
//!   so `B` gets it after one hop and `A` after two (there and back).
//!
//! Run against a fresh `corecast --workers 2 --cpus 0,1` (no other
//! connections, so the placement above holds), once per channel:
//! `cargo run --release -p corecast-bench --example hop_latency -- ADDR own|far [MESSAGES] [RATE]`
//! (default 20,000 messages at 2,000 per second).

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

/// The server's owner of a channel among `n` workers (`server::mesh::owner`:
/// FNV-1a of the name).
fn owner(channel: &str, n: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in channel.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % n
}

/// The first name `{prefix}-{k}` owned by worker `w` of 2.
fn owned_by(prefix: &str, w: u64) -> String {
    (0..)
        .map(|k| format!("{prefix}-{k}"))
        .find(|c| owner(c, 2) == w)
        .expect("some name hashes to each worker")
}

fn quantile(sorted: &[u64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: hop_latency ADDR own|far [MESSAGES] [RATE]";
    let addr = args.next().expect(usage);
    let label = args.next().expect(usage);
    let n: usize = args.next().map_or(20_000, |v| v.parse().expect("MESSAGES"));
    let rate: u64 = args.next().map_or(2_000, |v| v.parse().expect("RATE"));
    let channel = match label.as_str() {
        "own" => owned_by("own", 0),
        "far" => owned_by("far", 1),
        _ => panic!("{usage}"),
    };
    {
        let url = format!("ws://{addr}/ws/{channel}");
        let connect = || async {
            tokio_tungstenite::connect_async(url.as_str())
                .await
                .unwrap()
                .0
        };
        let (a, b, mut p) = (connect().await, connect().await, connect().await);
        // Let the subscriptions reach the channel's owner.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t0 = Instant::now();
        let read = |mut ws: tokio_tungstenite::WebSocketStream<_>| async move {
            let mut lat = Vec::with_capacity(n);
            while lat.len() < n {
                match ws.next().await {
                    Some(Ok(Message::Binary(d))) if d.len() == 8 => {
                        let sent = u64::from_le_bytes(d[..8].try_into().unwrap());
                        lat.push(t0.elapsed().as_nanos() as u64 - sent);
                    }
                    Some(Ok(_)) => {}
                    other => panic!("subscriber ended: {other:?}"),
                }
            }
            lat.sort_unstable();
            lat
        };
        let (ra, rb) = (tokio::spawn(read(a)), tokio::spawn(read(b)));
        let publisher = tokio::spawn(async move {
            let gap = Duration::from_nanos(1_000_000_000 / rate);
            for i in 0..n {
                let due = t0 + gap * i as u32;
                tokio::time::sleep_until(due.into()).await;
                let now = t0.elapsed().as_nanos() as u64;
                p.send(Message::binary(now.to_le_bytes().to_vec()))
                    .await
                    .unwrap();
            }
            // The publisher hears its own messages too: drain them.
            let mut got = 0;
            while got < n {
                match p.next().await {
                    Some(Ok(Message::Binary(_))) => got += 1,
                    Some(Ok(_)) => {}
                    other => panic!("publisher ended: {other:?}"),
                }
            }
        });
        let (la, lb) = (ra.await.unwrap(), rb.await.unwrap());
        publisher.await.unwrap();
        for (who, lat) in [("A (worker 0)", &la), ("B (worker 1)", &lb)] {
            println!(
                "{label} channel {channel}: {who} p50 {:.1} us p99 {:.1} us max {:.1} us ({} messages)",
                quantile(lat, 0.5),
                quantile(lat, 0.99),
                quantile(lat, 1.0),
                lat.len()
            );
        }
    }
}
