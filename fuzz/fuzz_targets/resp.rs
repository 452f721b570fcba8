//! RESP reply decoding over arbitrary bytes in arbitrary chunks: every
//! reply decodes, or "need more", or an error — never a panic; and a
//! subscriber-side classification of whatever decodes, and the history
//! read script's reply parser (`redis::stream::parse_read`).
#![no_main]
use bytes::BytesMut;
use corecast::redis::resp::{decode, pubsub_event, Limits};
use corecast::redis::stream::parse_read;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(split).max(1);
    let mut buf = BytesMut::new();
    for piece in rest.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match decode(&mut buf, &Limits::default()) {
                Ok(Some(reply)) => {
                    let _ = parse_read(reply.clone(), 1 << 20);
                    let _ = pubsub_event(reply);
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
});
