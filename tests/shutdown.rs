//! Graceful shutdown (`Server::stop`, as on SIGTERM).

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::Message;

/// Reads a tokio-tungstenite client to its end, which also flushes its
/// reply to the server's close frame.
async fn finish(mut ws: Ws) {
    within("client to finish the close handshake", async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}

/// Every client gets what was queued, then close 1001; once they answer,
/// the worker exits well before the shutdown deadline and the port is shut.
async fn stop_closes_every_client_with_1001_and_the_worker_exits(legacy: bool) {
    let shutdown_timeout = Duration::from_secs(5);
    let srv = TestServer::start_on(legacy, |c| c.shutdown_timeout = shutdown_timeout);
    let addr = srv.addr;
    let mut simple = Vec::new();
    for _ in 0..5 {
        simple.push(ws_connect(addr, "/ws/s").await);
    }
    let mut multi = ws_connect(addr, "/ws").await;
    multi
        .send(Message::text(r#"{"op":"subscribe","channel":"s"}"#))
        .await
        .unwrap();
    assert_eq!(next_json(&mut multi).await["type"], "subscribed");
    let mut raw = RawWs::connect(addr, "/ws/s").await;
    let mut idle_http = HttpConn::connect(addr).await;
    let r = idle_http
        .request(get_request("/healthz", true).as_bytes())
        .await;
    assert_eq!(r.status, 200);
    wait_stat(addr, "subscriptions", |n| n == 7).await;
    assert_eq!(publish(addr, "s", "before stop").await, 7);
    assert!(!srv.is_finished());

    let stopped = Instant::now();
    srv.stop();
    for mut ws in simple {
        assert_eq!(next_text(&mut ws).await, "before stop");
        assert_eq!(expect_close(&mut ws).await, 1001);
        finish(ws).await;
    }
    assert_eq!(next_json(&mut multi).await["data"], "before stop");
    assert_eq!(expect_close(&mut multi).await, 1001);
    finish(multi).await;
    let (frames, ending) = raw.read_until_close().await;
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].payload, b"before stop");
    assert_eq!(ending, Ending::Close(Some(1001)));
    raw.send(0x80 | OP_CLOSE, &close_body(1001, "")).await;
    raw.expect_eof().await;
    // The idle keep-alive connection is simply closed.
    let mut rest = Vec::new();
    let n = within(
        "idle HTTP connection closed",
        idle_http.stream().read_to_end(&mut rest),
    )
    .await
    .unwrap_or(0);
    assert_eq!(n, 0);

    within_for(shutdown_timeout, "worker exit", srv.join())
        .await
        .expect("worker exits cleanly");
    assert!(
        stopped.elapsed() < shutdown_timeout,
        "waited for the deadline although every client answered"
    );
    // Refused, or (io_uring tears the listener down asynchronously, so a
    // connect can still land in its backlog for a moment) reset: never served.
    let late = within(
        "a connection after shutdown to fail",
        try_http_raw(addr, get_request("/healthz", false).as_bytes()),
    )
    .await;
    assert!(late.is_err(), "served after shutdown: {late:?}");
}

/// A client that never answers the close does not hold the server past
/// `shutdown_timeout`; it is cut when the worker exits.
async fn shutdown_deadline_bounds_the_wait_for_silent_clients(legacy: bool) {
    let shutdown_timeout = Duration::from_secs(1);
    let srv = TestServer::start_on(legacy, |c| c.shutdown_timeout = shutdown_timeout);
    let addr = srv.addr;
    let mut mute = RawWs::connect(addr, "/ws/mute").await;
    wait_stat(addr, "subscriptions", |n| n == 1).await;

    let stopped = Instant::now();
    srv.stop();
    let (frames, ending) = mute.read_until_close().await;
    assert!(frames.is_empty());
    assert_eq!(ending, Ending::Close(Some(1001)));
    // We never answer; the worker still exits, bounded by the deadline.
    wait_until("the worker to exit", || async { srv.is_finished() }).await;
    let waited = stopped.elapsed();
    assert!(
        waited >= shutdown_timeout - Duration::from_millis(200),
        "did not wait for the close handshake: {waited:?}"
    );
    assert!(
        waited < shutdown_timeout + Duration::from_secs(2),
        "overran the deadline: {waited:?}"
    );
    srv.join().await.expect("worker exits cleanly");
    mute.expect_eof().await;
}

on_both_drivers!(
    stop_closes_every_client_with_1001_and_the_worker_exits,
    shutdown_deadline_bounds_the_wait_for_silent_clients,
);
