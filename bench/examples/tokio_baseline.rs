//! The comparison server for `corecast-bench`: the same `GET /ws/{channel}`
//! fan-out, written the way a tokio + tungstenite service usually is.
//!
//! - one `current_thread` runtime, so it is comparable with corecast on one
//!   pinned core (`taskset -c 0 target/release/examples/tokio_baseline ADDR`);
//! - one `tokio::sync::broadcast` channel per channel name; every message a
//!   connection sends is published to it, so every subscriber including
//!   the sender receives it;
//! - per connection a reader (the connection's `Stream` half) and a writer
//!   task (the `Sink` half) that drains the broadcast receiver, feeding
//!   what is ready and flushing once per batch.
//!
//! A subscriber that falls more than [`CHANNEL_CAPACITY`] messages behind
//! loses the overwritten ones (`RecvError::Lagged`), the broadcast
//! channel's policy; the generator reports those as lost.
//!
//! Run: `cargo run --release -p corecast-bench --example tokio_baseline -- 127.0.0.1:PORT`.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::Message;

/// Messages a subscriber may fall behind before it loses some.
const CHANNEL_CAPACITY: usize = 4096;

type Channels = Arc<Mutex<HashMap<String, broadcast::Sender<Message>>>>;

fn main() -> io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9001".to_string());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve(&addr))
}

async fn serve(addr: &str) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    eprintln!("tokio_baseline listening on {}", listener.local_addr()?);
    let channels = Channels::default();
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(handle(stream, channels.clone()));
            }
            // Out of descriptors: back off rather than spin.
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Upgrades `GET /ws/{channel}` (404 for anything else) and relays.
// The handshake callback's `Result<Response, ErrorResponse>` is
// tungstenite's signature, not ours to shrink.
#[allow(clippy::result_large_err)]
async fn handle(stream: TcpStream, channels: Channels) {
    let _ = stream.set_nodelay(true);
    let mut channel = None;
    let pick_channel = |req: &Request, resp: Response| match req.uri().path().strip_prefix("/ws/") {
        Some(c) if !c.is_empty() => {
            channel = Some(c.to_string());
            Ok(resp)
        }
        _ => {
            let mut err = ErrorResponse::new(Some("not found".into()));
            *err.status_mut() = StatusCode::NOT_FOUND;
            Err(err)
        }
    };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, pick_channel).await else {
        return;
    };
    let Some(channel) = channel else { return };
    let tx = channels
        .lock()
        .expect("channel map lock")
        .entry(channel)
        .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
        .clone();
    // Subscribe before reading anything, so a client that hears back from
    // us (a pong) is sure to be subscribed.
    let rx = tx.subscribe();
    let (sink, mut incoming) = ws.split();
    let writer = tokio::spawn(relay(rx, sink));
    // Pings are answered by tungstenite while reading; a close is echoed
    // and then the stream ends.
    while let Some(Ok(msg)) = incoming.next().await {
        if msg.is_text() || msg.is_binary() {
            let _ = tx.send(msg);
        }
    }
    writer.abort();
}

/// Writes every broadcast message to one connection, flushing once per
/// batch of ready messages.
async fn relay<S>(mut rx: broadcast::Receiver<Message>, mut sink: S)
where
    S: futures_util::Sink<Message> + Unpin,
{
    loop {
        let first = match rx.recv().await {
            Ok(m) => m,
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        if sink.feed(first).await.is_err() {
            return;
        }
        loop {
            match rx.try_recv() {
                Ok(m) => {
                    if sink.feed(m).await.is_err() {
                        return;
                    }
                }
                Err(TryRecvError::Lagged(_)) => {}
                Err(_) => break,
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
}
