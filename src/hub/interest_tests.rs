//! Subscribe acknowledgements that wait for the upstream (Redis) to
//! confirm the channel.

use super::tests::{drain, hub_with, limits, ws, RAW};
use super::*;
use std::task::Waker;

fn take_interest(hub: &mut Hub) -> Vec<(String, bool)> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    let _ = hub.poll_interest(&mut cx, &mut out);
    out.into_iter().map(|(n, g)| (n.to_string(), g)).collect()
}

fn ack(tag: &str) -> Bytes {
    Bytes::from(tag.to_string())
}

fn got(hub: &mut Hub, id: ConnId) -> Vec<Bytes> {
    drain(hub, id)
}

#[test]
fn without_an_upstream_the_ack_goes_at_once() {
    let mut hub = hub_with(limits());
    let a = ws(&mut hub, RAW);
    hub.subscribe_acked(a, "c", ack("ok")).unwrap();
    assert_eq!(got(&mut hub, a), vec![ack("ok")]);
}

/// A hub following an upstream whose connection is up.
fn connected_hub() -> Hub {
    let mut hub = hub_with(limits());
    hub.track_interest();
    hub.interest_snapshot();
    hub
}

#[test]
fn while_the_upstream_is_down_the_ack_goes_at_once() {
    let mut hub = hub_with(limits());
    hub.track_interest();
    let a = ws(&mut hub, RAW);
    hub.subscribe_acked(a, "c", ack("a")).unwrap();
    assert_eq!(
        got(&mut hub, a),
        vec![ack("a")],
        "before the first connection"
    );
    hub.interest_snapshot();
    let b = ws(&mut hub, RAW);
    hub.subscribe_acked(b, "d", ack("b")).unwrap();
    assert!(got(&mut hub, b).is_empty());
    hub.interest_lost();
    assert_eq!(
        got(&mut hub, b),
        vec![ack("b")],
        "due when the connection goes"
    );
    let c = ws(&mut hub, RAW);
    hub.subscribe_acked(c, "e", ack("c")).unwrap();
    assert_eq!(got(&mut hub, c), vec![ack("c")]);
}

#[test]
fn the_ack_waits_for_the_upstream_confirmation() {
    let mut hub = connected_hub();
    let a = ws(&mut hub, RAW);
    hub.subscribe_acked(a, "c", ack("a")).unwrap();
    assert!(got(&mut hub, a).is_empty(), "not before Redis confirms");
    assert_eq!(take_interest(&mut hub), vec![("c".into(), true)]);
    let b = ws(&mut hub, RAW);
    hub.subscribe_acked(b, "c", ack("b")).unwrap();
    assert!(
        got(&mut hub, b).is_empty(),
        "the SUBSCRIBE is still unanswered"
    );
    hub.interest_answered("c");
    assert_eq!(got(&mut hub, a), vec![ack("a")]);
    assert_eq!(got(&mut hub, b), vec![ack("b")]);
    // Confirmed: a later subscriber and a repeated subscribe are answered
    // at once.
    let c = ws(&mut hub, RAW);
    hub.subscribe_acked(c, "c", ack("c")).unwrap();
    hub.subscribe_acked(a, "c", ack("again")).unwrap();
    assert_eq!(got(&mut hub, c), vec![ack("c")]);
    assert_eq!(got(&mut hub, a), vec![ack("again")]);
}

#[test]
fn a_resubscribe_in_flight_is_confirmed_only_by_its_own_answer() {
    let mut hub = connected_hub();
    let a = ws(&mut hub, RAW);
    hub.subscribe_acked(a, "c", ack("a")).unwrap();
    take_interest(&mut hub);
    hub.interest_answered("c");
    assert_eq!(got(&mut hub, a), vec![ack("a")]);
    // Lost (UNSUBSCRIBE sent), then gained again (SUBSCRIBE sent).
    hub.unsubscribe(a, "c");
    assert_eq!(take_interest(&mut hub), vec![("c".into(), false)]);
    let b = ws(&mut hub, RAW);
    hub.subscribe_acked(b, "c", ack("b")).unwrap();
    assert_eq!(take_interest(&mut hub), vec![("c".into(), true)]);
    hub.interest_answered("c");
    assert!(
        got(&mut hub, b).is_empty(),
        "that was the UNSUBSCRIBE's answer"
    );
    hub.interest_answered("c");
    assert_eq!(got(&mut hub, b), vec![ack("b")]);
}

#[test]
fn a_waiting_ack_leaves_with_its_subscriber() {
    let mut hub = connected_hub();
    let keep = ws(&mut hub, RAW);
    hub.subscribe_acked(keep, "c", ack("keep")).unwrap();
    let gone = ws(&mut hub, RAW);
    hub.subscribe_acked(gone, "c", ack("gone")).unwrap();
    hub.remove(gone);
    // Its slot is reused by a connection that never asked.
    let reused = ws(&mut hub, RAW);
    assert_eq!(reused, gone);
    take_interest(&mut hub);
    hub.interest_answered("c");
    assert_eq!(got(&mut hub, keep), vec![ack("keep")]);
    assert!(got(&mut hub, reused).is_empty());
}

#[test]
fn a_new_upstream_connection_confirms_afresh() {
    let mut hub = connected_hub();
    let a = ws(&mut hub, RAW);
    hub.subscribe_acked(a, "c", ack("a")).unwrap();
    take_interest(&mut hub);
    // The connection died before answering; the new one subscribes all.
    assert_eq!(hub.interest_snapshot().len(), 1);
    hub.interest_answered("c");
    assert_eq!(got(&mut hub, a), vec![ack("a")]);
    let b = ws(&mut hub, RAW);
    hub.subscribe_acked(b, "c", ack("b")).unwrap();
    assert_eq!(got(&mut hub, b), vec![ack("b")]);
}

/// A hub following the other workers (one change in flight per channel).
fn worker_hub() -> Hub {
    let mut hub = hub_with(limits());
    hub.track_interest_for_workers();
    hub.interest_snapshot();
    hub
}

#[test]
fn for_workers_a_channels_changes_wait_for_the_answer_to_the_last() {
    let mut hub = worker_hub();
    let a = ws(&mut hub, RAW);
    hub.subscribe(a, "c").unwrap();
    assert_eq!(take_interest(&mut hub), vec![("c".into(), true)]);
    // Churn while the owner has not answered: held, coalesced.
    for _ in 0..3 {
        hub.unsubscribe(a, "c");
        hub.subscribe(a, "c").unwrap();
    }
    hub.unsubscribe(a, "c");
    assert!(take_interest(&mut hub).is_empty(), "held for the answer");
    hub.interest_answered("c");
    assert_eq!(take_interest(&mut hub), vec![("c".into(), false)]);
    assert!(take_interest(&mut hub).is_empty());
}

#[test]
fn for_workers_new_channels_are_refused_past_the_backlog_until_answers_come() {
    let mut hub = hub_with(HubLimits {
        max_subscriptions: 1,
        ..limits()
    });
    hub.track_interest_for_workers();
    hub.interest_snapshot();
    let a = ws(&mut hub, RAW);
    // Each channel subscribed and left, its changes never answered: the
    // subscribe sent, the unsubscribe held.
    let mut n = 0;
    loop {
        let name = format!("c{n}");
        match hub.subscribe(a, &name) {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e, SubscribeError::Backlogged);
                break;
            }
        }
        let _ = take_interest(&mut hub);
        hub.unsubscribe(a, &name);
        n += 1;
        assert!(n <= MAX_INTEREST_BACKLOG, "never refused");
    }
    assert_eq!(n, MAX_INTEREST_BACKLOG / 2, "two held per channel");
    assert_eq!(
        hub.subscribe(a, "one-more"),
        Err(SubscribeError::Backlogged)
    );
    for i in 0..16 {
        hub.interest_answered(&format!("c{i}"));
    }
    let _ = take_interest(&mut hub); // the held unsubscribes go
    for i in 0..16 {
        hub.interest_answered(&format!("c{i}"));
    }
    hub.subscribe(a, "one-more").unwrap();
    // Redis mode keeps its own bound (the link's): not this one.
    let mut redis = connected_hub();
    let b = ws(&mut redis, RAW);
    for i in 0..MAX_INTEREST_BACKLOG / 2 + 1 {
        redis.subscribe(b, &format!("c{i}")).unwrap();
        let _ = take_interest(&mut redis);
        redis.unsubscribe(b, &format!("c{i}"));
    }
}
