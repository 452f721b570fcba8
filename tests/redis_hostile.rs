//! A hostile "Redis": what is at `--redis-url` must not be able to crash
//! the server or reach WebSocket clients with what they cannot take.
//!
//! The peer is a small pub/sub server written here (SUBSCRIBE, PUBLISH
//! fanned out to subscribed connections, the canary included, so corecast
//! becomes ready through it) that can also write arbitrary bytes to every
//! subscriber connection: 100,000 nested arrays (which overflowed the
//! worker's stack before, issue 12 item 4), a bulk string over
//! `--redis-max-reply-size`, a message over `--max-message-size`, and a
//! text envelope that is not UTF-8. After each, the server is alive, the
//! same WebSocket subscriber still receives what is published after, and
//! the counters moved.

mod common;
mod redis_support;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use common::*;
use redis_support::{instance, readyz, wait_readyz, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// One connection's outbound queue and its subscriptions.
struct Peer {
    out: mpsc::UnboundedSender<Vec<u8>>,
    channels: HashSet<Vec<u8>>,
}

/// The fake Redis: every connection it has accepted.
#[derive(Clone, Default)]
struct FakeRedis {
    peers: Arc<Mutex<Vec<Peer>>>,
}

impl FakeRedis {
    async fn start() -> (FakeRedis, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let fake = FakeRedis::default();
        let f = fake.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(f.clone().serve(stream));
            }
        });
        (fake, port)
    }

    /// Writes `bytes` to every connection subscribed to anything.
    fn inject(&self, bytes: &[u8]) {
        for p in self.peers.lock().unwrap().iter() {
            if !p.channels.is_empty() {
                let _ = p.out.send(bytes.to_vec());
            }
        }
    }

    /// Whether some connection is subscribed to `channel`.
    fn subscribed(&self, channel: &str) -> bool {
        let peers = self.peers.lock().unwrap();
        peers
            .iter()
            .any(|p| !p.out.is_closed() && p.channels.contains(channel.as_bytes()))
    }

    async fn serve(self, stream: TcpStream) {
        let (mut rd, mut wr) = stream.into_split();
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let me = {
            let mut peers = self.peers.lock().unwrap();
            peers.push(Peer {
                out: tx.clone(),
                channels: HashSet::new(),
            });
            peers.len() - 1
        };
        tokio::spawn(async move {
            while let Some(b) = rx.recv().await {
                if wr.write_all(&b).await.is_err() {
                    return;
                }
            }
        });
        let mut buf = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        loop {
            while let Some((args, used)) = parse_command(&buf) {
                buf.drain(..used);
                self.execute(me, &tx, &args);
            }
            match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        self.peers.lock().unwrap()[me].channels.clear();
    }

    fn execute(&self, me: usize, tx: &mpsc::UnboundedSender<Vec<u8>>, args: &[Vec<u8>]) {
        let verb = args[0].to_ascii_uppercase();
        let mut peers = self.peers.lock().unwrap();
        match &verb[..] {
            b"SUBSCRIBE" | b"UNSUBSCRIBE" => {
                let gained = verb == b"SUBSCRIBE";
                for ch in &args[1..] {
                    let set = &mut peers[me].channels;
                    if gained {
                        set.insert(ch.clone());
                    } else {
                        set.remove(ch);
                    }
                    let kind = if gained { "subscribe" } else { "unsubscribe" };
                    let mut r = format!("*3\r\n${}\r\n{kind}\r\n", kind.len()).into_bytes();
                    r.extend_from_slice(format!("${}\r\n", ch.len()).as_bytes());
                    r.extend_from_slice(ch);
                    r.extend_from_slice(format!("\r\n:{}\r\n", set.len()).as_bytes());
                    let _ = tx.send(r);
                }
            }
            b"PUBLISH" => {
                let mut n = 0;
                for p in peers.iter().filter(|p| p.channels.contains(&args[1])) {
                    let _ = p.out.send(array(&[b"message", &args[1], &args[2]]));
                    n += 1;
                }
                let _ = tx.send(format!(":{n}\r\n").into_bytes());
            }
            b"PING" => {
                let _ = tx.send(b"+PONG\r\n".to_vec());
            }
            _ => {
                let _ = tx.send(b"+OK\r\n".to_vec());
            }
        }
    }
}

/// A RESP array of bulk strings.
fn array(items: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for i in items {
        out.extend_from_slice(format!("${}\r\n", i.len()).as_bytes());
        out.extend_from_slice(i);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One complete command (an array of bulk strings) from the front of
/// `buf`, and its length; `None` = need more.
fn parse_command(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    fn line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
        let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let n = std::str::from_utf8(&buf[at + 1..end]).ok()?.parse().ok()?;
        Some((n, end + 2))
    }
    assert_eq!(buf.first().copied().unwrap_or(b'*'), b'*', "not a command");
    let (count, mut at) = line(buf, 0)?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, start) = line(buf, at)?;
        let end = start + len;
        if buf.len() < end + 2 {
            return None;
        }
        args.push(buf[start..end].to_vec());
        at = end + 2;
    }
    Some((args, at))
}

/// A corecast envelope (`0xCC 0x01 opcode instance sender payload`).
fn envelope(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut e = vec![0xCC, 0x01, opcode];
    e.extend_from_slice(&7u64.to_be_bytes());
    e.extend_from_slice(&9u64.to_be_bytes());
    e.extend_from_slice(payload);
    e
}

/// A ready server on a fresh fake Redis, with one WebSocket subscriber of
/// `news` that has received a first message through the fake.
async fn setup(tweak: impl FnOnce(&mut corecast::config::Config)) -> (FakeRedis, TestServer, Ws) {
    one_worker_per_server("the fake Redis serves one instance's connections");
    let (fake, port) = FakeRedis::start().await;
    let url = format!("redis://127.0.0.1:{port}").parse().expect("url");
    let server = instance(url, tweak);
    wait_readyz(server.addr, 200).await;
    let mut ws = ws_connect(server.addr, "/ws/news").await;
    wait_until("the subscription reaches the fake Redis", || async {
        fake.subscribed("corecast:news")
    })
    .await;
    publish(server.addr, "news", "before").await;
    assert_eq!(next_text(&mut ws).await, "before");
    (fake, server, ws)
}

/// The server survived: health answers, the connection is back (ready),
/// and the same subscriber receives a fresh publish as its next message
/// (so nothing rejected reached it in between).
async fn still_serving(addr: SocketAddr, fake: &FakeRedis, ws: &mut Ws) {
    assert_eq!(get(addr, "/healthz").await.status, 200);
    wait_readyz(addr, 200).await;
    wait_until("the subscription is restored", || async {
        fake.subscribed("corecast:news")
    })
    .await;
    publish(addr, "news", "after").await;
    assert_eq!(next_text(ws).await, "after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_reply_drops_the_link_not_the_process() {
    let (fake, server, mut ws) = setup(|_| {}).await;
    fake.inject(&b"*1\r\n".repeat(100_000));
    wait_stat(server.addr, "redis_protocol_errors", |n| n >= 1).await;
    assert!(!server.is_finished(), "the worker survived");
    still_serving(server.addr, &fake, &mut ws).await;
    let metrics = get(server.addr, "/metrics").await;
    assert!(
        String::from_utf8_lossy(&metrics.body).contains("corecast_redis_protocol_errors_total 1"),
        "{}",
        String::from_utf8_lossy(&metrics.body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_over_the_size_limit_drops_the_link_before_it_is_buffered() {
    let (fake, server, mut ws) = setup(|c| c.redis.max_reply_size = 64 * 1024).await;
    // Declared larger than the limit: refused at its header.
    fake.inject(b"$100000\r\n");
    wait_stat(server.addr, "redis_protocol_errors", |n| n >= 1).await;
    still_serving(server.addr, &fake, &mut ws).await;
    // A simple string that never ends: refused once the buffer is full.
    let mut endless = b"+".to_vec();
    endless.extend_from_slice(&[b'x'; 200 * 1024]);
    fake.inject(&endless);
    wait_stat(server.addr, "redis_protocol_errors", |n| n >= 2).await;
    still_serving(server.addr, &fake, &mut ws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_invalid_utf8_messages_are_dropped_and_counted() {
    let (fake, server, mut ws) = setup(|c| c.ws.max_message_size = 1024).await;
    let big = envelope(2, &[0u8; 2048]);
    fake.inject(&array(&[b"message", b"corecast:news", &big]));
    let plain_big = vec![b'a'; 2048];
    fake.inject(&array(&[b"message", b"corecast:news", &plain_big]));
    let bad_text = envelope(1, b"ok \xff\xfe");
    fake.inject(&array(&[b"message", b"corecast:news", &bad_text]));
    wait_stat(server.addr, "redis_messages_dropped", |n| n >= 3).await;
    // Dropped messages are not protocol errors: the link stayed up.
    let s = stats(server.addr).await;
    assert_eq!(counter(&s, "redis_protocol_errors"), 0, "{s}");
    // The subscriber was not closed (1007/1009) and gets the next one.
    still_serving(server.addr, &fake, &mut ws).await;
    let metrics = get(server.addr, "/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains("corecast_redis_messages_dropped_total 3"),
        "{text}"
    );
}

/// Redis by host name: resolved off the worker (a slow or failing DNS
/// server must not stop the connections it serves). `localhost` works; a
/// name that does not resolve leaves the instance serving WebSockets,
/// not ready, with the reason in `/readyz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_by_host_name_resolves_off_the_worker() {
    let redis = RedisServer::start(&[]).await;
    let url = format!("redis://localhost:{}", redis.port).parse().unwrap();
    let srv = instance(url, |_| {});
    wait_readyz(srv.addr, 200).await;
    let mut ws = ws_connect(srv.addr, "/ws/named").await;
    publish(srv.addr, "named", "via localhost").await;
    assert_eq!(next_text(&mut ws).await, "via localhost");

    let url = "redis://no-such-host.invalid:6379".parse().unwrap();
    let srv = instance(url, |_| {});
    let mut ws = ws_connect(srv.addr, "/ws/live").await;
    wait_until("/readyz names the lookup failure", || async {
        let (status, body) = readyz(srv.addr).await.expect("/readyz answers");
        status == 503 && body.to_string().contains("no-such-host.invalid")
    })
    .await;
    // Not ready, but serving: health, upgrades, and publishes kept for
    // when Redis resolves (202).
    let r = get(srv.addr, "/healthz").await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = post(srv.addr, "/publish/live", b"kept").await;
    assert_eq!(r.status, 202, "{r:?}");
    let _second = ws_connect(srv.addr, "/ws/live").await;
    ws.close(None).await.expect("close");
}
