//! permessage-deflate (RFC 7692) against the whole server: negotiation,
//! one shared compressed frame per publish, mixed subscribers, inflation
//! of client messages, and decompression bombs.
//!
//! The compressed peers here are hand-driven (`RawWs`) and inflate with
//! flate2 directly; tokio-tungstenite (0.24 has no deflate support) is the
//! independent uncompressed subscriber; `python_websockets.rs` runs the
//! Python `websockets` library, which compresses by default. In Redis mode
//! messages cross Redis as published and each instance compresses once.

mod common;
mod redis_support;

use common::*;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

const OFFER: &str = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n";
const TAIL: [u8; 4] = [0, 0, 0xff, 0xff];
const RSV1: u8 = 0b100;

fn extension(headers: &[(String, String)]) -> Option<&str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("sec-websocket-extensions"))
        .map(|(_, v)| v.as_str())
}

/// Inflates one message payload of a server that agreed
/// `server_no_context_takeover` (every message from an empty window).
fn inflate(payload: &[u8]) -> Vec<u8> {
    let mut input = payload.to_vec();
    input.extend_from_slice(&TAIL);
    let mut out = Vec::with_capacity(payload.len() * 20 + 1024);
    let mut z = Decompress::new(false);
    z.decompress_vec(&input, &mut out, FlushDecompress::Sync)
        .expect("valid DEFLATE");
    out
}

/// A client-side compressor keeping its context (as Safari may).
fn compressor() -> Compress {
    Compress::new(Compression::default(), false)
}

fn compress(z: &mut Compress, msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 1024);
    z.compress_vec(msg, &mut out, FlushCompress::Sync).unwrap();
    assert!(out.ends_with(&TAIL));
    out.truncate(out.len() - 4);
    out
}

/// A JSON text of about `n` bytes.
fn json(n: usize) -> String {
    let mut s = String::from("[");
    let mut i = 0;
    while s.len() < n - 2 {
        s.push_str(&format!(
            "{{\"id\":{i},\"sym\":\"BTC-USD\",\"px\":{},\"side\":\"buy\"}},",
            43_000 + i * 7 % 1000
        ));
        i += 1;
    }
    s.truncate(n - 1);
    s.push(']');
    s
}

async fn compressed_subscriber(addr: std::net::SocketAddr, path: &str) -> RawWs {
    let (ws, headers) = RawWs::connect_with(addr, path, OFFER).await;
    assert_eq!(
        extension(&headers),
        Some("permessage-deflate; server_no_context_takeover")
    );
    ws
}

#[tokio::test]
async fn mixed_subscribers_get_identical_messages_from_one_compressed_frame() {
    let srv = TestServer::start(|_| {});
    let mut deflated = [
        compressed_subscriber(srv.addr, "/ws/room").await,
        compressed_subscriber(srv.addr, "/ws/room").await,
    ];
    let mut plain_raw = RawWs::connect(srv.addr, "/ws/room").await;
    let mut tungstenite = ws_connect(srv.addr, "/ws/room").await;
    wait_stat(srv.addr, "subscriptions", |n| n == 4).await;
    let big = json(2_048);
    assert_eq!(publish(srv.addr, "room", &big).await, 4);
    for ws in &mut deflated {
        let f = ws.next_frame().await;
        assert_eq!((f.rsv, f.opcode, f.fin), (RSV1, OP_TEXT, true));
        assert!(f.payload.len() < big.len() / 3, "{} bytes", f.payload.len());
        assert_eq!(inflate(&f.payload), big.as_bytes());
    }
    let f = plain_raw.next_frame().await;
    assert_eq!((f.rsv, f.payload.as_slice()), (0, big.as_bytes()));
    assert_eq!(next_text(&mut tungstenite).await, big);
    // Short messages go plain, RSV1 clear, to compressed subscribers too.
    assert_eq!(publish(srv.addr, "room", "tiny").await, 4);
    for ws in &mut deflated {
        let f = ws.next_frame().await;
        assert_eq!((f.rsv, f.payload.as_slice()), (0, &b"tiny"[..]));
    }
    assert_eq!(next_text(&mut tungstenite).await, "tiny");
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "compression_connections"), 2);
    assert_eq!(counter(&s, "compression_messages"), 1, "once per publish");
    assert_eq!(counter(&s, "compression_skipped"), 1);
    assert_eq!(counter(&s, "compression_bytes_in"), big.len() as u64);
    assert!(counter(&s, "compression_bytes_out") < big.len() as u64 / 3);
}

#[tokio::test]
async fn control_protocol_envelopes_are_compressed_too() {
    let srv = TestServer::start(|_| {});
    let mut ws = compressed_subscriber(srv.addr, "/ws").await;
    ws.send(0x81, br#"{"op":"subscribe","channel":"feed","id":1}"#)
        .await;
    let ack = ws.next_frame().await;
    assert_eq!(ack.rsv, 0, "replies are plain");
    let big = json(4_000);
    publish(srv.addr, "feed", &big).await;
    let f = ws.next_frame().await;
    assert_eq!(f.rsv, RSV1);
    let v: serde_json::Value = serde_json::from_slice(&inflate(&f.payload)).unwrap();
    assert_eq!(v["channel"], "feed");
    assert_eq!(v["data"], big.as_str());
}

#[tokio::test]
async fn offers_are_parsed_strictly_and_declined_not_failed() {
    let srv = TestServer::start(|_| {});
    for offer in [
        "permessage-deflate; bogus",
        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
        "permessage-deflate; server_max_window_bits=16",
        "x-webkit-deflate-frame",
    ] {
        let line = format!("Sec-WebSocket-Extensions: {offer}\r\n");
        let (mut ws, headers) = RawWs::connect_with(srv.addr, "/ws/a", &line).await;
        assert_eq!(extension(&headers), None, "{offer}");
        // Without the extension, RSV1 is a protocol error.
        ws.send(0x80 | 0x40 | OP_TEXT, b"x").await;
        ws.expect_close(1002).await;
    }
    let line = "Sec-WebSocket-Extensions: permessage-deflate; bogus, \
                permessage-deflate; server_max_window_bits=10\r\n";
    let (_ws, headers) = RawWs::connect_with(srv.addr, "/ws/a", line).await;
    assert_eq!(
        extension(&headers),
        Some("permessage-deflate; server_no_context_takeover; server_max_window_bits=10")
    );
}

#[tokio::test]
async fn compression_off_never_negotiates() {
    let srv = TestServer::start(|c| c.compression.enabled = false);
    let (_ws, headers) = RawWs::connect_with(srv.addr, "/ws/a", OFFER).await;
    assert_eq!(extension(&headers), None);
}

#[tokio::test]
async fn limited_windows_get_frames_they_can_read() {
    let srv = TestServer::start(|_| {});
    let small = "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=9\r\n";
    let (mut w9, _) = RawWs::connect_with(srv.addr, "/ws/w", small).await;
    let tiny = "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=8\r\n";
    let (mut w8, headers) = RawWs::connect_with(srv.addr, "/ws/w", tiny).await;
    assert!(extension(&headers)
        .unwrap()
        .ends_with("server_max_window_bits=8"));
    wait_stat(srv.addr, "subscriptions", |n| n == 2).await;
    let big = json(3_000);
    publish(srv.addr, "w", &big).await;
    let f = w9.next_frame().await;
    assert_eq!(f.rsv, RSV1);
    let mut z = Decompress::new_with_window_bits(false, 9);
    let mut out = Vec::with_capacity(big.len() + 16);
    let input = [f.payload.as_slice(), &TAIL].concat();
    z.decompress_vec(&input, &mut out, FlushDecompress::Sync)
        .expect("readable with a 512-byte window");
    assert_eq!(out, big.as_bytes());
    // zlib cannot deflate with 256 bytes: that connection gets plain frames.
    let f = w8.next_frame().await;
    assert_eq!((f.rsv, f.payload.as_slice()), (0, big.as_bytes()));
}

#[tokio::test]
async fn compressed_client_messages_are_inflated_with_context_takeover() {
    let srv = TestServer::start(|_| {});
    let mut sub = ws_connect(srv.addr, "/ws/chat").await;
    let mut publisher = compressed_subscriber(srv.addr, "/ws/chat").await;
    wait_stat(srv.addr, "subscriptions", |n| n == 2).await;
    let mut z = compressor();
    let msg = json(1_500);
    for _ in 0..3 {
        // Later messages refer back into earlier ones: the client did not
        // agree client_no_context_takeover (and Safari may ignore it).
        let payload = compress(&mut z, msg.as_bytes());
        publisher.send(0x80 | 0x40 | OP_TEXT, &payload).await;
        assert_eq!(next_text(&mut sub).await, msg);
    }
    // Fragmented: RSV1 on the first frame only.
    let payload = compress(&mut z, b"fragmented hello");
    let (a, b) = payload.split_at(payload.len() / 2);
    publisher.send(0x40 | OP_TEXT, a).await;
    publisher.send(0x80 | OP_CONT, b).await;
    assert_eq!(next_text(&mut sub).await, "fragmented hello");
    let s = wait_stat(srv.addr, "compression_inflated_messages", |n| n == 4).await;
    assert_eq!(counter(&s, "protocol_errors"), 0);
}

#[tokio::test]
async fn decompression_bomb_closes_1009_and_harms_no_one() {
    let srv = TestServer::start(|c| c.ws.max_message_size = 64 * 1024);
    let mut bystander = ws_connect(srv.addr, "/ws/calm").await;
    let mut bomber = compressed_subscriber(srv.addr, "/ws/calm").await;
    wait_stat(srv.addr, "subscriptions", |n| n == 2).await;
    // 64 MiB of zeros in about 64 KiB: 1000 times the limit.
    let bomb = compress(&mut compressor(), &vec![0u8; 64 << 20]);
    assert!(bomb.len() < 128 * 1024, "{}", bomb.len());
    bomber.send(0x80 | 0x40 | OP_BINARY, &bomb).await;
    bomber.expect_close(1009).await;
    let s = wait_stat(srv.addr, "protocol_errors", |n| n == 1).await;
    assert_eq!(counter(&s, "messages_in"), 0, "nothing of it was published");
    publish(srv.addr, "calm", "still here").await;
    assert_eq!(next_text(&mut bystander).await, "still here");
}

#[tokio::test]
async fn rsv1_on_a_control_frame_is_a_protocol_error() {
    let srv = TestServer::start(|_| {});
    let mut ws = compressed_subscriber(srv.addr, "/ws/x").await;
    ws.send(0x80 | 0x40 | OP_PING, b"").await;
    ws.expect_close(1002).await;
    let mut ws = compressed_subscriber(srv.addr, "/ws/x").await;
    ws.send(0x80 | 0x40 | OP_TEXT, &[0xff; 8]).await;
    ws.expect_close(1007).await;
}

/// The server's peak resident memory (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM line");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn bomb_inflating_to_64_mib_leaves_peak_memory_near_the_limit() {
    // A process of its own, so its peak RSS is the server's alone.
    let srv = BinServer::spawn(&["--max-message-size", "1MiB"]);
    let pid = srv.child.id();
    let mut warm = compressed_subscriber(srv.addr, "/ws/m").await;
    warm.send(
        0x80 | 0x40 | OP_TEXT,
        &compress(&mut compressor(), b"warm up"),
    )
    .await;
    wait_stat(srv.addr, "compression_inflated_messages", |n| n == 1).await;
    let before = peak_rss_kib(pid);
    let bomb = compress(&mut compressor(), &vec![0u8; 64 << 20]);
    for _ in 0..4 {
        let mut bomber = compressed_subscriber(srv.addr, "/ws/m").await;
        bomber.send(0x80 | 0x40 | OP_BINARY, &bomb).await;
        bomber.expect_close(1009).await;
    }
    let grown_kib = peak_rss_kib(pid).saturating_sub(before);
    // Unbounded, each bomb would take 64 MiB; bounded, about the 1 MiB
    // limit (twice that while the buffer grows) plus the inflater.
    assert!(grown_kib < 8 * 1024, "peak RSS grew by {grown_kib} KiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_mode_carries_messages_plain_and_each_instance_compresses_once() {
    one_worker_per_server("counts what one instance subscribes and compresses");
    let redis = redis_support::RedisServer::start(&[]).await;
    let (a, b) = redis_support::ready_pair(&redis).await;
    let mut rc = redis_support::RespConn::open(redis.port, None).await;
    let mut on_a = [
        compressed_subscriber(a.addr, "/ws/news").await,
        compressed_subscriber(a.addr, "/ws/news").await,
    ];
    let mut plain_on_b = ws_connect(b.addr, "/ws/news").await;
    rc.wait_numsub("news", 2).await;
    let big = json(2_500);
    let r = post(b.addr, "/publish/news", big.as_bytes()).await;
    assert_eq!(r.status, 200);
    assert_eq!(next_text(&mut plain_on_b).await, big);
    for ws in &mut on_a {
        let f = ws.next_frame().await;
        assert_eq!(f.rsv, RSV1);
        assert_eq!(inflate(&f.payload), big.as_bytes());
    }
    // B, with no compressed subscriber, never compressed: the message
    // went through Redis as published. A compressed it once for both.
    assert_eq!(counter(&stats(b.addr).await, "compression_messages"), 0);
    assert_eq!(counter(&stats(a.addr).await, "compression_messages"), 1);
}
