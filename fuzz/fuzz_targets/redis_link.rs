//! The Redis link's inbound path over arbitrary bytes in arbitrary chunks,
//! as both connections see it: the subscriber's classification (bounded
//! decode → pub/sub event → channel → envelope checks) and the command
//! connection's in-order reply matching. Never a panic or a stack
//! overflow; the read buffer stays within the reply limit; nothing
//! delivered breaks `--max-message-size` or is invalid UTF-8 text.
#![no_main]
use bytes::{BufMut, BytesMut};
use corecast::redis::inbound::{Event, Inbound};
use corecast::redis::commands::Pubsub;
use corecast::redis::resp::{command, decode, Limits, Pipeline};
use corecast::ws::OpCode;
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    max_len: 4096,
    max_elements: 64,
};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(split >> 1).max(1);
    if split & 1 == 0 {
        subscriber(rest, chunk);
    } else {
        commands(rest, chunk);
    }
});

fn subscriber(data: &[u8], chunk: usize) {
    let inbound = Inbound {
        prefix: "cc:".into(),
        canary_key: "cc:!canary:1".into(),
        limits: LIMITS,
        max_message: 64,
        // Both namings: `cc:chan` and the cluster's `cc:{chan}`.
        mode: if chunk % 2 == 0 {
            Pubsub::Plain
        } else {
            Pubsub::Sharded
        },
    };
    let mut buf = BytesMut::new();
    for piece in data.chunks(chunk) {
        buf.put_slice(piece);
        loop {
            match inbound.next(&mut buf) {
                Ok(Some(Event::Deliver { channel, envelope })) => {
                    assert!(std::str::from_utf8(&channel).is_ok());
                    assert!(envelope.payload.len() <= 64);
                    if envelope.opcode == OpCode::Text {
                        assert!(std::str::from_utf8(&envelope.payload).is_ok());
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                // The link drops the connection here.
                Err(_) => return,
            }
        }
        assert!(buf.len() <= LIMITS.max_len, "read buffer over the limit");
    }
}

fn commands(data: &[u8], chunk: usize) {
    let mut pipeline = Pipeline::new(1 << 16, 1 << 16);
    for i in 0..8u8 {
        pipeline.push(command(&[b"GET", &[i]]), i).unwrap();
    }
    let mut out = Vec::new();
    pipeline.take_unsent(&mut out, usize::MAX);
    let mut buf = BytesMut::new();
    for piece in data.chunks(chunk) {
        buf.put_slice(piece);
        loop {
            match decode(&mut buf, &LIMITS) {
                Ok(Some(_)) => {
                    if pipeline.on_reply().is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}
