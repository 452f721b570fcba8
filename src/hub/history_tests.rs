//! Hub tests of embedded history: offsets on deliveries, a resume's
//! replay queued with the subscribe (nothing live can come between),
//! internal channels kept out, and the memory budget's precedence.

use super::tests::{drain, limits, ws};
use super::*;
use crate::history::HistoryLimits;

/// A format that shows the offset the hub handed the encoder.
const OFFSETS: ConnKind = ConnKind::Ws(Format::new(2));

fn hub(size: usize) -> Hub {
    let mut l = limits();
    l.history = HistoryLimits {
        size,
        ttl_ms: 60_000,
        max_bytes: 1 << 20,
    };
    let enc = Encoders::new().with(Format::new(2), |d| {
        let body = format!("{}:{}", d.offset, String::from_utf8_lossy(d.payload));
        encode_server_frame(d.opcode, body.as_bytes())
    });
    Hub::new(l, enc)
}

fn texts(frames: &[Bytes]) -> Vec<String> {
    frames
        .iter()
        .map(|f| String::from_utf8_lossy(&f[2..]).into_owned())
        .collect()
}

#[test]
fn deliveries_carry_offsets_and_a_resume_replays_exactly_what_was_missed() {
    let mut hub = hub(100);
    let a = ws(&mut hub, OFFSETS);
    let first = hub
        .subscribe_from(a, "c", None, Filtering::Replace(None, false))
        .unwrap()
        .unwrap();
    assert_eq!((first.position.offset, first.recovered), (0, None));
    for m in ["x", "y", "z"] {
        hub.publish("c", OpCode::Text, m.as_bytes(), None);
    }
    assert_eq!(texts(&drain(&mut hub, a)), ["1:x", "2:y", "3:z"]);
    let b = ws(&mut hub, OFFSETS);
    let epoch = first.position.epoch.clone();
    let r = hub
        .subscribe_from(b, "c", Some((&epoch, 1)), Filtering::Replace(None, false))
        .unwrap()
        .unwrap();
    assert_eq!((r.recovered, r.position.offset), (Some(true), 3));
    let replayed: Vec<u64> = r.replay.iter().map(|e| e.offset).collect();
    assert_eq!(replayed, [2, 3]);
    hub.publish("c", OpCode::Text, b"live", None);
    assert_eq!(texts(&drain(&mut hub, b)), ["4:live"]);
    assert_eq!((hub.stats.recoveries, hub.stats.recovered_messages), (1, 2));
    let lost = hub
        .subscribe_from(b, "c", Some(("other", 1)), Filtering::Replace(None, false))
        .unwrap()
        .unwrap();
    assert_eq!((lost.recovered, lost.replay.len()), (Some(false), 0));
    assert_eq!(hub.stats.recoveries_failed, 1);
}

#[test]
fn internal_channels_and_history_off_keep_nothing() {
    let mut hub = hub(100);
    hub.publish("!status", OpCode::Text, b"{}", None);
    assert_eq!(hub.history_usage(), (0, 0));
    let mut off = hub_with_history_off();
    let a = ws(&mut off, OFFSETS);
    assert_eq!(
        off.subscribe_from(a, "c", None, Filtering::Replace(None, false))
            .unwrap(),
        None
    );
    off.publish("c", OpCode::Text, b"m", None);
    assert_eq!(texts(&drain(&mut off, a)), ["0:m"]);
}

fn hub_with_history_off() -> Hub {
    let mut h = hub(0);
    h.history = History::new(HistoryLimits::default(), 0);
    h
}

#[test]
fn history_only_uses_what_outbound_frames_leave_of_the_budget() {
    let mut l = limits();
    l.max_total_outbound = 4096;
    l.history = HistoryLimits {
        size: 1000,
        ttl_ms: 60_000,
        max_bytes: 1 << 20,
    };
    let mut hub = Hub::new(
        l,
        Encoders::new().with(Format::new(2), |d| encode_server_frame(d.opcode, d.payload)),
    );
    // A subscriber that does not read holds ~3 KiB of frames.
    let a = ws(&mut hub, OFFSETS);
    hub.subscribe(a, "c").unwrap();
    for _ in 0..30 {
        hub.publish("c", OpCode::Binary, &[0; 100], None);
    }
    let (_, bytes) = hub.history_usage();
    assert!(
        bytes + hub.outbound_memory() <= 4096 + 148,
        "{bytes} + {}",
        hub.outbound_memory()
    );
    assert!(bytes > 0);
}
