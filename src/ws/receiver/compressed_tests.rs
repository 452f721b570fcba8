//! Compressed messages (RFC 7692): RSV1 placement, fragments, context
//! takeover, and the inflation bound against decompression bombs.

use super::*;
use crate::ws::frame::MAX_HEADER_LEN;
use crate::ws::inflate::TAIL;
use flate2::{Compress, Compression, FlushCompress};

const MASK: [u8; 4] = [0x11, 0x22, 0x33, 0x44];
const LIMITS: Limits = Limits {
    max_frame_size: 1 << 20,
    max_message_size: 64 * 1024,
};

/// A masked client frame with any FIN/RSV/opcode.
fn client(fin: bool, rsv: u8, opcode: OpCode, payload: &[u8]) -> Vec<u8> {
    let header = FrameHeader {
        fin,
        rsv,
        opcode,
        mask: Some(MASK),
        payload_len: payload.len() as u64,
    };
    let mut head = [0u8; MAX_HEADER_LEN];
    let n = header.encode(&mut head);
    let mut out = head[..n].to_vec();
    out.extend_from_slice(payload);
    apply_mask(&mut out[n..], MASK);
    out
}

/// A client's compressor: `takeover` keeps the window between messages.
struct Client {
    z: Compress,
    takeover: bool,
}

impl Client {
    fn new(takeover: bool) -> Self {
        Client {
            z: Compress::new(Compression::default(), false),
            takeover,
        }
    }

    /// The compressed payload of one message (tail removed, 7.2.1).
    fn compress(&mut self, msg: &[u8]) -> Vec<u8> {
        if !self.takeover {
            self.z.reset();
        }
        let mut out = Vec::with_capacity(msg.len() + 1024);
        self.z
            .compress_vec(msg, &mut out, FlushCompress::Sync)
            .unwrap();
        assert!(out.ends_with(&TAIL));
        out.truncate(out.len() - 4);
        out
    }
}

fn receiver() -> Receiver {
    Receiver::new(Role::Server, LIMITS).with_compression()
}

fn drain(rx: &mut Receiver, bytes: &[u8]) -> Result<Vec<Message>, ProtocolError> {
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(m) = rx.next(&mut buf)? {
        out.push(m);
    }
    Ok(out)
}

fn json(n: usize) -> Vec<u8> {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < n {
        s.push_str(&format!("{{\"n\":{i},\"ok\":true}},"));
        i += 1;
    }
    s.truncate(n);
    s.into_bytes()
}

#[test]
fn compressed_text_and_binary_messages_are_inflated() {
    let mut rx = receiver();
    assert!(
        rx.inflate.is_none(),
        "no inflater before a compressed message"
    );
    let mut c = Client::new(false);
    let msg = json(5_000);
    let mut wire = client(true, RSV1, OpCode::Text, &c.compress(&msg));
    wire.extend(client(
        true,
        RSV1,
        OpCode::Binary,
        &c.compress(b"\x00\x01\x02"),
    ));
    wire.extend(client(true, 0, OpCode::Text, b"plain"));
    let got = drain(&mut rx, &wire).unwrap();
    assert_eq!(
        got,
        vec![
            Message::Text(msg.into()),
            Message::Binary(Bytes::from_static(b"\x00\x01\x02")),
            Message::Text(Bytes::from_static(b"plain")),
        ]
    );
    assert!(rx.inflate.is_some());
}

#[test]
fn fragments_of_a_compressed_message_are_inflated_in_order() {
    let msg = json(20_000);
    let z = Client::new(false).compress(&msg);
    let (a, rest) = z.split_at(z.len() / 3);
    let (b, c) = rest.split_at(rest.len() / 2);
    let mut wire = client(false, RSV1, OpCode::Text, a);
    wire.extend(client(true, 0, OpCode::Ping, b"p"));
    wire.extend(client(false, 0, OpCode::Continuation, b));
    wire.extend(client(true, 0, OpCode::Continuation, c));
    // Byte by byte too: a partial frame is never half-inflated twice.
    for step in [wire.len(), 1] {
        let mut rx = receiver();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for chunk in wire.chunks(step) {
            buf.extend_from_slice(chunk);
            while let Some(m) = rx.next(&mut buf).unwrap() {
                got.push(m);
            }
        }
        let want = vec![
            Message::Ping(Bytes::from_static(b"p")),
            Message::Text(msg.clone().into()),
        ];
        assert_eq!(got, want, "step {step}");
    }
}

#[test]
fn client_context_takeover_is_decoded_even_when_not_agreed() {
    // Safari may ignore client_no_context_takeover: later messages refer
    // back into earlier ones, and the server keeps its window for them.
    let mut c = Client::new(true);
    let msg = json(3_000);
    let first = c.compress(&msg);
    let second = c.compress(&msg);
    assert!(second.len() < first.len() / 4, "the second refers back");
    let mut wire = client(true, RSV1, OpCode::Text, &first);
    wire.extend(client(true, RSV1, OpCode::Text, &second));
    let got = drain(&mut receiver(), &wire).unwrap();
    assert_eq!(got, vec![Message::Text(msg.clone().into()); 2]);
}

#[test]
fn decompression_bomb_stops_at_the_message_limit() {
    let bomb = Client::new(false).compress(&vec![0u8; 50 << 20]);
    assert!(bomb.len() < 64 * 1024, "{} bytes of bomb", bomb.len());
    let mut rx = receiver();
    let err = drain(&mut rx, &client(true, RSV1, OpCode::Binary, &bomb)).unwrap_err();
    assert_eq!(err, ProtocolError::InflatedTooBig { max: 64 * 1024 });
    assert_eq!(err.close_code(), 1009);
    assert!(
        rx.inflate.is_none() && rx.assembly.capacity() == 0,
        "all released"
    );
}

#[test]
fn limit_is_exact_for_inflated_messages() {
    let max = LIMITS.max_message_size;
    for (n, ok) in [(max, true), (max + 1, false)] {
        let z = Client::new(false).compress(&vec![b'a'; n]);
        let got = drain(&mut receiver(), &client(true, RSV1, OpCode::Text, &z));
        assert_eq!(got.is_ok(), ok, "{n}");
    }
    // Spread over fragments, the sum counts.
    let z = Client::new(false).compress(&vec![b'a'; max + 1]);
    let (a, b) = z.split_at(z.len() / 2);
    let mut wire = client(false, RSV1, OpCode::Text, a);
    wire.extend(client(true, 0, OpCode::Continuation, b));
    let err = drain(&mut receiver(), &wire).unwrap_err();
    assert_eq!(err, ProtocolError::InflatedTooBig { max });
}

#[test]
fn rsv1_rules() {
    let z = Client::new(false).compress(b"hello");
    let plain = Receiver::new(Role::Server, LIMITS);
    let cases = [
        (
            plain,
            client(true, RSV1, OpCode::Text, &z),
            ProtocolError::ReservedBitsSet,
        ),
        (
            receiver(),
            client(true, 0b010, OpCode::Text, b"x"),
            ProtocolError::ReservedBitsSet,
        ),
        (
            receiver(),
            client(true, RSV1, OpCode::Ping, b""),
            ProtocolError::MisplacedCompressionBit,
        ),
        (
            receiver(),
            client(true, RSV1, OpCode::Close, b""),
            ProtocolError::MisplacedCompressionBit,
        ),
    ];
    for (mut rx, wire, err) in cases {
        assert_eq!(drain(&mut rx, &wire), Err(err));
    }
    let mut wire = client(false, RSV1, OpCode::Text, &z);
    wire.extend(client(true, RSV1, OpCode::Continuation, b""));
    assert_eq!(
        drain(&mut receiver(), &wire),
        Err(ProtocolError::MisplacedCompressionBit)
    );
}

#[test]
fn corrupt_data_and_bad_utf8_fail() {
    let garbage = client(true, RSV1, OpCode::Text, &[0xff; 16]);
    let err = drain(&mut receiver(), &garbage).unwrap_err();
    assert_eq!(
        (err.clone(), err.close_code()),
        (ProtocolError::BadCompressedData, 1007)
    );
    let z = Client::new(false).compress(b"ok \xff\xfe not utf-8");
    let err = drain(&mut receiver(), &client(true, RSV1, OpCode::Text, &z)).unwrap_err();
    assert_eq!(err, ProtocolError::InvalidUtf8);
}

#[test]
fn final_block_ends_one_message_and_the_next_still_decodes() {
    // A sender may end a message with a final (BFINAL) block; the stream
    // restarts for the next message.
    let mut z = Compress::new(Compression::default(), false);
    let mut first = Vec::with_capacity(256);
    z.compress_vec(b"first", &mut first, FlushCompress::Finish)
        .unwrap();
    let second = Client::new(false).compress(b"second");
    let mut wire = client(true, RSV1, OpCode::Text, &first);
    wire.extend(client(true, RSV1, OpCode::Text, &second));
    let got = drain(&mut receiver(), &wire).unwrap();
    assert_eq!(
        got,
        vec![
            Message::Text("first".into()),
            Message::Text("second".into())
        ]
    );
}
