//! Redis Cluster topology and redirections from a hostile node: a
//! `CLUSTER SLOTS` or `CLUSTER SHARDS` reply (through the bounded RESP decoder) either becomes
//! a complete slot map whose every slot has a master, or is refused; a
//! `MOVED`/`ASK` error text parses or is ignored — never a panic.
#![no_main]
use bytes::BytesMut;
use corecast::redis::cluster::{self, Node, SlotMap, SLOTS};
use corecast::redis::resp::{self, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(cluster::Redirect::Moved { slot, .. } | cluster::Redirect::Ask { slot, .. }) =
            cluster::redirect(text)
        {
            assert!(slot < SLOTS);
        }
    }
    let mut buf = BytesMut::from(data);
    let seed = Node {
        host: "127.0.0.1".into(),
        port: 7000,
    };
    while let Ok(Some(reply)) = resp::decode(&mut buf, &Limits::default()) {
        let maps = [
            SlotMap::from_cluster_slots(&reply, &seed),
            SlotMap::from_cluster_shards(&reply, &seed),
        ];
        for map in maps.into_iter().flatten() {
            assert!(!map.masters.is_empty() && map.masters.len() <= cluster::MAX_MASTERS);
            for s in [0, 5000, SLOTS - 1] {
                assert!(map.owner(s) < map.masters.len());
            }
            let covered: usize = (0..map.masters.len())
                .flat_map(|m| map.ranges_of(m))
                .map(|(a, b)| usize::from(b - a) + 1)
                .sum();
            assert_eq!(covered, usize::from(SLOTS));
        }
    }
});
