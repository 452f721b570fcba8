//! Hub tests of latest-value channels: a subscriber that does not read
//! holds at most the newest frame per channel and key, however much is
//! published, and is never cut for it; frames already taken by its
//! writer are never touched; plain channels keep queuing behind.

use super::tests::{drain, hub_with, limits, ws, RAW};
use super::*;
use crate::meta::Meta;
use std::sync::Arc;

fn keyed(key: &str) -> Arc<Meta> {
    Arc::new(Meta::new(None, Some(key.into()), false).unwrap().unwrap())
}

fn conflating() -> Hub {
    let mut l = limits();
    l.max_outbound_queue = 1000;
    l.conflated = vec!["px".into()];
    hub_with(l)
}

#[test]
fn a_stalled_subscriber_holds_the_newest_value_per_key() {
    let mut hub = conflating();
    let id = ws(&mut hub, RAW);
    hub.subscribe(id, "px:a").unwrap();
    let (btc, eth) = (keyed("BTC"), keyed("ETH"));
    for i in 0..1000 {
        let body = format!("{i:04}");
        let m = if i % 2 == 0 { &btc } else { &eth };
        let n = hub.publish_tagged(("px:a", OpCode::Text, body.as_bytes(), Some(m)), None);
        assert_eq!(n, 1, "each publish still reaches the subscriber");
    }
    // Without a key: one value for the channel.
    hub.publish("px:a", OpCode::Text, b"k0", None);
    hub.publish("px:a", OpCode::Text, b"k1", None);
    let got = drain(&mut hub, id);
    let bodies: Vec<&[u8]> = got.iter().map(|f| &f[2..]).collect();
    assert_eq!(bodies, [&b"0998"[..], b"0999", b"k1"]);
    // Publish order holds: a replaced value goes last.
    hub.publish_tagged(("px:a", OpCode::Text, b"b1", Some(&btc)), None);
    hub.publish_tagged(("px:a", OpCode::Text, b"e1", Some(&eth)), None);
    hub.publish_tagged(("px:a", OpCode::Text, b"b2", Some(&btc)), None);
    let got = drain(&mut hub, id);
    let bodies: Vec<&[u8]> = got.iter().map(|f| &f[2..]).collect();
    assert_eq!(bodies, [&b"e1"[..], b"b2"]);
    assert_eq!(hub.stats.messages_conflated, 1000 - 2 + 1 + 1);
    assert_eq!(hub.stats.slow_consumer_disconnects, 0);
    // What the writer took is not replaced: the next value queues anew.
    let mut taken = Vec::new();
    hub.publish_tagged(("px:a", OpCode::Text, b"n1", Some(&btc)), None);
    hub.take_batch(id, &mut taken);
    hub.publish_tagged(("px:a", OpCode::Text, b"n2", Some(&btc)), None);
    hub.publish_tagged(("px:a", OpCode::Text, b"n3", Some(&btc)), None);
    assert_eq!(&taken[0][2..], b"n1");
    let n = taken.iter().map(Bytes::len).sum();
    hub.wrote(id, n);
    let got = drain(&mut hub, id);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0][2..], b"n3");
    assert_eq!(hub.total_pending(), 0, "the byte accounting balances");
}

#[test]
fn a_plain_channel_beside_it_still_cuts_a_stalled_subscriber() {
    let mut hub = conflating();
    let (a, b) = (ws(&mut hub, RAW), ws(&mut hub, RAW));
    hub.subscribe(a, "px:a").unwrap();
    hub.subscribe(b, "plain").unwrap();
    for _ in 0..200 {
        hub.publish("px:a", OpCode::Text, &[b'x'; 40], None);
        hub.publish("plain", OpCode::Text, &[b'x'; 40], None);
    }
    assert_eq!(hub.conn(a).unwrap().state(), ConnState::Open);
    assert_eq!(
        hub.conn(b).unwrap().state(),
        ConnState::Closing,
        "cut at the hard cap"
    );
    assert_eq!(hub.stats.slow_consumer_disconnects, 1);
    // A removed connection's notes go with it (its slab key is reused).
    hub.remove(a);
    assert_eq!(hub.latest.tracked(), 0);
}

#[test]
fn its_writer_takes_small_batches_so_the_rest_stays_replaceable() {
    let mut l = limits();
    l.conflated = vec!["px".into()];
    let mut hub = hub_with(l);
    let id = ws(&mut hub, RAW);
    hub.subscribe(id, "px:a").unwrap();
    for i in 0..100 {
        let k = keyed(&format!("k{i}"));
        hub.publish_tagged(("px:a", OpCode::Text, &[b'x'; 1000], Some(&k)), None);
    }
    let mut batch = Vec::new();
    hub.take_batch(id, &mut batch);
    let bytes: usize = batch.iter().map(Bytes::len).sum();
    assert_eq!(batch.len(), LATEST_BATCH_BYTES / 1004, "{bytes} bytes");
    // The frames left are still replaced in place of queuing behind.
    let k = keyed("k99");
    hub.publish_tagged(("px:a", OpCode::Text, b"newest", Some(&k)), None);
    assert_eq!(hub.stats.messages_conflated, 1);
}

#[test]
fn replaced_frames_are_charged_to_the_memory_budget() {
    let mut hub = conflating();
    let (a, b) = (ws(&mut hub, RAW), ws(&mut hub, RAW));
    hub.subscribe(a, "px:a").unwrap();
    hub.subscribe(b, "px:a").unwrap();
    for i in 0..50u8 {
        hub.publish("px:a", OpCode::Binary, &[i; 100], None);
    }
    // One frame (102 bytes) shared by both queues: charged once.
    assert_eq!(hub.outbound_memory(), 102);
    let written = |hub: &mut Hub, id| {
        let mut out = drain(hub, id);
        hub.release(&mut out);
    };
    written(&mut hub, a);
    assert_eq!(hub.outbound_memory(), 102, "b still holds it");
    written(&mut hub, b);
    assert_eq!(hub.outbound_memory(), 0);
}

#[test]
fn a_note_never_reaches_another_channels_frame() {
    let mut hub = conflating();
    let x = ws(&mut hub, RAW);
    hub.subscribe(x, "px:a").unwrap();
    hub.publish("px:a", OpCode::Text, b"a1", None);
    // px:a loses its last subscriber (its slab id is free for px:b) with
    // its frame still queued.
    hub.unsubscribe(x, "px:a");
    hub.subscribe(x, "px:b").unwrap();
    hub.publish("px:b", OpCode::Text, b"b1", None);
    hub.publish("px:b", OpCode::Text, b"b2", None);
    let got = drain(&mut hub, x);
    let bodies: Vec<&[u8]> = got.iter().map(|f| &f[2..]).collect();
    assert_eq!(bodies, [&b"a1"[..], b"b2"]);
}
