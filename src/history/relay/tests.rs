use bytes::Bytes;

use super::*;
use crate::ws::OpCode;

fn limits() -> HistoryLimits {
    HistoryLimits {
        size: 100,
        ttl_ms: 60_000,
        max_bytes: 1 << 20,
    }
}

fn entry(offset: u64) -> Entry {
    Entry {
        offset,
        opcode: OpCode::Text,
        payload: Bytes::from(format!("m{offset}")),
        meta: None,
    }
}

const CLOCK: (u64, usize) = (0, usize::MAX);

fn delivered(out: &[Action]) -> Vec<u64> {
    out.iter()
        .filter_map(|a| match a {
            Action::Deliver(e, _) => Some(e.offset),
            Action::Gap { .. } => None,
        })
        .collect()
}

fn gaps(out: &[Action]) -> Vec<u64> {
    out.iter()
        .filter_map(|a| match a {
            Action::Gap { at, .. } => Some(at.offset),
            Action::Deliver(..) => None,
        })
        .collect()
}

fn snap(epoch: &str, top: u64, offsets: impl IntoIterator<Item = u64>) -> Snapshot {
    Snapshot {
        epoch: epoch.into(),
        top,
        entries: offsets.into_iter().map(entry).collect(),
    }
}

#[test]
fn in_order_messages_pass_and_duplicates_are_dropped() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    for o in [5, 6, 6, 7, 3] {
        assert_eq!(r.arrive("c", "E", entry(o), CLOCK, &mut out), None);
    }
    assert_eq!(delivered(&out), [5, 6, 7]);
}

#[test]
fn a_gap_holds_later_messages_until_the_read_fills_it() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    r.arrive("c", "E", entry(1), CLOCK, &mut out);
    let fetch = r.arrive("c", "E", entry(4), CLOCK, &mut out).unwrap();
    assert_eq!((&*fetch.channel, fetch.from), ("c", 2));
    assert_eq!(r.arrive("c", "E", entry(5), CLOCK, &mut out), None, "held");
    assert_eq!(delivered(&out), [1]);
    // The read overlaps what is held: each offset once, in order.
    r.fetched(&fetch, Some(snap("E", 5, 2..=5)), CLOCK, &mut out);
    assert_eq!(delivered(&out), [1, 2, 3, 4, 5]);
    assert_eq!((r.backfilled, r.gaps), (4, 0));
    r.arrive("c", "E", entry(6), CLOCK, &mut out);
    assert_eq!(delivered(&out), [1, 2, 3, 4, 5, 6]);
}

#[test]
fn a_range_redis_no_longer_has_is_a_gap_not_a_silent_loss() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    r.arrive("c", "E", entry(1), CLOCK, &mut out);
    let f = r.arrive("c", "E", entry(50), CLOCK, &mut out).unwrap();
    // Trimmed: the stream starts at 40.
    r.fetched(&f, Some(snap("E", 50, 40..=50)), CLOCK, &mut out);
    assert_eq!(gaps(&out), [39]);
    assert_eq!(
        delivered(&out),
        [1].into_iter().chain(40..=50).collect::<Vec<_>>()
    );
    // A failed read: the held message goes out after a gap.
    let f = r.arrive("c", "E", entry(60), CLOCK, &mut out).unwrap();
    r.fetched(&f, None, CLOCK, &mut out);
    assert_eq!(gaps(&out), [39, 59]);
    assert_eq!(*delivered(&out).last().unwrap(), 60);
    assert_eq!(r.gaps, 2);
}

#[test]
fn a_new_epoch_is_announced_and_its_first_messages_are_read() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    r.arrive("c", "E", entry(7), CLOCK, &mut out);
    let f = r.arrive("c", "F", entry(3), CLOCK, &mut out).unwrap();
    assert_eq!(f.from, 1);
    r.fetched(&f, Some(snap("F", 3, 1..=3)), CLOCK, &mut out);
    assert_eq!(delivered(&out), [7, 1, 2, 3]);
    let lost = |out: &[Action]| {
        out.iter()
            .any(|a| matches!(a, Action::Gap { lost: true, .. }))
    };
    assert_eq!(gaps(&out), [0], "the epoch change is announced");
    assert!(!lost(&out), "nothing of F was missed");
    let mut out = Vec::new();
    r.arrive("c", "G", entry(1), CLOCK, &mut out);
    assert_eq!((gaps(&out), delivered(&out)), (vec![0], vec![1]));
    assert!(!lost(&out));
    // A new epoch whose first messages Redis no longer has: lost.
    let mut out = Vec::new();
    let f = r.arrive("c", "H", entry(9), CLOCK, &mut out).unwrap();
    r.fetched(&f, Some(snap("H", 9, 5..=9)), CLOCK, &mut out);
    assert_eq!(
        (gaps(&out), delivered(&out)),
        (vec![0, 4], (5..=9).collect())
    );
    assert!(lost(&out));
    assert_eq!(r.gaps, 1);
}

#[test]
fn catch_up_reads_after_what_each_channel_got() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    r.arrive("a", "E", entry(3), CLOCK, &mut out);
    let fetches = r.catch_up(&[Rc::from("a"), Rc::from("unknown")]);
    assert_eq!(
        (fetches.len(), &*fetches[0].channel, fetches[0].from),
        (1, "a", 3),
        "from the oldest it holds (checked against Redis for a rollback)"
    );
    r.arrive("a", "E", entry(6), CLOCK, &mut out);
    r.fetched(&fetches[0], Some(snap("E", 6, 3..=6)), CLOCK, &mut out);
    assert_eq!(delivered(&out), [3, 4, 5, 6]);
}

#[test]
fn a_cold_resume_replays_the_read_and_starts_the_ring_there() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    let got = r.resume(
        "c",
        Some(("E", 10)),
        snap("E", 110, 11..=110),
        false,
        CLOCK,
        &mut out,
    );
    assert_eq!(got.recovered, Some(true));
    assert_eq!(
        got.replay.iter().map(|e| e.offset).collect::<Vec<_>>(),
        (11..=110).collect::<Vec<_>>()
    );
    assert_eq!(got.position.offset, 110);
    assert!(out.is_empty());
    r.arrive("c", "E", entry(111), CLOCK, &mut out);
    assert_eq!(delivered(&out), [111]);
    // Trimmed, wrong epoch, from the future: not recovered, no replay.
    for (since, s) in [
        (("E", 5), snap("E", 110, 11..=110)),
        (("X", 10), snap("E", 110, 11..=110)),
        (("E", 200), snap("E", 110, [])),
    ] {
        let got = r.resume("d", Some(since), s, false, CLOCK, &mut out);
        assert_eq!(
            (got.recovered, got.replay.len()),
            (Some(false), 0),
            "{since:?}"
        );
    }
}

#[test]
fn a_warm_resume_brings_local_subscribers_up_to_the_read_first() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    for o in 1..=5 {
        r.arrive("c", "E", entry(o), CLOCK, &mut out);
    }
    // Redis is at 8; 6..8 are still on their way to this instance.
    let got = r.resume(
        "c",
        Some(("E", 3)),
        snap("E", 8, 4..=8),
        true,
        CLOCK,
        &mut out,
    );
    assert_eq!(delivered(&out), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(got.recovered, Some(true));
    assert_eq!(
        got.replay.iter().map(|e| e.offset).collect::<Vec<_>>(),
        [4, 5, 6, 7, 8]
    );
    let mut later = Vec::new();
    r.arrive("c", "E", entry(7), CLOCK, &mut later);
    assert!(later.is_empty(), "arrives late: already delivered");
    // Plain subscribe: the position, nothing else.
    let got = r.resume("c", None, snap("E", 8, []), true, CLOCK, &mut out);
    assert_eq!((got.position.offset, got.recovered), (8, None));
}

#[test]
fn the_sweep_forgets_channels_nobody_here_receives() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    r.arrive("kept", "E", entry(1), CLOCK, &mut out);
    r.arrive("gone", "E", entry(1), CLOCK, &mut out);
    r.sweep(10, |c| c == "kept");
    assert!(r.history().peek("gone").is_none());
    assert_eq!(r.history().messages(), 1);
    r.sweep(60_000, |c| c == "kept");
    assert_eq!(
        (
            r.history().messages(),
            r.history().peek("kept").unwrap().offset
        ),
        (0, 1)
    );
}

#[test]
fn a_read_the_channel_no_longer_waits_for_is_ignored() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    r.arrive("c", "E", entry(1), CLOCK, &mut out);
    let stale = r.arrive("c", "E", entry(5), CLOCK, &mut out).unwrap();
    // The last local subscriber left and a new one started the ring at 20.
    r.resume("c", None, snap("E", 20, []), false, CLOCK, &mut out);
    r.fetched(&stale, Some(snap("E", 20, 2..=20)), CLOCK, &mut out);
    assert_eq!(delivered(&out), [1], "nothing from the stale read");
    assert!(gaps(&out).is_empty());
    r.arrive("c", "E", entry(21), CLOCK, &mut out);
    assert_eq!(delivered(&out), [1, 21]);
    // Same range, new read: the older reply (shorter) is still stale.
    r.resume("c", None, snap("E", 21, []), false, CLOCK, &mut out);
    let fresh = r.arrive("c", "E", entry(30), CLOCK, &mut out).unwrap();
    let old = Fetch {
        id: fresh.id - 1,
        ..fresh.clone()
    };
    r.fetched(&old, Some(snap("E", 23, 22..=23)), CLOCK, &mut out);
    r.fetched(&fresh, Some(snap("E", 30, 22..=30)), CLOCK, &mut out);
    assert_eq!(
        delivered(&out),
        [1, 21].into_iter().chain(22..=30).collect::<Vec<_>>()
    );
    assert!(gaps(&out).is_empty());
}

#[test]
fn a_resume_while_a_read_is_in_flight_fills_the_gap_itself() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    r.arrive("c", "E", entry(1), CLOCK, &mut out);
    let f = r.arrive("c", "E", entry(5), CLOCK, &mut out).unwrap();
    r.arrive("c", "E", entry(6), CLOCK, &mut out);
    let got = r.resume(
        "c",
        Some(("E", 1)),
        snap("E", 4, 2..=4),
        true,
        CLOCK,
        &mut out,
    );
    assert_eq!(got.recovered, Some(true));
    assert_eq!(
        got.replay.iter().map(|e| e.offset).collect::<Vec<_>>(),
        [2, 3, 4]
    );
    r.fetched(&f, Some(snap("E", 6, 2..=6)), CLOCK, &mut out);
    assert_eq!(delivered(&out), [1, 2, 3, 4, 5, 6]);
}

#[test]
fn a_resume_read_is_made_again_when_it_does_not_meet_the_ring() {
    let small = HistoryLimits {
        size: 3,
        ..limits()
    };
    let mut r = Relay::new(small, 1);
    let mut out = Vec::new();
    for o in 1..=10 {
        r.arrive("c", "E", entry(o), CLOCK, &mut out);
    }
    // This instance is behind the read (11..12 still on their way).
    assert!(r.behind("c", true, &snap("E", 12, 12..=12)));
    // The read is older than the ring (it holds 8..=10 only).
    assert!(r.behind("c", true, &snap("E", 5, 3..=5)));
    // Meets the ring, or nobody here is subscribed: go ahead.
    assert!(!r.behind("c", true, &snap("E", 12, 9..=12)));
    assert!(!r.behind("c", true, &snap("E", 8, 3..=8)));
    assert!(!r.behind("c", false, &snap("E", 12, 12..=12)));
}

#[test]
fn a_read_cut_short_continues_before_what_is_held() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    r.arrive("c", "E", entry(1), CLOCK, &mut out);
    let f = r.arrive("c", "E", entry(9), CLOCK, &mut out).unwrap();
    // Redis is at 9 but the byte bound stopped the read at 4.
    let next = r
        .fetched(&f, Some(snap("E", 9, 2..=4)), CLOCK, &mut out)
        .unwrap();
    assert_eq!(next.from, 5);
    assert_eq!(delivered(&out), [1, 2, 3, 4], "9 stays held");
    assert_eq!(
        r.fetched(&next, Some(snap("E", 9, 5..=9)), CLOCK, &mut out),
        None
    );
    assert_eq!(delivered(&out), (1..=9).collect::<Vec<_>>());
    assert!(gaps(&out).is_empty());
}

/// A failover to a replica that missed the last writes: Redis's position
/// is below ours. The catch-up read covers what was delivered; the gap
/// notice says where Redis's history ends, and the offsets it hands out
/// again are delivered.
#[test]
fn a_catch_up_read_finds_a_rolled_back_redis_and_says_so() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    for o in 1..=10 {
        r.arrive("c", "E", entry(o), CLOCK, &mut out);
    }
    let fetches = r.catch_up(&["c".into()]);
    assert_eq!(fetches[0].from, 1, "from the oldest entry held");
    out.clear();
    // Redis kept 1..=7: 8, 9 and 10 were lost.
    assert_eq!(
        r.fetched(&fetches[0], Some(snap("E", 7, 1..=7)), CLOCK, &mut out),
        None
    );
    assert_eq!((gaps(&out), delivered(&out)), (vec![7], vec![]));
    assert_eq!(r.rollbacks, 1);
    out.clear();
    let new = Entry {
        payload: Bytes::from_static(b"new 8"),
        ..entry(8)
    };
    r.arrive("c", "E", new, CLOCK, &mut out);
    assert_eq!(delivered(&out), [8], "the reused offset is delivered");
}

/// The reused offsets were written before the read: the first entry that
/// differs from the one delivered is where Redis's history forked.
#[test]
fn a_catch_up_read_finds_where_redis_forked_from_what_was_delivered() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    for o in 1..=10 {
        r.arrive("c", "E", entry(o), CLOCK, &mut out);
    }
    let fetches = r.catch_up(&["c".into()]);
    out.clear();
    let mut s = snap("E", 12, 1..=12);
    for e in s.entries.iter_mut().filter(|e| e.offset >= 9) {
        e.payload = Bytes::from(format!("new {}", e.offset));
    }
    r.fetched(&fetches[0], Some(s), CLOCK, &mut out);
    assert_eq!(gaps(&out), [8]);
    assert_eq!(delivered(&out), [9, 10, 11, 12]);
    // Nothing lost: what the ring holds matches, only new entries pass.
    let fetches = r.catch_up(&["c".into()]);
    out.clear();
    assert_eq!(fetches[0].from, 9, "the ring starts at the gap");
    let same: Vec<Entry> = (9..=12)
        .map(|o| {
            r.history()
                .entry("c", o)
                .cloned()
                .unwrap_or_else(|| entry(o))
        })
        .chain([entry(13)])
        .collect();
    let s = Snapshot {
        epoch: "E".into(),
        top: 13,
        entries: same,
    };
    r.fetched(&fetches[0], Some(s), CLOCK, &mut out);
    assert_eq!((gaps(&out), delivered(&out)), (vec![], vec![13]));
    assert_eq!(r.rollbacks, 1);
}

/// A read cut short by its byte bound: its first part matches what was
/// delivered and stops below our position; that is not a rollback, the
/// next part finds the fork.
#[test]
fn a_cut_read_is_not_taken_for_a_rollback() {
    let mut r = Relay::new(limits(), 1);
    let mut out = Vec::new();
    for o in 1..=10 {
        r.arrive("c", "E", entry(o), CLOCK, &mut out);
    }
    let f = r.catch_up(&["c".into()]).remove(0);
    out.clear();
    let next = r.fetched(&f, Some(snap("E", 12, 1..=5)), CLOCK, &mut out);
    let next = next.expect("reads on");
    assert_eq!((next.from, gaps(&out)), (6, vec![]));
    let mut s = snap("E", 12, 6..=12);
    s.entries[3].payload = Bytes::from_static(b"forked"); // offset 9
    r.fetched(&next, Some(s), CLOCK, &mut out);
    assert_eq!(
        (gaps(&out), delivered(&out)),
        (vec![8], vec![9, 10, 11, 12])
    );
}
