//! A JSON subscribe is acknowledged only once Redis confirmed it: a
//! message published right after the acknowledgement is delivered even
//! when the subscriber connection's `SUBSCRIBE` is slow to reach Redis.

mod common;
mod redis_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures_util::SinkExt;
use redis_support::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

/// How long the proxy holds a client → Redis chunk that carries a
/// `SUBSCRIBE` while delaying is on: fault injection (the order at Redis
/// is what the test is about), not synchronisation.
const SUBSCRIBE_DELAY: Duration = Duration::from_millis(400);

/// A TCP proxy in front of Redis that, while `delay` is set, holds every
/// chunk a client sends that contains a `SUBSCRIBE` command. corecast's
/// command connection (PUBLISH) is never delayed, so the subscriber
/// connection loses the race at Redis unless corecast waits for Redis.
async fn delaying_proxy(redis_port: u16, delay: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let upstream = TcpStream::connect(("127.0.0.1", redis_port))
                .await
                .expect("connect redis");
            let (mut cr, mut cw) = client.into_split();
            let (mut ur, mut uw) = upstream.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut ur, &mut cw).await;
            });
            let delay = delay.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let chunk = &buf[..n];
                    let subscribe = chunk
                        .windows(9)
                        .any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"));
                    if subscribe && delay.load(Ordering::SeqCst) {
                        tokio::time::sleep(SUBSCRIBE_DELAY).await;
                    }
                    if uw.write_all(chunk).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_right_after_the_subscribe_ack_is_delivered() {
    let redis = RedisServer::start(&[]).await;
    let delay = Arc::new(AtomicBool::new(false));
    let proxy = delaying_proxy(redis.port, delay.clone()).await;
    let url = format!("redis://127.0.0.1:{proxy}").parse().unwrap();
    let srv = instance(url, |_| {});
    wait_readyz(srv.addr, 200).await;
    delay.store(true, Ordering::SeqCst);
    let mut ws = ws_connect(srv.addr, "/ws").await;
    for round in 0..3 {
        let channel = format!("fresh-{round}");
        let sub = json!({"op":"subscribe","channel":channel,"id":round}).to_string();
        ws.send(Message::text(sub)).await.expect("send");
        assert_eq!(
            next_json(&mut ws).await,
            json!({"type":"subscribed","channel":channel,"id":round})
        );
        // At once: the PUBLISH goes out on the undelayed command connection.
        publish(srv.addr, &channel, "first").await;
        assert_eq!(
            next_json(&mut ws).await,
            json!({"type":"message","channel":channel,"data":"first"}),
            "round {round}: the message published after the ack was lost"
        );
    }
}
