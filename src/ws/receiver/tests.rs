//! The receiver's tests: message assembly, limits, and every protocol
//! error with its close code, fed byte by byte and in one piece.

use super::*;
use crate::ws::frame::{encode_client_frame, encode_server_frame, MAX_HEADER_LEN};

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
const LIMITS: Limits = Limits {
    max_frame_size: 1 << 20,
    max_message_size: 1 << 20,
};

/// A frame with any FIN/opcode, masked if `mask` is given.
fn frame(fin: bool, opcode: OpCode, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let header = FrameHeader {
        fin,
        rsv: 0,
        opcode,
        mask,
        payload_len: payload.len() as u64,
    };
    let mut head = [0u8; MAX_HEADER_LEN];
    let n = header.encode(&mut head);
    let mut out = head[..n].to_vec();
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(key) = mask {
        apply_mask(&mut out[start..], key);
    }
    out
}

/// A masked client frame, as a server receives it.
fn client(fin: bool, opcode: OpCode, payload: &[u8]) -> Vec<u8> {
    frame(fin, opcode, payload, Some(MASK))
}

/// Runs `next` until it needs more bytes, collecting the messages.
fn drain(rx: &mut Receiver, buf: &mut BytesMut) -> Result<Vec<Message>, ProtocolError> {
    let mut out = Vec::new();
    while let Some(message) = rx.next(buf)? {
        out.push(message);
    }
    Ok(out)
}

fn receive_all(role: Role, limits: Limits, bytes: &[u8]) -> Result<Vec<Message>, ProtocolError> {
    let mut rx = Receiver::new(role, limits);
    drain(&mut rx, &mut BytesMut::from(bytes))
}

fn text(s: &str) -> Message {
    Message::Text(Bytes::copy_from_slice(s.as_bytes()))
}

#[test]
fn rfc_6455_5_7_examples() {
    let hello = Ok(vec![text("Hello")]);
    let unmasked = [0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
    assert_eq!(receive_all(Role::Client, LIMITS, &unmasked), hello);
    let masked = [
        0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    assert_eq!(receive_all(Role::Server, LIMITS, &masked), hello);
    let fragmented = [0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f];
    assert_eq!(receive_all(Role::Client, LIMITS, &fragmented), hello);
    let ping = [0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
    let expected = Message::Ping(Bytes::from_static(b"Hello"));
    assert_eq!(receive_all(Role::Client, LIMITS, &ping), Ok(vec![expected]));
    let pong = [
        0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    let expected = Message::Pong(Bytes::from_static(b"Hello"));
    assert_eq!(receive_all(Role::Server, LIMITS, &pong), Ok(vec![expected]));
}

#[test]
fn rfc_6455_5_7_binary_length_classes() {
    for (len, head) in [
        (256usize, vec![0x82, 0x7E, 0x01, 0x00]),
        (65536, vec![0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0]),
    ] {
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut bytes = head;
        bytes.extend_from_slice(&payload);
        let expected = Message::Binary(Bytes::from(payload));
        assert_eq!(
            receive_all(Role::Client, LIMITS, &bytes),
            Ok(vec![expected])
        );
    }
}

// long: one case per protocol error, read top to bottom as a table
#[test]
fn every_protocol_error_from_bytes_with_its_close_code() {
    use ProtocolError as E;
    let small = Limits {
        max_frame_size: 100,
        max_message_size: 150,
    };
    let fragments = [
        client(false, OpCode::Binary, &[0; 100]),
        client(true, OpCode::Continuation, &[0; 100]),
    ]
    .concat();
    let mut huge = vec![0x82, 0xFF];
    huge.extend_from_slice(&((1u64 << 63) - 1).to_be_bytes());
    huge.extend_from_slice(&MASK);
    let cases: Vec<(Role, Vec<u8>, E, u16)> = vec![
        (Role::Server, vec![0xC1, 0x80], E::ReservedBitsSet, 1002),
        (Role::Server, vec![0x83, 0x80], E::UnknownOpcode(3), 1002),
        (Role::Server, vec![0x81, 0x00], E::UnmaskedClientFrame, 1002),
        (
            Role::Client,
            client(true, OpCode::Text, b"x"),
            E::MaskedServerFrame,
            1002,
        ),
        (
            Role::Server,
            vec![0x89, 0xFE, 0x00, 0x7E],
            E::ControlFrameTooBig(126),
            1002,
        ),
        (
            Role::Server,
            client(false, OpCode::Ping, b""),
            E::FragmentedControlFrame,
            1002,
        ),
        (
            Role::Server,
            vec![0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0],
            E::InvalidLength,
            1002,
        ),
        (
            Role::Server,
            huge,
            E::FrameTooBig {
                size: (1 << 63) - 1,
                max: 100,
            },
            1009,
        ),
        (
            Role::Server,
            fragments,
            E::MessageTooBig {
                size: 200,
                max: 150,
            },
            1009,
        ),
        (
            Role::Server,
            client(true, OpCode::Continuation, b"x"),
            E::UnexpectedContinuation,
            1002,
        ),
        (
            Role::Server,
            [
                client(false, OpCode::Text, b"a"),
                client(true, OpCode::Text, b"b"),
            ]
            .concat(),
            E::ExpectedContinuation,
            1002,
        ),
        (
            Role::Server,
            client(true, OpCode::Text, &[0xFF]),
            E::InvalidUtf8,
            1007,
        ),
        (
            Role::Server,
            client(true, OpCode::Close, &[0x03, 0xE8, 0xC0]),
            E::InvalidUtf8,
            1007,
        ),
        (
            Role::Server,
            client(true, OpCode::Close, &[0x03]),
            E::InvalidClosePayload,
            1002,
        ),
        (
            Role::Server,
            client(true, OpCode::Close, &1005u16.to_be_bytes()),
            E::InvalidCloseCode(1005),
            1002,
        ),
    ];
    for (role, bytes, err, code) in cases {
        assert_eq!(
            receive_all(role, small, &bytes),
            Err(err.clone()),
            "{bytes:x?}"
        );
        assert_eq!(err.close_code(), code, "{err}");
    }
}

#[test]
fn oversized_frame_fails_on_the_header_alone() {
    // 2^63-1 announced, no payload at all: must fail at once, not wait.
    let mut bytes = vec![0x82, 0xFF];
    bytes.extend_from_slice(&((1u64 << 63) - 1).to_be_bytes());
    bytes.extend_from_slice(&MASK);
    let err = receive_all(Role::Server, LIMITS, &bytes).unwrap_err();
    assert!(matches!(err, ProtocolError::FrameTooBig { .. }));
    assert_eq!(err.close_code(), 1009);
}

#[test]
fn oversized_message_fails_before_the_payload_arrives() {
    let limits = Limits {
        max_frame_size: 100,
        max_message_size: 150,
    };
    let mut bytes = client(false, OpCode::Text, &[b'a'; 100]);
    bytes.extend_from_slice(&client(true, OpCode::Continuation, &[b'a'; 51])[..6]);
    let err = ProtocolError::MessageTooBig {
        size: 151,
        max: 150,
    };
    assert_eq!(receive_all(Role::Server, limits, &bytes), Err(err));
    // Exactly at the limit is fine.
    let mut bytes = client(false, OpCode::Text, &[b'a'; 100]);
    bytes.extend_from_slice(&client(true, OpCode::Continuation, &[b'a'; 50]));
    let expected = Message::Text(Bytes::from(vec![b'a'; 150]));
    assert_eq!(
        receive_all(Role::Server, limits, &bytes),
        Ok(vec![expected])
    );
}

#[test]
fn unfragmented_message_over_the_message_limit() {
    let limits = Limits {
        max_frame_size: 100,
        max_message_size: 10,
    };
    let bytes = client(true, OpCode::Binary, &[0; 11]);
    let err = ProtocolError::MessageTooBig { size: 11, max: 10 };
    assert_eq!(receive_all(Role::Server, limits, &bytes), Err(err));
}

#[test]
fn fragmented_message_with_interleaved_ping() {
    let bytes = [
        client(false, OpCode::Text, "Hel".as_bytes()),
        client(true, OpCode::Ping, b"are you there?"),
        client(false, OpCode::Continuation, "lo, w\u{f6}".as_bytes()),
        client(true, OpCode::Pong, b""),
        client(true, OpCode::Continuation, "rld".as_bytes()),
    ]
    .concat();
    let mut rx = Receiver::new(Role::Server, LIMITS);
    let mut buf = BytesMut::from(&bytes[..]);
    let ping = Message::Ping(Bytes::from_static(b"are you there?"));
    assert_eq!(rx.next(&mut buf), Ok(Some(ping)));
    assert!(rx.is_assembling());
    assert_eq!(rx.next(&mut buf), Ok(Some(Message::Pong(Bytes::new()))));
    assert!(rx.is_assembling());
    assert_eq!(rx.next(&mut buf), Ok(Some(text("Hello, w\u{f6}rld"))));
    assert!(!rx.is_assembling());
    assert_eq!(rx.next(&mut buf), Ok(None));
    assert!(buf.is_empty());
}

/// Several messages whose UTF-8 characters straddle fragment borders.
fn mixed_stream() -> (Vec<u8>, Vec<Message>) {
    let euro = "\u{20ac}".as_bytes();
    let bytes = [
        client(true, OpCode::Text, "h\u{e9}llo".as_bytes()),
        client(false, OpCode::Text, &euro[..1]),
        client(true, OpCode::Ping, b"p"),
        client(false, OpCode::Continuation, &euro[1..]),
        client(true, OpCode::Continuation, "\u{1f600}".as_bytes()),
        client(false, OpCode::Binary, &[1, 2]),
        client(true, OpCode::Continuation, &[3]),
        client(true, OpCode::Binary, &[9; 300]),
        client(true, OpCode::Close, &[0x03, 0xE8, b'o', b'k']),
    ]
    .concat();
    let messages = vec![
        text("h\u{e9}llo"),
        Message::Ping(Bytes::from_static(b"p")),
        text("\u{20ac}\u{1f600}"),
        Message::Binary(Bytes::from_static(&[1, 2, 3])),
        Message::Binary(Bytes::from(vec![9; 300])),
        Message::Close(Some(CloseFrame {
            code: 1000,
            reason: Bytes::from_static(b"ok"),
        })),
    ];
    (bytes, messages)
}

#[test]
fn split_at_every_byte_boundary_decodes_identically() {
    let (bytes, expected) = mixed_stream();
    assert_eq!(
        receive_all(Role::Server, LIMITS, &bytes),
        Ok(expected.clone())
    );
    for cut in 0..=bytes.len() {
        let mut rx = Receiver::new(Role::Server, LIMITS);
        let mut buf = BytesMut::from(&bytes[..cut]);
        let mut got = drain(&mut rx, &mut buf).unwrap();
        buf.extend_from_slice(&bytes[cut..]);
        got.extend(drain(&mut rx, &mut buf).unwrap());
        assert_eq!(got, expected, "cut at {cut}");
        assert!(buf.is_empty());
    }
}

#[test]
fn byte_by_byte_decodes_identically() {
    let (bytes, expected) = mixed_stream();
    let mut rx = Receiver::new(Role::Server, LIMITS);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for &byte in &bytes {
        buf.extend_from_slice(&[byte]);
        got.extend(drain(&mut rx, &mut buf).unwrap());
    }
    assert_eq!(got, expected);
}

#[test]
fn partial_frame_is_left_untouched() {
    let bytes = client(true, OpCode::Binary, &[5; 40]);
    for cut in 0..bytes.len() {
        let mut rx = Receiver::new(Role::Server, LIMITS);
        let mut buf = BytesMut::from(&bytes[..cut]);
        assert_eq!(rx.next(&mut buf), Ok(None));
        assert_eq!(&buf[..], &bytes[..cut]);
    }
}

#[test]
fn unfragmented_message_is_zero_copy() {
    let mut buf = BytesMut::from(&encode_server_frame(OpCode::Binary, &[1; 64])[..]);
    let range = buf.as_ptr_range();
    let mut rx = Receiver::new(Role::Client, LIMITS);
    let Ok(Some(Message::Binary(data))) = rx.next(&mut buf) else {
        panic!("expected a binary message");
    };
    assert!(range.contains(&data.as_ptr()));
    assert_eq!(&data[..], &[1; 64]);
}

#[test]
fn invalid_utf8_fails_before_the_message_completes() {
    // The first fragment ends with ED, the second starts with A0: a
    // surrogate. The error comes with the second fragment, although the
    // final one never arrives.
    let bytes = [
        client(false, OpCode::Text, &[b'a', 0xED]),
        client(false, OpCode::Continuation, &[0xA0, 0x80]),
    ]
    .concat();
    assert_eq!(
        receive_all(Role::Server, LIMITS, &bytes),
        Err(ProtocolError::InvalidUtf8)
    );
    // A message ending inside a code point fails on its last fragment.
    let bytes = [
        client(false, OpCode::Text, b"a"),
        client(true, OpCode::Continuation, &[0xE2, 0x82]),
    ]
    .concat();
    assert_eq!(
        receive_all(Role::Server, LIMITS, &bytes),
        Err(ProtocolError::InvalidUtf8)
    );
}

#[test]
fn binary_messages_are_not_utf8_checked() {
    let bytes = [
        client(false, OpCode::Binary, &[0xFF]),
        client(true, OpCode::Continuation, &[0xC0]),
    ]
    .concat();
    let expected = Message::Binary(Bytes::from_static(&[0xFF, 0xC0]));
    assert_eq!(
        receive_all(Role::Server, LIMITS, &bytes),
        Ok(vec![expected])
    );
}

#[test]
fn close_frames() {
    let empty = client(true, OpCode::Close, b"");
    assert_eq!(
        receive_all(Role::Server, LIMITS, &empty),
        Ok(vec![Message::Close(None)])
    );
    let from_server = encode_server_frame(OpCode::Close, &[0x0F, 0xA0]);
    let expected = Message::Close(Some(CloseFrame {
        code: 4000,
        reason: Bytes::new(),
    }));
    assert_eq!(
        receive_all(Role::Client, LIMITS, &from_server),
        Ok(vec![expected])
    );
}

#[test]
fn errors_poison_the_receiver() {
    let mut rx = Receiver::new(Role::Server, LIMITS);
    let mut buf =
        BytesMut::from(&[client(false, OpCode::Text, b"abc"), vec![0x81, 0x00]].concat()[..]);
    assert_eq!(rx.next(&mut buf), Err(ProtocolError::UnmaskedClientFrame));
    assert_eq!(rx.assembly.capacity(), 0, "held fragments are released");
    let mut good = BytesMut::from(&client(true, OpCode::Text, b"fine")[..]);
    assert_eq!(rx.next(&mut good), Err(ProtocolError::UnmaskedClientFrame));
}

#[test]
fn idle_receiver_holds_no_heap_memory() {
    assert!(
        mem::size_of::<Receiver>() <= 96,
        "{}",
        mem::size_of::<Receiver>()
    );
    let mut rx = Receiver::new(Role::Server, LIMITS);
    assert_eq!(rx.assembly.capacity(), 0);
    let bytes = [
        client(false, OpCode::Binary, &[1; 1000]),
        client(true, OpCode::Continuation, &[2; 1000]),
    ]
    .concat();
    let mut buf = BytesMut::from(&bytes[..]);
    assert!(matches!(rx.next(&mut buf), Ok(Some(Message::Binary(data))) if data.len() == 2000));
    assert_eq!(rx.assembly.capacity(), 0);
    assert!(!rx.is_assembling());
}

#[test]
fn client_role_reads_unmasked_and_writes_masked() {
    let mut out = BytesMut::new();
    encode_client_frame(OpCode::Binary, b"to server", MASK, &mut out);
    let expected = Message::Binary(Bytes::from_static(b"to server"));
    assert_eq!(receive_all(Role::Server, LIMITS, &out), Ok(vec![expected]));
    let unmasked = frame(true, OpCode::Text, b"hi", None);
    assert_eq!(
        receive_all(Role::Client, LIMITS, &unmasked),
        Ok(vec![text("hi")])
    );
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A cheap stand-in for the fuzzer: random and mutated-valid streams,
    // fed in random chunk sizes, must only ever produce values.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (valid, _) = mixed_stream();
    let limits = Limits {
        max_frame_size: 256,
        max_message_size: 512,
    };
    for round in 0..3000 {
        let mut bytes = if round % 2 == 0 {
            valid.clone()
        } else {
            (0..next() % 200).map(|_| next() as u8).collect()
        };
        for _ in 0..next() % 4 {
            if !bytes.is_empty() {
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
            }
        }
        for role in [Role::Server, Role::Client] {
            let mut rx = Receiver::new(role, limits);
            let mut buf = BytesMut::new();
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let take = 1 + (next() as usize) % rest.len();
                buf.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                if drain(&mut rx, &mut buf).is_err() {
                    break;
                }
            }
        }
    }
}
