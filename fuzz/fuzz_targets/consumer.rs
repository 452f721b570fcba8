//! What a consumer reads from peers it does not control: a Redis server's
//! replies to `XREADGROUP`/`XAUTOCLAIM` (through the bounded RESP decoder,
//! then `consumer::stream`), and frames on the consumers' bridge
//! (`consumer::bridge::decode`). Over arbitrary bytes: no panic, bounds
//! kept.
#![no_main]
use bytes::BytesMut;
use corecast::consumer::bridge::{self, Reply, Request};
use corecast::consumer::stream;
use corecast::redis::resp::{self, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    let limits = Limits::default();
    while let Ok(Some(reply)) = resp::decode(&mut buf, &limits) {
        if let Ok(entries) = stream::read_reply(&reply) {
            for e in &entries {
                let _ = (e.text("channel"), e.text("data"), e.has("tags"));
            }
        }
        let _ = stream::autoclaim_reply(&reply);
    }
    let mut buf = BytesMut::from(data);
    while let Ok(Some(_)) = bridge::decode::<Request>(&mut buf, 4096) {}
    let mut buf = BytesMut::from(data);
    while let Ok(Some(r)) = bridge::decode::<Reply>(&mut buf, 4096) {
        let _ = (r.accepted(), r.poison());
    }
});
