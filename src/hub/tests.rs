use super::pacer::HELD_LIMIT;
use super::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

/// The documented defaults (`config::OPTIONS`), written out: the hub does
/// not read the configuration.
pub(super) fn limits() -> HubLimits {
    HubLimits {
        max_outbound_queue: 1 << 20,
        slow_consumer: SlowConsumerPolicy::Disconnect,
        slow_grace_ms: 1_000,
        write_stall_timeout_ms: 10_000,
        max_subscriptions: 64,
        max_connections: 50_000,
        max_total_outbound: 1 << 30,
        histograms: true,
        exclude_sender: false,
        fanout_window: 256,
        ping_interval_ms: 30_000,
        idle_timeout_ms: 75_000,
        handshake_timeout_ms: 10_000,
        close_timeout_ms: 5_000,
        history: Default::default(),
        ns_history: Default::default(),
        conflated: Vec::new(),
        delta_publish: Vec::new(),
    }
}

/// Test formats: the frame as published, and a tagged frame standing in
/// for an envelope (the real encoders are the edge's, `server::formats`).
pub(super) const RAW: ConnKind = ConnKind::Ws(Format::new(0));
pub(super) const TAGGED: ConnKind = ConnKind::Ws(Format::new(1));

pub(super) fn encoders() -> Encoders {
    Encoders::new()
        .with(Format::new(0), |d| encode_server_frame(d.opcode, d.payload))
        .with(Format::new(1), |d| {
            let body = [d.channel.as_bytes(), b":", d.payload].concat();
            encode_server_frame(d.opcode, &body)
        })
}

pub(super) fn hub_with(limits: HubLimits) -> Hub {
    Hub::new(limits, encoders())
}

pub(super) struct Counter(pub(super) AtomicUsize);
impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

pub(super) fn drain(hub: &mut Hub, id: ConnId) -> Vec<Bytes> {
    let mut out = Vec::new();
    hub.take_batch(id, &mut out);
    let n = out.iter().map(Bytes::len).sum();
    hub.wrote(id, n);
    out
}

pub(super) fn ws(hub: &mut Hub, kind: ConnKind) -> ConnId {
    let id = hub.register(-1).unwrap();
    hub.upgrade(id, kind);
    id
}

fn paced_hub(window: usize) -> Hub {
    hub_with(HubLimits {
        fanout_window: window,
        ..limits()
    })
}

/// `n` subscribers of "c" whose writers sleep, each with its own wake
/// counter.
fn sleeping_subscribers(hub: &mut Hub, n: usize) -> Vec<(ConnId, Arc<Counter>)> {
    (0..n)
        .map(|_| {
            let id = ws(hub, RAW);
            hub.subscribe(id, "c").unwrap();
            let counter = Arc::new(Counter(AtomicUsize::new(0)));
            let waker = Waker::from(counter.clone());
            assert!(hub
                .poll_writer(id, &mut Context::from_waker(&waker))
                .is_pending());
            (id, counter)
        })
        .collect()
}

fn woken(subs: &[(ConnId, Arc<Counter>)]) -> Vec<usize> {
    subs.iter()
        .map(|(_, c)| c.0.load(Ordering::SeqCst))
        .collect()
}

/// What a woken writer does: poll, write its batch, go back to sleep.
fn run_writer(hub: &mut Hub, sub: &(ConnId, Arc<Counter>)) -> usize {
    let waker = Waker::from(sub.1.clone());
    let mut cx = Context::from_waker(&waker);
    assert_eq!(
        hub.poll_writer(sub.0, &mut cx),
        Poll::Ready(WriterWork::Write)
    );
    let frames = drain(hub, sub.0).len();
    assert!(hub.poll_writer(sub.0, &mut cx).is_pending());
    frames
}

#[test]
fn a_fan_out_wakes_at_most_a_window_of_writers_at_a_time() {
    let mut hub = paced_hub(2);
    let subs = sleeping_subscribers(&mut hub, 5);
    assert_eq!(hub.publish("c", OpCode::Text, b"one", None), 5);
    assert_eq!(woken(&subs), [1, 1, 0, 0, 0]);
    assert_eq!(hub.stats.fanout_paced, 3);
    // A second message joins the queues: waiting writers will write
    // both frames in one batch, nobody is woken twice.
    hub.publish("c", OpCode::Text, b"two", None);
    assert_eq!(woken(&subs), [1, 1, 0, 0, 0]);
    // Each completed write passes its place on, in FIFO order.
    assert_eq!(run_writer(&mut hub, &subs[0]), 2);
    assert_eq!(woken(&subs), [1, 1, 1, 0, 0]);
    assert_eq!(run_writer(&mut hub, &subs[1]), 2);
    assert_eq!(run_writer(&mut hub, &subs[2]), 2);
    assert_eq!(woken(&subs), [1, 1, 1, 1, 1]);
    assert_eq!(run_writer(&mut hub, &subs[3]), 2);
    assert_eq!(run_writer(&mut hub, &subs[4]), 2);
    // Nothing lost, nothing left in the window.
    assert_eq!(hub.stats.deliveries, 10);
    assert_eq!((hub.pacer.active, hub.pacer.waiting.len()), (0, 0));
    assert_eq!(hub.total_pending(), 0);
}

#[test]
fn departed_connections_give_up_their_place_and_pongs_wait_their_turn() {
    let mut hub = paced_hub(1);
    let subs = sleeping_subscribers(&mut hub, 4);
    hub.publish("c", OpCode::Text, b"x", None);
    assert_eq!(woken(&subs), [1, 0, 0, 0]);
    // A waiting connection leaves: its queue entry is skipped.
    hub.remove(subs[1].0);
    // Another gets a pong to send: its writer wakes but waits its turn.
    hub.queue_pong(subs[2].0, b"");
    assert_eq!(woken(&subs)[2], 1);
    let waker = Waker::from(subs[2].1.clone());
    let pending = hub.poll_writer(subs[2].0, &mut Context::from_waker(&waker));
    assert!(pending.is_pending());
    // The active one leaves without writing: its place is freed and
    // goes past the departed one to the next in line.
    hub.remove(subs[0].0);
    assert_eq!(woken(&subs)[2], 2);
    assert_eq!(
        run_writer(&mut hub, &subs[2]),
        2,
        "pong and data in one write"
    );
    assert_eq!(woken(&subs)[3], 1);
    assert_eq!(run_writer(&mut hub, &subs[3]), 1);
    assert_eq!((hub.pacer.active, hub.pacer.waiting.len()), (0, 0));
}

#[test]
fn a_writer_that_finds_more_queued_takes_its_turn_again() {
    let mut hub = paced_hub(1);
    let subs = sleeping_subscribers(&mut hub, 2);
    hub.publish("c", OpCode::Text, b"1", None);
    // Writer 0 takes its batch; while it writes, more is published.
    let mut out = Vec::new();
    hub.take_batch(subs[0].0, &mut out);
    hub.publish("c", OpCode::Text, b"2", None);
    hub.wrote(subs[0].0, 3);
    // The place went to writer 1, which has waited longest: writer 0,
    // with a frame queued, must wait for it instead of looping.
    assert_eq!(woken(&subs), [1, 1]);
    let waker = Waker::from(subs[0].1.clone());
    assert!(hub
        .poll_writer(subs[0].0, &mut Context::from_waker(&waker))
        .is_pending());
    assert_eq!(run_writer(&mut hub, &subs[1]), 2);
    assert_eq!(woken(&subs)[0], 2);
    assert_eq!(run_writer(&mut hub, &subs[0]), 1);
}

#[test]
fn writes_stuck_on_their_peers_hand_their_places_on() {
    let mut hub = paced_hub(2);
    let subs = sleeping_subscribers(&mut hub, 5);
    let counter = Arc::new(Counter(AtomicUsize::new(0)));
    let waker = Waker::from(counter.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(hub.poll_pacer_backlog(&mut cx).is_pending());
    hub.publish("c", OpCode::Text, b"x", None);
    assert_eq!(counter.0.load(Ordering::SeqCst), 1, "watchdog woken");
    assert!(hub.poll_pacer_backlog(&mut cx).is_ready());
    // Writers 0 and 1 take their batches; their writes never complete
    // (peers that do not read).
    for sub in &subs[..2] {
        let mut out = Vec::new();
        hub.take_batch(sub.0, &mut out);
    }
    // Taken during the first interval: they get one.
    assert_eq!(hub.pacer_tick(), 0);
    assert_eq!(woken(&subs), [1, 1, 0, 0, 0]);
    // Held through a whole interval: written off, places handed on.
    assert_eq!(hub.pacer_tick(), 2);
    assert_eq!(woken(&subs), [1, 1, 1, 1, 0]);
    assert_eq!(hub.stats.fanout_window_stalls, 2);
    // A stalled write completing later frees nothing.
    hub.wrote(subs[0].0, 3);
    assert_eq!(hub.pacer.active, 2);
    assert_eq!(woken(&subs)[4], 0);
    // A completion hands a place on as usual.
    run_writer(&mut hub, &subs[2]);
    assert_eq!(woken(&subs)[4], 1);
    run_writer(&mut hub, &subs[3]);
    run_writer(&mut hub, &subs[4]);
    hub.wrote(subs[1].0, 3);
    assert_eq!((hub.pacer.active, hub.pacer.waiting.len()), (0, 0));
    assert!(hub.poll_pacer_backlog(&mut cx).is_pending());
    assert!(hub.pacer.held.is_empty());
}

#[test]
fn stuck_places_are_written_off_even_while_others_complete() {
    let mut hub = paced_hub(2);
    let subs = sleeping_subscribers(&mut hub, 4);
    hub.publish("c", OpCode::Text, b"x", None);
    let mut out = Vec::new();
    hub.take_batch(subs[0].0, &mut out); // never completes
    assert_eq!(hub.pacer_tick(), 0);
    // Writes keep completing through the one working place...
    run_writer(&mut hub, &subs[1]);
    assert_eq!(woken(&subs), [1, 1, 1, 0]);
    // ...but the stuck place is still written off after an interval,
    // and the window is whole again.
    assert_eq!(hub.pacer_tick(), 1);
    assert_eq!(woken(&subs), [1, 1, 1, 1]);
    assert_eq!(hub.pacer.active, 2);
}

#[test]
fn one_stuck_write_cannot_grow_the_place_log_or_shrink_the_window_for_good() {
    let mut hub = paced_hub(2);
    let subs = sleeping_subscribers(&mut hub, 2);
    let (stuck, busy) = (&subs[0], &subs[1]);
    for i in 0..100 {
        hub.publish("c", OpCode::Text, b"x", None);
        if i == 0 {
            let mut out = Vec::new();
            hub.take_batch(stuck.0, &mut out); // never completes
        }
        run_writer(&mut hub, busy);
        assert!(hub.pacer.held.len() <= HELD_LIMIT * 2 + 1, "{i}");
    }
    // Overtaken by HELD_LIMIT windows of writers: written off without
    // the watchdog, so the window is whole again.
    assert_eq!(hub.stats.fanout_window_stalls, 1);
    assert_eq!(hub.pacer.active, 0);
}

#[test]
fn keepalive_pings_are_paced_too() {
    let mut hub = hub_with(HubLimits {
        fanout_window: 2,
        ping_interval_ms: 10,
        ..limits()
    });
    let subs = sleeping_subscribers(&mut hub, 5);
    hub.set_now(20);
    let mut expired = Vec::new();
    hub.sweep(&mut expired);
    assert!(expired.is_empty());
    assert_eq!(woken(&subs), [1, 1, 0, 0, 0]);
    for sub in &subs {
        run_writer(&mut hub, sub);
    }
    assert_eq!(woken(&subs), [1, 1, 1, 1, 1]);
}

#[test]
fn a_window_of_zero_wakes_everyone_at_once() {
    let mut hub = paced_hub(0);
    let subs = sleeping_subscribers(&mut hub, 300);
    hub.publish("c", OpCode::Text, b"x", None);
    assert!(woken(&subs).iter().all(|&n| n == 1));
    assert_eq!(hub.stats.fanout_paced, 0);
}

#[test]
fn one_encoded_frame_is_shared_by_every_subscriber() {
    let mut hub = hub_with(limits());
    let ids: Vec<_> = (0..3).map(|_| ws(&mut hub, RAW)).collect();
    for &id in &ids {
        hub.subscribe(id, "c").unwrap();
    }
    assert_eq!(hub.publish("c", OpCode::Text, b"hi", None), 3);
    let frames: Vec<Bytes> = ids
        .iter()
        .map(|&id| drain(&mut hub, id).remove(0))
        .collect();
    assert_eq!(&frames[0][..], b"\x81\x02hi");
    // Same allocation, not copies.
    assert!(frames.iter().all(|f| f.as_ptr() == frames[0].as_ptr()));
    assert_eq!(hub.stats.deliveries, 3);
}

#[test]
fn disconnect_cleans_up_only_its_subscriptions() {
    let mut hub = hub_with(limits());
    let a = ws(&mut hub, TAGGED);
    let b = ws(&mut hub, TAGGED);
    let c = ws(&mut hub, TAGGED);
    for id in [a, b, c] {
        hub.subscribe(id, "x").unwrap();
    }
    hub.subscribe(a, "only-a").unwrap();
    hub.remove(a);
    assert_eq!(hub.subscriber_count("x"), 2);
    assert_eq!(hub.channel_count(), 1, "empty channel dropped");
    // Back-pointers survived the swap_remove: c can still leave cleanly.
    assert!(hub.unsubscribe(c, "x"));
    assert!(!hub.unsubscribe(c, "x"));
    assert_eq!(hub.subscriber_count("x"), 1);
    hub.remove(b);
    assert_eq!((hub.channel_count(), hub.stats.subscriptions), (0, 0));
}

#[test]
fn interest_changes_are_logged_once_tracked() {
    let mut hub = hub_with(limits());
    let a = ws(&mut hub, TAGGED);
    hub.subscribe(a, "before").unwrap();
    hub.track_interest();
    assert_eq!(&*hub.interest_snapshot()[0], "before");
    let b = ws(&mut hub, TAGGED);
    hub.subscribe(b, "x").unwrap();
    hub.subscribe(a, "x").unwrap();
    hub.remove(b);
    hub.remove(a);
    let counter = Arc::new(Counter(AtomicUsize::new(0)));
    let waker = Waker::from(counter.clone());
    let mut cx = Context::from_waker(&waker);
    let mut out = Vec::new();
    assert!(hub.poll_interest(&mut cx, &mut out).is_ready());
    let got: Vec<(&str, bool)> = out.iter().map(|(n, g)| (&**n, *g)).collect();
    // "x" came and went before the upstream looked: no change for it.
    assert_eq!(got, vec![("before", false)]);
    out.clear();
    assert!(hub.poll_interest(&mut cx, &mut out).is_pending());
    let c = ws(&mut hub, TAGGED);
    hub.subscribe(c, "y").unwrap();
    assert_eq!(counter.0.load(Ordering::SeqCst), 1, "upstream woken");
}

#[test]
fn subscriptions_are_bounded_and_idempotent() {
    let mut l = limits();
    l.max_subscriptions = 2;
    let mut hub = hub_with(l);
    let id = ws(&mut hub, TAGGED);
    hub.subscribe(id, "a").unwrap();
    hub.subscribe(id, "a").unwrap();
    hub.subscribe(id, "b").unwrap();
    assert_eq!(
        hub.subscribe(id, "c"),
        Err(SubscribeError::TooManySubscriptions)
    );
    assert_eq!(
        hub.subscribe(id, "bad name"),
        Err(SubscribeError::InvalidChannel)
    );
    assert_eq!(hub.conn(id).unwrap().subscription_count(), 2);
}

#[test]
fn connections_are_bounded() {
    let mut l = limits();
    l.max_connections = 2;
    let mut hub = hub_with(l);
    assert!(hub.register(1).is_some() && hub.register(2).is_some());
    assert!(hub.register(3).is_none());
}

#[test]
fn slow_consumer_is_disconnected_with_1008_and_counted() {
    let mut l = limits();
    l.max_outbound_queue = 100;
    let mut hub = hub_with(l);
    let slow = ws(&mut hub, RAW);
    let fast = ws(&mut hub, RAW);
    hub.subscribe(slow, "c").unwrap();
    hub.subscribe(fast, "c").unwrap();
    sweeps(&mut hub, 0, 10_000);
    for _ in 0..5 {
        hub.publish("c", OpCode::Binary, &[0; 40], None);
        drain(&mut hub, fast);
    }
    // Over the bound (210 B) but not over the hard cap: publishers pause,
    // nobody is cut yet.
    assert!(hub.pressed());
    assert_eq!(hub.stats.slow_consumer_disconnects, 0);
    sweeps(&mut hub, 10_000, 10_900);
    assert_eq!(
        hub.stats.slow_consumer_disconnects, 0,
        "cut before the grace"
    );
    // No write progress for the whole grace period: slow.
    sweeps(&mut hub, 10_900, 11_000);
    assert_eq!(hub.stats.slow_consumer_disconnects, 1);
    assert!(
        !hub.pressed(),
        "a cut connection no longer holds publishers"
    );
    assert_eq!(hub.conn(slow).unwrap().state(), ConnState::Closing);
    let out = drain(&mut hub, slow);
    assert_eq!(out.len(), 1, "queue replaced by the close frame");
    assert_eq!(&out[0][..4], &[0x88, 15, 0x03, 0xF0]);
    assert!(hub.conn(slow).unwrap().pending_bytes() == 0);
    assert_eq!(hub.stats.deliveries, 5 + 5);
    assert_eq!(hub.stats.messages_not_delivered, 5);
}

#[test]
fn slow_consumer_close_deadline_starts_when_it_is_cut() {
    let mut l = limits();
    l.max_outbound_queue = 100;
    l.close_timeout_ms = 1000;
    let mut hub = hub_with(l);
    let slow = ws(&mut hub, RAW);
    hub.subscribe(slow, "c").unwrap();
    hub.set_now(60_000);
    // Past the hard cap (4 x 100 B): cut at once.
    for _ in 0..10 {
        hub.publish("c", OpCode::Binary, &[0; 40], None);
    }
    assert_eq!(hub.conn(slow).unwrap().state(), ConnState::Closing);
    let mut expired = Vec::new();
    hub.set_now(60_999);
    hub.sweep(&mut expired);
    assert!(
        expired.is_empty(),
        "close deadline counted from the connect"
    );
    hub.set_now(61_000);
    hub.sweep(&mut expired);
    assert_eq!(expired, vec![(-1, Expired::Close)]);
}

#[test]
fn the_worker_wide_budget_bounds_all_queues_together() {
    let mut l = limits();
    l.max_outbound_queue = 1000;
    l.max_total_outbound = 250;
    let mut hub = hub_with(l);
    let ids: Vec<_> = (0..4).map(|_| ws(&mut hub, RAW)).collect();
    // One channel each: every queued frame is memory of its own.
    let names = ["a", "b", "c", "d"];
    for (&id, name) in ids.iter().zip(names) {
        hub.subscribe(id, name).unwrap();
    }
    // 4 × 42 B = 168 B fits; the second round would make 336 B.
    for name in names {
        hub.publish(name, OpCode::Binary, &[0; 40], None);
    }
    assert_eq!(hub.total_pending(), 168);
    assert_eq!(hub.outbound_memory(), 168);
    for name in names {
        hub.publish(name, OpCode::Binary, &[0; 40], None);
    }
    assert!(
        hub.outbound_memory() <= 250 + 4 * 4,
        "{}",
        hub.outbound_memory()
    );
    assert!(hub.stats.outbound_budget_exceeded >= 1);
    assert!(hub.stats.slow_consumer_disconnects >= 1);
    for &id in &ids {
        drain(&mut hub, id);
        hub.remove(id);
    }
    assert_eq!(hub.total_pending(), 0, "every byte accounted for");
    assert_eq!(hub.backlog(), 0);
}

#[test]
fn drop_oldest_keeps_the_queue_bounded_and_counts_drops() {
    let mut l = limits();
    l.max_outbound_queue = 100;
    l.slow_consumer = SlowConsumerPolicy::DropOldest;
    let mut hub = hub_with(l);
    let id = ws(&mut hub, RAW);
    hub.subscribe(id, "c").unwrap();
    for i in 0..10u8 {
        hub.publish("c", OpCode::Binary, &[i; 40], None);
        assert!(hub.conn(id).unwrap().pending_bytes() <= 4 * 100);
    }
    assert_eq!(hub.stats.slow_consumer_drops, 1, "one drop at the hard cap");
    // Its writes stalled for the grace period: trimmed to the bound.
    sweeps(&mut hub, 0, 1_000);
    let out = drain(&mut hub, id);
    assert_eq!(out.len(), 2);
    assert_eq!(out[1][2], 9, "newest kept");
    assert_eq!(hub.stats.slow_consumer_drops, 8);
    assert_eq!(hub.stats.messages_not_delivered, 8);
}

#[test]
fn a_ping_flood_occupies_a_bounded_number_of_control_slots() {
    let mut hub = hub_with(limits());
    let id = ws(&mut hub, RAW);
    for i in 0..10_000u32 {
        hub.queue_pong(id, &i.to_be_bytes());
    }
    let out = drain(&mut hub, id);
    assert_eq!(out.len(), MAX_PENDING_CONTROL);
    assert_eq!(
        &out[0][2..],
        &0u32.to_be_bytes(),
        "oldest answered in order"
    );
    assert_eq!(
        &out[15][2..],
        &9_999u32.to_be_bytes(),
        "latest always answered"
    );
}

#[test]
fn writer_is_woken_once_per_burst_and_finishes_after_close() {
    let mut hub = hub_with(limits());
    let id = ws(&mut hub, RAW);
    hub.subscribe(id, "c").unwrap();
    let counter = Arc::new(Counter(AtomicUsize::new(0)));
    let waker = Waker::from(counter.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(hub.poll_writer(id, &mut cx).is_pending());
    for _ in 0..3 {
        hub.publish("c", OpCode::Text, b"m", None);
    }
    assert_eq!(counter.0.load(Ordering::SeqCst), 1);
    assert_eq!(hub.poll_writer(id, &mut cx), Poll::Ready(WriterWork::Write));
    assert_eq!(drain(&mut hub, id).len(), 3, "three messages, one batch");
    hub.close(id, 1001, "bye", CloseReason::Shutdown);
    hub.publish("c", OpCode::Text, b"late", None);
    let mut out = Vec::new();
    assert!(
        hub.take_batch(id, &mut out),
        "close frame is the last batch"
    );
    assert_eq!(out.len(), 1);
    assert_eq!(
        hub.poll_writer(id, &mut cx),
        Poll::Ready(WriterWork::Finish)
    );
    assert_eq!(hub.stats.messages_not_delivered, 1);
}

#[test]
fn exclude_sender_skips_the_publisher() {
    let mut l = limits();
    l.exclude_sender = true;
    let mut hub = hub_with(l);
    let a = ws(&mut hub, RAW);
    let b = ws(&mut hub, RAW);
    hub.subscribe(a, "c").unwrap();
    hub.subscribe(b, "c").unwrap();
    let serial = hub.conn(a).unwrap().serial();
    assert_eq!(hub.publish("c", OpCode::Text, b"m", Some(serial)), 1);
    assert!(drain(&mut hub, a).is_empty());
}

#[test]
fn each_format_is_encoded_at_most_once_per_publish_and_only_if_used() {
    let calls = std::rc::Rc::new([Cell::new(0), Cell::new(0), Cell::new(0)]);
    let mut enc = Encoders::new();
    for f in 0..3u8 {
        let calls = calls.clone();
        enc = enc.with(Format::new(f), move |d| {
            calls[f as usize].set(calls[f as usize].get() + 1);
            encode_server_frame(d.opcode, d.payload)
        });
    }
    let mut hub = Hub::new(limits(), enc);
    let ids: Vec<_> = [0, 1, 0, 1, 1]
        .iter()
        .map(|&f| ws(&mut hub, ConnKind::Ws(Format::new(f))))
        .collect();
    for &id in &ids {
        hub.subscribe(id, "c").unwrap();
    }
    assert_eq!(hub.publish("c", OpCode::Text, b"m", None), 5);
    let counts: Vec<usize> = calls.iter().map(Cell::get).collect();
    assert_eq!(counts, [1, 1, 0], "once per format in use, none unused");
    assert_eq!(hub.publish("nobody", OpCode::Text, b"m", None), 0);
    assert_eq!(
        calls[0].get() + calls[1].get(),
        2,
        "no subscribers, no encoding"
    );
}

#[test]
fn a_tagged_format_gets_its_own_frame_naming_the_channel() {
    let mut hub = hub_with(limits());
    let raw = ws(&mut hub, RAW);
    let tagged = ws(&mut hub, TAGGED);
    hub.subscribe(raw, "room").unwrap();
    hub.subscribe(tagged, "room").unwrap();
    hub.publish("room", OpCode::Text, b"x", None);
    assert_eq!(&drain(&mut hub, raw)[0][..], b"\x81\x01x");
    assert_eq!(&drain(&mut hub, tagged)[0][..], b"\x81\x06room:x");
}

#[test]
#[should_panic(expected = "no encoder")]
fn upgrading_to_a_format_without_an_encoder_is_refused() {
    let mut hub = hub_with(limits());
    ws(&mut hub, ConnKind::Ws(Format::new(7)));
}

#[test]
fn the_connection_entry_stays_small() {
    let size = std::mem::size_of::<Conn>();
    eprintln!("connection entry: {size} bytes");
    // 176 bytes before the hub split and after, 184 with the write
    // progress time (issue 13), 192 with the last write's time and the
    // parked flag (issue 19: parking keeps little more than this entry);
    // growth costs every connection (see the memory-per-connection budget).
    assert!(size <= 192, "connection entry grew to {size} bytes");
}

/// Sweeps every 100 ms of coarse time after `from` up to `to`, as the
/// edge's sweeper does.
pub(super) fn sweeps(hub: &mut Hub, from: u64, to: u64) {
    let mut expired = Vec::new();
    for t in (from + 100..=to).step_by(100) {
        hub.set_now(t);
        hub.sweep(&mut expired);
    }
}
