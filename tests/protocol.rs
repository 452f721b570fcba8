//! RFC 6455 violations, sent as raw bytes after a valid handshake, fail the
//! connection with the right close code; then the server closes the TCP
//! connection.

mod common;

use std::time::Duration;

use common::*;

const FIN: u8 = 0x80;

/// Upgrades, sends `bytes`, and expects close `code` followed by EOF.
async fn expect_failure(srv: &TestServer, bytes: &[u8], code: u16, what: &str) {
    let mut ws = RawWs::connect(srv.addr, "/ws/proto").await;
    ws.send_raw(bytes).await;
    let (seen, ending) = ws.read_until_close().await;
    assert!(seen.is_empty(), "{what}: frames before the close: {seen:?}");
    assert_eq!(ending, Ending::Close(Some(code)), "{what}");
    ws.expect_eof().await;
}

async fn framing_violations_close_with_1002(legacy: bool) {
    let srv = TestServer::start_on(legacy, |_| {});
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "unmasked client frame",
            client_frame(FIN | OP_TEXT, b"hi", None),
        ),
        ("RSV1 set", masked(FIN | 0x40 | OP_TEXT, b"hi")),
        ("RSV3 set", masked(FIN | 0x10 | OP_BINARY, b"hi")),
        ("reserved opcode 3", masked(FIN | 0x3, b"hi")),
        ("reserved control opcode 0xB", masked(FIN | 0xB, b"")),
        ("fragmented ping", masked(OP_PING, b"p")),
        (
            "ping with 126-byte payload",
            masked(FIN | OP_PING, &[b'p'; 126]),
        ),
        ("continuation without a start", masked(FIN | OP_CONT, b"x")),
        (
            "new text frame inside a fragmented message",
            [masked(OP_TEXT, b"a"), masked(FIN | OP_TEXT, b"b")].concat(),
        ),
        ("close with 1-byte body", masked(FIN | OP_CLOSE, &[3])),
        (
            "close code 1005 (reserved for 'no status')",
            masked(FIN | OP_CLOSE, &close_body(1005, "")),
        ),
        (
            "close code 1006 (reserved)",
            masked(FIN | OP_CLOSE, &close_body(1006, "")),
        ),
        (
            "close code 999",
            masked(FIN | OP_CLOSE, &close_body(999, "")),
        ),
    ];
    for (what, bytes) in cases {
        expect_failure(&srv, &bytes, 1002, what).await;
    }
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "protocol_errors"), 13);
    // Every failed connection was also torn down.
    wait_stat(srv.addr, "websockets_closed", |n| n == 13).await;
}

/// A header announcing 2^63-1 bytes is refused from the header alone: the
/// answer comes at once, with nothing of the payload sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_length_is_refused_with_1009_without_allocating() {
    let srv = TestServer::start(|_| {});
    let mut header = vec![FIN | OP_BINARY, 0x80 | 127];
    header.extend_from_slice(&0x7FFF_FFFF_FFFF_FFFFu64.to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    let mut ws = RawWs::connect(srv.addr, "/ws/proto").await;
    ws.send_raw(&header).await;
    let ending = within_for(Duration::from_secs(2), "prompt 1009", ws.read_until_close())
        .await
        .1;
    assert_eq!(ending, Ending::Close(Some(1009)));
    ws.expect_eof().await;

    // Just over max_frame_size (1 MiB): same answer, also from the header.
    let mut header = vec![FIN | OP_BINARY, 0x80 | 127];
    header.extend_from_slice(&((1u64 << 20) + 1).to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    expect_failure(&srv, &header, 1009, "frame over max_frame_size").await;

    // The most significant bit of a 64-bit length MUST be 0 (5.2).
    let mut header = vec![FIN | OP_BINARY, 0x80 | 127];
    header.extend_from_slice(&0x8000_0000_0000_0000u64.to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    let mut ws = RawWs::connect(srv.addr, "/ws/proto").await;
    ws.send_raw(&header).await;
    assert_eq!(ws.read_until_close().await.1, Ending::Close(Some(1002)));
    assert_eq!(get(srv.addr, "/healthz").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_closes_with_1007() {
    let srv = TestServer::start(|_| {});
    expect_failure(
        &srv,
        &masked(FIN | OP_TEXT, b"ok \xff\xfe"),
        1007,
        "invalid UTF-8 text",
    )
    .await;
    // Split across fragments, the error is in the sequence, not in a frame:
    // "é" is C3 A9; C3 followed by a non-continuation byte is invalid.
    let frags = [masked(OP_TEXT, b"ab\xc3"), masked(FIN | OP_CONT, b"(")].concat();
    expect_failure(&srv, &frags, 1007, "invalid UTF-8 across fragments").await;
    // A code point split across fragments is fine, and gets delivered.
    let mut ok = RawWs::connect(srv.addr, "/ws/proto").await;
    let frags = [masked(OP_TEXT, b"caf\xc3"), masked(FIN | OP_CONT, b"\xa9")].concat();
    ok.send_raw(&frags).await;
    let f = ok.next_frame().await;
    assert_eq!(
        (f.opcode, f.payload.as_slice()),
        (OP_TEXT, "café".as_bytes())
    );
    // A close reason that is not UTF-8.
    let mut body = close_body(1000, "");
    body.extend_from_slice(b"\xff");
    expect_failure(&srv, &masked(FIN | OP_CLOSE, &body), 1007, "close reason").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragmented_message_over_max_message_size_closes_with_1009() {
    let srv = TestServer::start(|c| {
        c.ws.max_frame_size = 1024;
        c.ws.max_message_size = 1024;
    });
    // Each fragment is within the frame limit; together they are not.
    let frags = [masked(OP_TEXT, &[b'a'; 600]), masked(OP_CONT, &[b'b'; 600])].concat();
    expect_failure(&srv, &frags, 1009, "1200-byte message, limit 1024").await;
    expect_failure(
        &srv,
        &masked(FIN | OP_BINARY, &[0; 1025]),
        1009,
        "one 1025-byte frame, limit 1024",
    )
    .await;
    // Exactly at the limit, in fragments with a ping in between, is fine.
    let mut ok = RawWs::connect(srv.addr, "/ws/proto").await;
    let frags = [
        masked(OP_BINARY, &[1; 512]),
        masked(FIN | OP_PING, b"mid"),
        masked(FIN | OP_CONT, &[2; 512]),
    ]
    .concat();
    ok.send_raw(&frags).await;
    let pong = ok.next_frame().await;
    assert_eq!(
        (pong.opcode, pong.payload.as_slice()),
        (OP_PONG, &b"mid"[..])
    );
    let msg = ok.next_frame().await;
    assert_eq!(
        (msg.opcode, msg.fin, msg.payload.len()),
        (OP_BINARY, true, 1024)
    );
    assert!(msg.payload[..512].iter().all(|&b| b == 1));
    assert!(msg.payload[512..].iter().all(|&b| b == 2));
}

/// A valid close is echoed with the same code, then the server closes TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_close_is_echoed() {
    let srv = TestServer::start(|_| {});
    for (code, reason) in [(1000, "bye"), (1001, ""), (3000, "app"), (4999, "private")] {
        let mut ws = RawWs::connect(srv.addr, "/ws/proto").await;
        ws.send(FIN | OP_CLOSE, &close_body(code, reason)).await;
        ws.expect_close(code).await;
        ws.expect_eof().await;
    }
    // An empty close is answered with an empty close.
    let mut ws = RawWs::connect(srv.addr, "/ws/proto").await;
    ws.send(FIN | OP_CLOSE, b"").await;
    assert_eq!(ws.read_until_close().await.1, Ending::Close(None));
    ws.expect_eof().await;
    let s = wait_stat(srv.addr, "websockets_closed", |n| n == 5).await;
    assert_eq!(counter(&s, "protocol_errors"), 0);
}

/// Pings are answered with their payload; data still flows after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_are_answered_with_the_same_payload() {
    let srv = TestServer::start(|_| {});
    let mut ws = RawWs::connect(srv.addr, "/ws/echo").await;
    ws.send(FIN | OP_PING, b"").await;
    assert_eq!(ws.next_frame().await.opcode, OP_PONG);
    ws.send(FIN | OP_PING, &[7; 125]).await;
    let pong = ws.next_frame().await;
    assert_eq!((pong.opcode, pong.payload), (OP_PONG, vec![7; 125]));
    // An unsolicited pong is ignored.
    ws.send(FIN | OP_PONG, b"unsolicited").await;
    ws.send(FIN | OP_TEXT, b"data").await;
    let f = ws.next_frame().await;
    assert_eq!((f.opcode, f.payload.as_slice()), (OP_TEXT, &b"data"[..]));
    // Bytes pipelined right behind the handshake are not lost either.
    let mut stream = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let mut bytes = format!(
        "GET /ws/pipelined HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {RFC_KEY}\r\n\r\n"
    )
    .into_bytes();
    bytes.extend_from_slice(&masked(FIN | OP_PING, b"early"));
    tokio::io::AsyncWriteExt::write_all(&mut stream, &bytes)
        .await
        .unwrap();
    let mut ws = RawWs::from_upgraded(stream).await;
    let pong = ws.next_frame().await;
    assert_eq!(
        (pong.opcode, pong.payload.as_slice()),
        (OP_PONG, &b"early"[..])
    );
}

/// Messages of every length class cross the server intact, and the frames
/// it sends use the minimal length encoding ("the minimal number of bytes
/// MUST be used to encode the length", 5.2).
async fn every_length_class_round_trips_with_minimal_encoding(legacy: bool) {
    let srv = TestServer::start_on(legacy, |_| {});
    let mut publisher = RawWs::connect(srv.addr, "/ws/sizes").await;
    let mut subscriber = RawWs::connect(srv.addr, "/ws/sizes").await;
    wait_stat(srv.addr, "subscriptions", |n| n == 2).await;
    for len in [0usize, 1, 125, 126, 127, 65_535, 65_536, 100_000] {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        publisher.send(FIN | OP_BINARY, &payload).await;
        for ws in [&mut subscriber, &mut publisher] {
            let f = ws.next_frame().await;
            assert_eq!((f.fin, f.rsv, f.opcode), (true, 0, OP_BINARY), "{len}");
            assert!(f.payload == payload, "payload of {len} bytes corrupted");
            let (form, header_len) = match len {
                0..=125 => (len as u8, 2),
                126..=65_535 => (126, 4),
                _ => (127, 10),
            };
            assert_eq!(f.header.len(), header_len, "header for {len} bytes");
            assert_eq!(f.header[1], form, "length form for {len} bytes");
        }
    }
}

on_both_drivers!(
    framing_violations_close_with_1002,
    every_length_class_round_trips_with_minimal_encoding,
);

/// Issue 12 item 10: after a protocol error the server half-closes and
/// drains its input (bounded) before closing, so the peer gets our close
/// frame. Closing a socket with unread input sends an RST, which also
/// throws away what the server has not sent yet: here the client reads
/// slowly (small receive buffer, messages queued ahead of the close), so
/// the close frame is still in the server's send queue when it closes.
async fn a_protocol_error_close_survives_unread_input(legacy: bool) {
    let srv = TestServer::start_on(legacy, |c| c.ws.max_frame_size = 1024);
    let mut ws = RawWs::connect_small_rcvbuf(srv.addr, "/ws/proto", 4096).await;
    let body = "m".repeat(4 << 10);
    for _ in 0..3 {
        publish(srv.addr, "proto", &body).await;
    }
    // Written (into the server's send buffer), not yet read by us.
    wait_stat(srv.addr, "bytes_out", |n| n >= 3 * (4 << 10)).await;
    let mut bytes = vec![FIN | OP_BINARY, 0x80 | 126];
    bytes.extend_from_slice(&4096u16.to_be_bytes());
    bytes.extend_from_slice(&[1, 2, 3, 4]);
    // More than one read takes (the server reads through a 64 KiB
    // scratch buffer), so some stays unread in the kernel.
    bytes.extend_from_slice(&[b'j'; 160 << 10]);
    // Bounded: the server may stop reading before it took everything.
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.try_send_raw(&bytes)).await;
    wait_stat(srv.addr, "websockets_closed", |n| n == 1).await;
    let (seen, ending) = ws.read_until_close().await;
    assert_eq!(seen.len(), 3, "the queued messages first");
    assert_eq!(ending, Ending::Close(Some(1009)));
    ws.expect_eof().await;
}

on_both_drivers!(a_protocol_error_close_survives_unread_input);

/// Issue 12 item 11: the read half waits for input with a read of its own
/// (no shared `&TcpStream`), then drains the socket without blocking. A
/// message that arrives one byte per segment while the connection's writer
/// is stuck in a write to a full socket (megabytes queued behind a 4 KiB
/// receive window) arrives whole: no byte taken by the wait is lost, and
/// the pending write does not hold up the read.
async fn input_byte_by_byte_while_the_writer_is_blocked(legacy: bool) {
    const MESSAGES: usize = 160;
    let srv = TestServer::start_on(legacy, |c| {
        c.max_outbound_queue = 64 << 20;
        c.max_total_outbound = 256 << 20;
        c.publish_backpressure = 256 << 20;
    });
    let mut busy = RawWs::connect_small_rcvbuf(srv.addr, "/ws/busy", 4096).await;
    busy.stream.set_nodelay(true).unwrap();
    let mut listener = RawWs::connect(srv.addr, "/ws/busy").await;
    wait_stat(srv.addr, "subscriptions", |n| n == 2).await;
    // 10 MiB: more than the server's send buffer can absorb, so `busy`'s
    // writer is left with a write in flight that cannot complete.
    let body = "b".repeat(64 << 10);
    for _ in 0..MESSAGES {
        assert_eq!(publish(srv.addr, "busy", &body).await, 2);
    }
    for i in 0..MESSAGES {
        let f = listener.next_frame().await;
        assert_eq!(f.payload.len(), body.len(), "message {i}");
    }
    let text: Vec<u8> = (0..1000).map(|i| b'a' + (i % 26) as u8).collect();
    for byte in masked(FIN | OP_TEXT, &text) {
        busy.send_raw(&[byte]).await;
    }
    let f = listener.next_frame().await;
    assert_eq!(f.opcode, OP_TEXT);
    assert!(f.payload == text, "the message arrived corrupted");
    // The stuck writer was never interrupted: everything, in order.
    for i in 0..MESSAGES {
        let f = busy.next_frame().await;
        assert_eq!(f.payload.len(), body.len(), "message {i}");
    }
    let f = busy.next_frame().await;
    assert!(f.payload == text, "the publisher's own copy");
}

on_both_drivers!(input_byte_by_byte_while_the_writer_is_blocked);
