//! Hub tests of deltas: a subscriber is sent a delta only when it was
//! given the publication the delta is made from; a (re)subscribe, a
//! publication filtered out, a binary one or a full queue leaves it
//! without a base, so its next message is full; the delta is made once
//! and shared; the bases follow their subscribers through swaps.

use super::tests::{drain, limits, ws};
use super::*;
use crate::delta;
use crate::filter::{Filter, Tags};
use crate::meta::Meta;
use std::sync::Arc;

const JSONISH: ConnKind = ConnKind::Ws(Format::new(2));

/// A format that shows what it was given: `D:` and the delta, or `F:`
/// and the payload.
fn hub() -> Hub {
    let encoders = Encoders::new().with(Format::new(2), |d| match d.patch {
        Some(p) => encode_server_frame(OpCode::Text, format!("D:{p}").as_bytes()),
        None => encode_server_frame(d.opcode, &[b"F:", d.payload].concat()),
    });
    Hub::new(limits(), encoders)
}

fn asks() -> Arc<Meta> {
    Arc::new(Meta::new(None, None, true).unwrap().unwrap())
}

fn doc(n: u32) -> Vec<u8> {
    let rows: String = (0..40)
        .map(|i| format!("{{\"row\":{i},\"v\":{}}},", i + n))
        .collect();
    format!("{{\"n\":{n},\"rows\":[{rows}]}}").into_bytes()
}

fn publish(hub: &mut Hub, payload: &[u8]) -> usize {
    hub.publish_tagged(("c", OpCode::Text, payload, Some(&asks())), None)
}

/// Each frame as (was a delta, the payload it stands for), applying
/// deltas against the previous one, as a client does.
fn read(hub: &mut Hub, id: ConnId, base: &mut Option<Vec<u8>>) -> Vec<(bool, Vec<u8>)> {
    let mut out = Vec::new();
    for f in drain(hub, id) {
        let body = body(&f);
        let (is_delta, rest) = (body.starts_with(b"D:"), &body[2..]);
        let full = if is_delta {
            let b = base.as_deref().expect("a delta only after a full message");
            delta::apply(b, rest, 1 << 20).expect("the delta's base is the previous message")
        } else {
            rest.to_vec()
        };
        *base = Some(full.clone());
        out.push((is_delta, full));
    }
    out
}

/// A frame's payload (short frames here: no mask, at most 64 KiB).
fn body(f: &Bytes) -> &[u8] {
    &f[2 + if f[1] & 0x7f == 126 { 2 } else { 0 }..]
}

fn subscribe(hub: &mut Hub, id: ConnId, on: bool) {
    hub.subscribe_filtered(id, "c", Filtering::Replace(None, on))
        .unwrap();
}

#[test]
fn only_a_subscriber_with_the_base_gets_the_delta() {
    let mut hub = hub();
    let (a, plain) = (ws(&mut hub, JSONISH), ws(&mut hub, JSONISH));
    subscribe(&mut hub, a, true);
    subscribe(&mut hub, plain, false);
    assert!(hub.delta_of(a, "c") && !hub.delta_of(plain, "c"));
    let (mut base_a, mut base_p) = (None, None);
    for n in 0..3 {
        assert_eq!(publish(&mut hub, &doc(n)), 2);
    }
    let got = read(&mut hub, a, &mut base_a);
    let kinds: Vec<bool> = got.iter().map(|g| g.0).collect();
    assert_eq!(kinds, [false, true, true], "full first, then deltas");
    assert!(got.iter().zip(0..).all(|(g, n)| g.1 == doc(n)));
    let plain_got = read(&mut hub, plain, &mut base_p);
    assert!(
        plain_got.iter().all(|g| !g.0),
        "never a delta without asking"
    );
    // A later subscriber starts full, the first one goes on with deltas.
    let b = ws(&mut hub, JSONISH);
    subscribe(&mut hub, b, true);
    publish(&mut hub, &doc(3));
    assert!(read(&mut hub, a, &mut base_a)[0].0);
    let mut base_b = None;
    assert_eq!(read(&mut hub, b, &mut base_b)[0], (false, doc(3)));
    // Not asked (no meta, no delta-publish): full for everyone.
    hub.publish("c", OpCode::Text, &doc(4), None);
    assert_eq!(read(&mut hub, a, &mut base_a)[0], (false, doc(4)));
}

#[test]
fn a_resubscribe_with_nothing_replayed_starts_full() {
    // Centrifugo's bug (centrifuge#629): a resumed subscriber got a delta
    // against a base it never had.
    let mut hub = hub();
    let a = ws(&mut hub, JSONISH);
    subscribe(&mut hub, a, true);
    let mut base = None;
    publish(&mut hub, &doc(0));
    read(&mut hub, a, &mut base);
    // The client resubscribes (a resume that replays nothing): whatever it
    // holds, the server no longer assumes it.
    subscribe(&mut hub, a, true);
    publish(&mut hub, &doc(1));
    let got = read(&mut hub, a, &mut None);
    assert_eq!(got, [(false, doc(1))], "full after a resubscribe");
}

#[test]
fn a_skipped_or_binary_publication_breaks_the_chain() {
    let mut hub = hub();
    let (a, b) = (ws(&mut hub, JSONISH), ws(&mut hub, JSONISH));
    subscribe(&mut hub, a, true);
    subscribe(&mut hub, b, true);
    let only_x = Filter::parse(br#"{"key":"k","cmp":"eq","val":"x"}"#).unwrap();
    hub.set_filters(b, "c", Some(Rc::from(vec![only_x])));
    let tagged = |k: &str| {
        let tags = Tags::parse(format!(r#"{{"k":"{k}"}}"#).as_bytes()).unwrap();
        Arc::new(Meta::new(Some(tags), None, true).unwrap().unwrap())
    };
    let (mut base_a, mut base_b) = (None, None);
    for (n, k) in [(0, "x"), (1, "y"), (2, "x"), (3, "x")] {
        hub.publish_tagged(("c", OpCode::Text, &doc(n), Some(&tagged(k))), None);
    }
    let kinds = |g: Vec<(bool, Vec<u8>)>| g.iter().map(|g| g.0).collect::<Vec<_>>();
    assert_eq!(
        kinds(read(&mut hub, a, &mut base_a)),
        [false, true, true, true]
    );
    // b missed 1 (filtered out): 2 comes full, 3 as a delta of 2.
    assert_eq!(kinds(read(&mut hub, b, &mut base_b)), [false, false, true]);
    hub.publish_tagged(("c", OpCode::Binary, b"\x00\x01", Some(&asks())), None);
    publish(&mut hub, &doc(5));
    let got = read(&mut hub, a, &mut base_a);
    assert_eq!((got[0].0, got[1].0), (false, false), "after binary: full");
}

#[test]
fn the_delta_is_made_once_and_bases_follow_swaps() {
    let mut hub = hub();
    let ids: Vec<ConnId> = (0..4).map(|_| ws(&mut hub, JSONISH)).collect();
    for (i, &id) in ids.iter().enumerate() {
        subscribe(&mut hub, id, i != 1);
    }
    publish(&mut hub, &doc(0));
    // ids[0] leaves: ids[3] moves into its slot, with its base.
    hub.unsubscribe(ids[0], "c");
    publish(&mut hub, &doc(1));
    let frames: Vec<Vec<Bytes>> = ids[1..].iter().map(|&id| drain(&mut hub, id)).collect();
    let second: Vec<&Bytes> = frames.iter().map(|f| &f[1]).collect();
    assert!(body(second[0]).starts_with(b"F:"), "ids[1] did not ask");
    assert!(body(second[1]).starts_with(b"D:") && body(second[2]).starts_with(b"D:"));
    assert_eq!(
        second[1].as_ptr(),
        second[2].as_ptr(),
        "one delta frame, shared"
    );
    // The last delta subscriber leaving drops the channel's state.
    for &id in &ids[1..] {
        hub.unsubscribe(id, "c");
    }
    assert!(!hub.delta_of(ids[2], "c"));
}
