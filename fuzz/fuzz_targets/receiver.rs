//! The frame decoder and message assembler over arbitrary byte streams, fed
//! in arbitrary chunk sizes, in both roles: no panic, and nothing buffered
//! beyond the limits.
#![no_main]
use bytes::BytesMut;
use corecast::ws::{Limits, Message, Receiver, Role};
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    max_frame_size: 4096,
    max_message_size: 8192,
};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let role = if split & 1 == 0 { Role::Server } else { Role::Client };
    let chunk = usize::from(split >> 1).max(1);
    let mut rx = Receiver::new(role, LIMITS);
    let mut buf = BytesMut::new();
    for piece in rest.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match rx.next(&mut buf) {
                Ok(Some(Message::Text(t))) => {
                    assert!(std::str::from_utf8(&t).is_ok());
                    assert!(t.len() <= LIMITS.max_message_size);
                }
                Ok(Some(Message::Binary(b))) => assert!(b.len() <= LIMITS.max_message_size),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
});
