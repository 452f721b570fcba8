//! Hub tests of the delivery contract under pressure (issue 13): write
//! progress and stalls, the hard cap, publisher pauses, the memory budget's
//! unique-frame charging, and the coalesced interest log.

use super::tests::{drain, hub_with, limits, sweeps, ws, Counter, RAW, TAGGED};
use super::*;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Waker;

#[test]
fn a_subscriber_whose_writes_progress_is_not_cut_and_publishers_wait_for_it() {
    let mut l = limits();
    l.max_outbound_queue = 100;
    let mut hub = hub_with(l);
    let id = ws(&mut hub, RAW);
    hub.subscribe(id, "c").unwrap();
    for _ in 0..5 {
        hub.publish("c", OpCode::Binary, &[0; 40], None);
    }
    let woken = Arc::new(Counter(AtomicUsize::new(0)));
    let waker = Waker::from(woken.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(hub.poll_unpressed(&mut cx).is_pending());
    // Its writes keep accepting bytes, slowly, for much longer than the
    // grace period: not slow.
    let mut expired = Vec::new();
    for t in 1..=50 {
        hub.set_now(t * 100);
        hub.progressed(id);
        hub.sweep(&mut expired);
    }
    assert_eq!(hub.stats.slow_consumer_disconnects, 0);
    assert_eq!(woken.0.load(Ordering::SeqCst), 0);
    drain(&mut hub, id);
    assert_eq!(woken.0.load(Ordering::SeqCst), 1, "publisher woken");
    assert!(hub.poll_unpressed(&mut cx).is_ready());
}

#[test]
fn past_the_hard_cap_a_subscriber_is_cut_at_once() {
    let mut l = limits();
    l.max_outbound_queue = 100;
    let mut hub = hub_with(l);
    let id = ws(&mut hub, RAW);
    hub.subscribe(id, "c").unwrap();
    for _ in 0..9 {
        hub.publish("c", OpCode::Binary, &[0; 40], None);
    }
    assert_eq!(hub.stats.slow_consumer_disconnects, 0, "378 B <= 4 x 100 B");
    hub.publish("c", OpCode::Binary, &[0; 40], None);
    assert_eq!(hub.stats.slow_consumer_disconnects, 1);
    assert_eq!(hub.conn(id).unwrap().state(), ConnState::Closing);
}

/// Issue 13 item 4: a shared frame is charged once. 1 MiB to 100 stalled
/// subscribers holds ~1 MiB, not 100 MiB, so a healthy subscriber beside
/// them is not cut by the worker-wide budget.
#[test]
fn the_budget_charges_a_shared_frame_once() {
    let mut l = limits();
    l.max_outbound_queue = 4 << 20;
    l.max_total_outbound = 8 << 20;
    let mut hub = hub_with(l);
    let stalled: Vec<_> = (0..100).map(|_| ws(&mut hub, RAW)).collect();
    let healthy = ws(&mut hub, RAW);
    for &id in stalled.iter().chain([&healthy]) {
        hub.subscribe(id, "c").unwrap();
    }
    let big = vec![7u8; 1 << 20];
    for _ in 0..3 {
        hub.publish("c", OpCode::Binary, &big, None);
        // The stalled ones take their batch and never finish writing it.
        for &id in &stalled {
            hub.take_batch(id, &mut Vec::new());
        }
        assert_eq!(drain(&mut hub, healthy).len(), 1);
    }
    assert_eq!(hub.stats.outbound_budget_exceeded, 0);
    assert_eq!(hub.stats.slow_consumer_disconnects, 0);
    let frame = (1 << 20) + 10;
    assert!(
        hub.total_pending() >= 300 * frame,
        "{}",
        hub.total_pending()
    );
    assert_eq!(hub.outbound_memory(), 3 * frame, "each frame once");
    for &id in &stalled {
        hub.remove(id);
    }
    hub.remove(healthy);
    assert_eq!(hub.total_pending(), 0);
}

#[test]
fn a_write_that_accepts_nothing_for_the_stall_timeout_is_cut() {
    let mut l = limits();
    l.write_stall_timeout_ms = 500;
    let mut hub = hub_with(l);
    let id = ws(&mut hub, RAW);
    hub.subscribe(id, "c").unwrap();
    hub.publish("c", OpCode::Binary, &[0; 40], None);
    let mut out = Vec::new();
    hub.take_batch(id, &mut out);
    // The batch is in flight and never completes.
    assert!(hub.backlog() > 0);
    sweeps(&mut hub, 0, 400);
    assert_eq!(hub.stats.write_stall_timeouts, 0);
    sweeps(&mut hub, 400, 500);
    assert_eq!(hub.stats.write_stall_timeouts, 1);
    assert_eq!(hub.stats.slow_consumer_disconnects, 1);
    assert_eq!(hub.conn(id).unwrap().state(), ConnState::Closing);
    assert_eq!(hub.backlog(), 0, "a closing connection holds no publisher");
    hub.remove(id);
    assert_eq!(hub.total_pending(), 0);
}

#[test]
fn a_late_sweep_does_not_make_progressing_writes_look_stalled() {
    let mut l = limits();
    l.max_outbound_queue = 100;
    l.write_stall_timeout_ms = 500;
    let mut hub = hub_with(l);
    let id = ws(&mut hub, RAW);
    hub.subscribe(id, "c").unwrap();
    for _ in 0..5 {
        hub.publish("c", OpCode::Binary, &[0; 40], None);
    }
    // The worker was busy for 5 s (its writes progressing all along):
    // one late sweep counts at most one step.
    hub.set_now(5_000);
    hub.sweep(&mut Vec::new());
    assert_eq!(hub.stats.slow_consumer_disconnects, 0);
}

/// Issue 13 item 6: while the upstream (Redis) subscriber connection is
/// down nobody takes the interest log; it must not grow with the churn,
/// only with the channels whose state differs from what the upstream
/// last took (last state wins per channel).
#[test]
fn the_interest_log_is_coalesced_per_channel_while_nobody_reads_it() {
    let mut hub = hub_with(limits());
    hub.track_interest();
    let a = ws(&mut hub, TAGGED);
    hub.subscribe(a, "kept").unwrap();
    for i in 0..10_000 {
        let name = format!("churn{}", i % 100);
        hub.subscribe(a, &name).unwrap();
        hub.unsubscribe(a, &name);
    }
    hub.subscribe(a, "late").unwrap();
    assert_eq!(hub.interest_backlog(), 2, "one entry per changed channel");
    let waker = Waker::from(Arc::new(Counter(AtomicUsize::new(0))));
    let mut cx = Context::from_waker(&waker);
    let mut out = Vec::new();
    assert!(hub.poll_interest(&mut cx, &mut out).is_ready());
    let got: Vec<(&str, bool)> = out.iter().map(|(n, g)| (&**n, *g)).collect();
    assert_eq!(got, vec![("kept", true), ("late", true)]);
    // Taken: now losing "kept" is a change again.
    hub.unsubscribe(a, "kept");
    out.clear();
    assert!(hub.poll_interest(&mut cx, &mut out).is_ready());
    assert_eq!(out, vec![(Rc::from("kept"), false)]);
}
