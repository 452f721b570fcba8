//! Outbox figures (issue 44) against a running corecast that consumes a
//! PostgreSQL outbox (`scripts/outbox_bench.sh` starts both pinned):
//! throughput (rows per second from COMMIT to every subscriber) and the
//! latency from a row's COMMIT to a subscriber's receipt.
//!
//! ```text
//! cargo run --release --example outbox_bench -- ADDR PG_URL SUBS ROWS SINGLES GAP_MS
//! ```
//! SUBS JSON subscribers of `bench`; then ROWS rows committed in one
//! transaction: rows per second from its COMMIT until the last subscriber
//! has the last one; then SINGLES rows each in
//! a transaction of its own, GAP_MS apart: COMMIT (returned to the
//! writer) to subscriber 0's receipt, p50 / p99 / max.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

type Times = Arc<Mutex<Vec<Option<Instant>>>>;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    let addr: SocketAddr = a[1].parse().expect("ADDR");
    let pg = a[2].clone();
    let n: usize = a[3].parse().expect("SUBS");
    let (rows, singles): (u64, u64) = (a[4].parse().expect("ROWS"), a[5].parse().expect("SINGLES"));
    let gap = Duration::from_millis(a[6].parse().expect("GAP_MS"));
    let total = rows + singles;
    let got = Arc::new(AtomicU64::new(0));
    let last_all = Arc::new(Mutex::new(None::<Instant>));
    let received: Times = Arc::new(Mutex::new(vec![None; total as usize + 1]));
    for s in 0..n {
        let url = format!("ws://{addr}/ws");
        let (mut ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("connect");
        let req = json!({"op":"subscribe","channel":"bench"}).to_string();
        ws.send(Message::text(req)).await.expect("subscribe");
        let first = ws.next().await.expect("reply").expect("frame");
        assert!(
            first.to_text().unwrap_or("").contains("subscribed"),
            "{first:?}"
        );
        let (got, received, last_all) = (got.clone(), received.clone(), last_all.clone());
        tokio::spawn(async move {
            let mut mine = 0u64;
            while let Some(Ok(m)) = ws.next().await {
                let Ok(t) = m.to_text() else { continue };
                if s == 0 {
                    let v: Value = serde_json::from_str(t).expect("json");
                    let data: Value = serde_json::from_str(v["data"].as_str().unwrap_or("{}"))
                        .unwrap_or_default();
                    if let Some(i) = data["i"].as_u64() {
                        received.lock().unwrap()[i as usize] = Some(Instant::now());
                    }
                }
                mine += 1;
                if got.fetch_add(1, Ordering::Relaxed) + 1 == rows * n as u64 {
                    *last_all.lock().unwrap() = Some(Instant::now());
                }
                if mine == total {
                    return;
                }
            }
        });
    }
    let (client, conn) = tokio_postgres::connect(&pg, tokio_postgres::NoTls)
        .await
        .expect("pg");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    // Throughput: ROWS rows committed at once; from that COMMIT to the
    // last subscriber's last row, the consumer taking `batch` at a time.
    let q = format!(
        "INSERT INTO corecast_outbox (channel, data) SELECT 'bench', json_build_object('i', g) FROM generate_series(1, {rows}) g"
    );
    client.batch_execute(&q).await.expect("insert");
    let start = Instant::now();
    while last_all.lock().unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let done = last_all.lock().unwrap().unwrap() - start;
    println!(
        "throughput: {rows} rows to {n} subscribers in {:.2} s: {:.0} rows/s ({:.0} deliveries/s)",
        done.as_secs_f64(),
        rows as f64 / done.as_secs_f64(),
        (rows * n as u64) as f64 / done.as_secs_f64(),
    );
    // Latency: one row per transaction.
    let mut committed = Vec::new();
    for j in 0..singles {
        let i = rows + 1 + j;
        let q = format!(
            "INSERT INTO corecast_outbox (channel, data) VALUES ('bench', '{{\"i\": {i}}}')"
        );
        client.batch_execute(&q).await.expect("insert");
        committed.push((i, Instant::now()));
        tokio::time::sleep(gap).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lat: Vec<f64> = Vec::new();
    while Instant::now() < deadline {
        let all = {
            let r = received.lock().unwrap();
            committed
                .iter()
                .map(|(i, t)| r[*i as usize].map(|at| at.saturating_duration_since(*t)))
                .collect::<Option<Vec<_>>>()
        };
        if let Some(all) = all {
            lat = all.iter().map(|d| d.as_secs_f64() * 1e3).collect();
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lat.len() as u64, singles, "every single row received");
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "latency COMMIT -> receive over {singles} rows: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        q(0.5),
        q(0.99),
        lat[lat.len() - 1]
    );
}
