//! Hub tests of tag filters: each subscriber's filters stay beside it as
//! others come and go (the registry's parallel list), a publication
//! reaches only the subscribers whose filters it passes, and the list is
//! dropped when the last filtered subscriber leaves.

use super::tests::{drain, hub_with, limits, ws, RAW};
use super::*;
use crate::filter::{Filter, Tags};
use crate::meta::Meta;
use std::sync::Arc;

fn filters(json: &str) -> Filters {
    Rc::from(vec![Filter::parse(json.as_bytes()).unwrap()])
}

fn tags(json: &str) -> Arc<Meta> {
    let tags = Tags::parse(json.as_bytes()).unwrap();
    Arc::new(Meta::new(Some(tags), None, false).unwrap().unwrap())
}

/// What each connection got, as payloads.
fn got(hub: &mut Hub, ids: &[ConnId]) -> Vec<Vec<Bytes>> {
    ids.iter().map(|&id| drain(hub, id)).collect()
}

#[test]
fn filters_follow_their_subscribers_through_swaps() {
    let mut hub = hub_with(limits());
    let ids: Vec<ConnId> = (0..4).map(|_| ws(&mut hub, RAW)).collect();
    for &id in &ids {
        hub.subscribe(id, "c").unwrap();
    }
    let btc = r#"{"key":"sym","cmp":"eq","val":"BTC"}"#;
    let eth = r#"{"key":"sym","cmp":"eq","val":"ETH"}"#;
    assert!(hub.set_filters(ids[1], "c", Some(filters(btc))));
    assert!(hub.set_filters(ids[3], "c", Some(filters(eth))));
    assert!(!hub.set_filters(ids[0], "other", Some(filters(btc))));
    // ids[0] leaves: ids[3] (ETH) moves into its slot, its filter too.
    hub.unsubscribe(ids[0], "c");
    let (b, e) = (tags(r#"{"sym":"BTC"}"#), tags(r#"{"sym":"ETH"}"#));
    assert_eq!(
        hub.publish_tagged(("c", OpCode::Text, b"b", Some(&b)), None),
        2
    );
    assert_eq!(
        hub.publish_tagged(("c", OpCode::Text, b"e", Some(&e)), None),
        2
    );
    assert_eq!(hub.publish("c", OpCode::Text, b"none", None), 1);
    let frames = got(&mut hub, &ids[1..]);
    let lens: Vec<usize> = frames.iter().map(Vec::len).collect();
    assert_eq!(lens, [1, 3, 1], "BTC only, everything, ETH only");
    assert_eq!(&frames[0][0][2..], b"b");
    assert_eq!(&frames[2][0][2..], b"e");
    assert!(hub.filters_of(ids[3], "c").is_some());
    assert!(hub.filters_of(ids[2], "c").is_none());
}

#[test]
fn clearing_the_last_filter_drops_the_list_and_everything_flows() {
    let mut hub = hub_with(limits());
    let (a, b) = (ws(&mut hub, RAW), ws(&mut hub, RAW));
    hub.subscribe(a, "c").unwrap();
    hub.subscribe(b, "c").unwrap();
    hub.set_filters(a, "c", Some(filters(r#"{"key":"k","cmp":"ex"}"#)));
    assert_eq!(hub.publish("c", OpCode::Text, b"x", None), 1);
    hub.set_filters(a, "c", None);
    let cid = hub.registry.lookup("c").unwrap();
    assert!(
        hub.registry.audience_mut(cid).0 .1.is_empty(),
        "no list kept"
    );
    assert_eq!(hub.publish("c", OpCode::Text, b"y", None), 2);
    // A filtered subscriber that leaves takes its entry with it.
    hub.set_filters(b, "c", Some(filters(r#"{"key":"k","cmp":"ex"}"#)));
    hub.remove(b);
    assert!(hub.registry.audience_mut(cid).0 .1.is_empty());
    assert_eq!(hub.publish("c", OpCode::Text, b"z", None), 1);
}

#[test]
fn a_server_side_subscribe_keeps_a_clients_filters() {
    let mut hub = hub_with(limits());
    let id = ws(&mut hub, RAW);
    let f = filters(r#"{"key":"k","cmp":"ex"}"#);
    let got = hub.subscribe_filtered(id, "c", Filtering::Replace(Some(f), false));
    assert!(got.unwrap().is_some());
    // A backend's subscribe to the same channel: the filters stay.
    let kept = hub
        .subscribe_filtered(id, "c", Filtering::IfNew(None))
        .unwrap();
    assert!(kept.is_some());
    assert!(hub.filters_of(id, "c").is_some());
    assert_eq!(hub.publish("c", OpCode::Text, b"untagged", None), 0);
    // The client's own subscribe replaces them.
    hub.subscribe_filtered(id, "c", Filtering::Replace(None, false))
        .unwrap();
    assert_eq!(hub.publish("c", OpCode::Text, b"untagged", None), 1);
}
