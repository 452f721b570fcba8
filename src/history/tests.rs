use super::*;

fn limits(size: usize, max_bytes: usize) -> HistoryLimits {
    HistoryLimits {
        size,
        ttl_ms: 1_000,
        max_bytes,
    }
}

fn push(h: &mut History, channel: &str, payload: &str, now: u64) -> Position {
    let p = Bytes::copy_from_slice(payload.as_bytes());
    h.append(channel, (OpCode::Text, p, None), now, usize::MAX)
}

fn offsets(entries: &[Entry]) -> Vec<u64> {
    entries.iter().map(|e| e.offset).collect()
}

#[test]
fn offsets_count_from_one_per_channel_under_one_epoch() {
    let mut h = History::new(limits(10, 1 << 20), 7);
    let start = h.position("a", 0);
    assert_eq!(start.offset, 0);
    assert_eq!(
        push(&mut h, "a", "x", 1),
        Position {
            epoch: start.epoch.clone(),
            offset: 1
        }
    );
    assert_eq!(push(&mut h, "a", "y", 2).offset, 2);
    let b = push(&mut h, "b", "z", 3);
    assert_eq!(b.offset, 1);
    assert_ne!(b.epoch, start.epoch, "every history gets its own epoch");
    assert_eq!(h.messages(), 3);
    let other = History::new(limits(10, 1 << 20), 8).position("a", 0);
    assert_ne!(
        other.epoch, start.epoch,
        "another process mints other epochs"
    );
}

#[test]
fn recovery_gives_exactly_what_follows_the_position() {
    let mut h = History::new(limits(10, 1 << 20), 1);
    let e = h.position("a", 0).epoch;
    for i in 1..=5 {
        push(&mut h, "a", &format!("m{i}"), i);
    }
    assert_eq!(offsets(&h.recover("a", (&e, 2)).unwrap()), [3, 4, 5]);
    assert_eq!(h.recover("a", (&e, 5)).unwrap(), [], "nothing missed");
    assert_eq!(offsets(&h.recover("a", (&e, 0)).unwrap()), [1, 2, 3, 4, 5]);
    let pos = h.recover("a", ("other", 2)).unwrap_err().unwrap();
    assert_eq!((pos.epoch, pos.offset), (e.clone(), 5), "wrong epoch");
    assert!(
        h.recover("a", (&e, 6)).is_err(),
        "a position from the future"
    );
    assert_eq!(h.recover("nope", (&e, 0)), Err(None));
}

#[test]
fn size_trimming_makes_older_positions_unrecoverable() {
    let mut h = History::new(limits(3, 1 << 20), 1);
    let e = h.position("a", 0).epoch;
    for i in 1..=5 {
        push(&mut h, "a", "m", i);
    }
    assert_eq!(h.messages(), 3);
    assert_eq!(offsets(&h.recover("a", (&e, 2)).unwrap()), [3, 4, 5]);
    assert!(h.recover("a", (&e, 1)).is_err(), "offset 2 was trimmed");
}

#[test]
fn the_byte_bound_trims_oldest_and_skips_what_never_fits() {
    let per = 10 + ENTRY_OVERHEAD;
    let mut h = History::new(limits(100, 3 * per), 1);
    let e = h.position("a", 0).epoch;
    for _ in 0..5 {
        push(&mut h, "a", "0123456789", 0);
    }
    assert_eq!(h.messages(), 3);
    assert_eq!(h.bytes(), RING_OVERHEAD + 1 + 3 * per);
    // Larger than the whole bound: counted (offset 6) but not kept, so
    // nobody can recover across it.
    push(&mut h, "a", &"x".repeat(4 * per), 0);
    assert_eq!(h.messages(), 0);
    assert!(h.recover("a", (&e, 5)).is_err());
    assert_eq!(h.recover("a", (&e, 6)).unwrap(), []);
}

#[test]
fn the_budget_room_trims_the_publishing_channel() {
    let per = 10 + ENTRY_OVERHEAD;
    let mut h = History::new(limits(100, 1 << 20), 1);
    let room = RING_OVERHEAD + 1 + 2 * per;
    for _ in 0..5 {
        h.append(
            "a",
            (OpCode::Text, Bytes::from_static(b"0123456789"), None),
            0,
            room,
        );
    }
    assert_eq!(h.messages(), 2);
    assert!(h.bytes() <= room);
}

#[test]
fn ttl_drops_messages_and_forgets_unwatched_channels() {
    let mut h = History::new(limits(10, 1 << 20), 1);
    let ea = push(&mut h, "a", "m", 0).epoch;
    push(&mut h, "b", "m", 0);
    push(&mut h, "c", "m", 900);
    assert_eq!(h.sweep(999, |_| false), 0);
    // "a" has a subscriber: its position (epoch) survives, its messages not.
    assert_eq!(h.sweep(1_000, |c| c == "a"), 1);
    assert_eq!(h.channels(), 2);
    assert_eq!(h.messages(), 1);
    assert_eq!(h.recover("a", (&ea, 1)).unwrap(), []);
    assert!(h.recover("a", (&ea, 0)).is_err());
    assert!(h.peek("b").is_none());
    assert_eq!(h.sweep(1_900, |_| false), 2);
    assert_eq!((h.bytes(), h.messages()), (0, 0));
    assert_ne!(
        h.position("a", 2_000).epoch,
        ea,
        "a lost history has a new epoch"
    );
}

#[test]
fn read_pages_through_what_is_held() {
    let mut h = History::new(limits(10, 1 << 20), 1);
    for _ in 0..6 {
        push(&mut h, "a", "m", 0);
    }
    let (pos, page) = h.read("a", 1, 2).unwrap();
    assert_eq!((pos.offset, offsets(&page)), (6, vec![2, 3]));
    assert_eq!(offsets(&h.read("a", 5, 10).unwrap().1), [6]);
    assert!(h.read("a", 6, 10).unwrap().1.is_empty());
    assert!(h.read("none", 0, 10).is_none());
}

#[test]
fn stored_positions_report_gaps_duplicates_and_new_epochs() {
    let mut h = History::new(limits(10, 1 << 20), 1);
    let put = |h: &mut History, e: &str, o: u64| {
        h.store(
            "a",
            (e, o),
            (OpCode::Text, Bytes::from_static(b"m"), None),
            0,
            usize::MAX,
        )
    };
    assert_eq!(
        h.classify("a", ("E", 4)),
        Stored::InOrder,
        "a first message starts the ring"
    );
    assert_eq!(put(&mut h, "E", 4), Stored::InOrder);
    assert_eq!(put(&mut h, "E", 5), Stored::InOrder);
    assert_eq!(put(&mut h, "E", 5), Stored::Duplicate);
    assert_eq!(offsets(&h.recover("a", ("E", 3)).unwrap()), [4, 5]);
    assert_eq!(put(&mut h, "E", 8), Stored::Gap { from: 6, to: 7 });
    assert!(h.recover("a", ("E", 5)).is_err(), "the gap is not held");
    assert_eq!(put(&mut h, "F", 1), Stored::NewEpoch);
    assert_eq!(
        h.peek("a").unwrap(),
        Position {
            epoch: "F".into(),
            offset: 1
        }
    );
    assert_eq!(h.messages(), 1);
    h.reset("a", ("F", 9), 0);
    assert_eq!((h.messages(), h.peek("a").unwrap().offset), (0, 9));
    assert_eq!(put(&mut h, "F", 10), Stored::InOrder);
    h.reset("a", ("F", 10), 0);
    assert_eq!(h.messages(), 1, "a reset to where the ring is keeps it");
}

#[test]
fn a_namespace_has_its_own_size_bytes_and_ttl() {
    let chat = HistoryLimits {
        size: 2,
        ttl_ms: 5_000,
        max_bytes: 1 << 20,
    };
    let off = HistoryLimits::default();
    let ns = NamespaceLimits(vec![("chat".into(), chat), ("off".into(), off)]);
    let mut h = History::new(limits(10, 1 << 20), 1).with_namespaces(ns);
    assert!(h.enabled_for("plain") && h.enabled_for("chat:a") && !h.enabled_for("off:a"));
    assert!(
        h.enabled_for("other:a"),
        "not a namespace here: the default"
    );
    for n in 0..4 {
        push(&mut h, "chat:a", "x", n);
        push(&mut h, "plain", "x", n);
    }
    assert_eq!(offsets(&h.read("chat:a", 0, 10).unwrap().1), [3, 4]);
    assert_eq!(h.read("plain", 0, 10).unwrap().1.len(), 4);
    // The default ttl (1 s) has passed, chat's (5 s) has not.
    h.sweep(2_000, |_| true);
    assert!(h.read("plain", 0, 10).unwrap().1.is_empty());
    assert_eq!(h.read("chat:a", 0, 10).unwrap().1.len(), 2);
    let none = NamespaceLimits::default();
    assert_eq!(none.of("chat:a", &chat), chat);
}
