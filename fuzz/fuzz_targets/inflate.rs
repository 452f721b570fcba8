//! The inflater over arbitrary (mostly invalid) DEFLATE, cut in arbitrary
//! pieces and run through a compressed-message receiver: no panic, no
//! message past the limit, and the inflater never holds more than
//! `max + 1` bytes of output, whatever the input claims.
#![no_main]
use bytes::BytesMut;
use corecast::ws::inflate::{InflateError, Inflater};
use corecast::ws::{Limits, Message, Receiver, Role};
use libfuzzer_sys::fuzz_target;

const MAX: usize = 8192;
const LIMITS: Limits = Limits {
    max_frame_size: 4096,
    max_message_size: MAX,
};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    // The inflater alone: pieces of one message, then the end.
    let chunk = usize::from(split).max(1);
    let mut inflater = Inflater::new();
    let mut out = BytesMut::new();
    let mut result = Ok(());
    for piece in rest.chunks(chunk) {
        result = inflater.feed(piece, &mut out, MAX);
        assert!(out.len() <= MAX + 1, "held {} bytes", out.len());
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = inflater.finish(&mut out, MAX);
    }
    assert!(out.len() <= MAX + 1);
    assert!(result.is_ok() || matches!(result, Err(InflateError::TooBig | InflateError::Corrupt)));
    // The same bytes as frames of a connection that agreed compression.
    let mut rx = Receiver::new(Role::Server, LIMITS).with_compression();
    let mut buf = BytesMut::from(rest);
    loop {
        match rx.next(&mut buf) {
            Ok(Some(Message::Text(t))) => {
                assert!(std::str::from_utf8(&t).is_ok());
                assert!(t.len() <= MAX);
            }
            Ok(Some(Message::Binary(b))) => assert!(b.len() <= MAX),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
});
