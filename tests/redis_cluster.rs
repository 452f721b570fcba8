//! Redis Cluster placement checked against a real cluster: the slot of
//! every key (hash tags included) is the one Redis computes, the slot map
//! built from a real `CLUSTER SLOTS` sends each key to the master that
//! serves it, and a real `MOVED` parses to the right node.

mod common;
mod redis_support;

use bytes::BytesMut;
use common::*;
use corecast::redis::cluster::{self, Node, Redirect, SlotMap};
use corecast::redis::resp::{self, Limits};
use redis_support::*;

fn keys() -> Vec<String> {
    let mut v: Vec<String> = (0..300).map(|i| format!("corecast:chan-{i}")).collect();
    v.extend(
        [
            "{user1000}.following",
            "foo{}{bar}",
            "foo{{bar}}zap",
            "foo{bar}{zap}",
            "{}",
            "{",
            "a{b",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_and_the_slot_map_match_a_real_cluster() {
    let c = RedisCluster::start(3, 0).await;
    let port = c.nodes[0].port;
    let mut conn = RespConn::open(port, None).await;
    for k in keys() {
        let want = conn.cmd(&["CLUSTER", "KEYSLOT", &k]).await.int();
        assert_eq!(cluster::slot(k.as_bytes()) as i64, want, "slot of {k}");
    }
    let mut raw = BytesMut::from(&raw_reply(port, &["CLUSTER", "SLOTS"]).await[..]);
    let reply = resp::decode(&mut raw, &Limits::default()).unwrap().unwrap();
    let seed = Node {
        host: "127.0.0.1".into(),
        port,
    };
    let map = SlotMap::from_cluster_slots(&reply, &seed).expect("a complete map");
    assert_eq!(map.masters.len(), 3);
    for k in keys() {
        // The mapped master serves the key; any other answers MOVED to it.
        let owner = map.master_of(k.as_bytes()).port;
        let mut at_owner = RespConn::open(owner, None).await;
        assert_eq!(at_owner.cmd(&["GET", &k]).await, Resp::Bulk(None), "{k}");
        let other = map.masters.iter().find(|m| m.port != owner).unwrap().port;
        let mut elsewhere = RespConn::open(other, None).await;
        let Resp::Error(e) = elsewhere.cmd(&["GET", &k]).await else {
            panic!("no MOVED for {k} from a node that does not own it");
        };
        match cluster::redirect(&e) {
            Some(Redirect::Moved { slot, node }) => {
                assert_eq!(slot, cluster::slot(k.as_bytes()));
                assert_eq!(node.port, owner);
            }
            other => panic!("{e}: {other:?}"),
        }
    }
}

// ------------------------------------------------------ sharded pub/sub --

/// The master (port) serving each of `channels`, from a real `CLUSTER SLOTS`.
async fn owners(c: &RedisCluster, channels: &[String]) -> Vec<u16> {
    let port = c.nodes[0].port;
    let mut raw = BytesMut::from(&raw_reply(port, &["CLUSTER", "SLOTS"]).await[..]);
    let reply = resp::decode(&mut raw, &Limits::default()).unwrap().unwrap();
    let seed = Node {
        host: "127.0.0.1".into(),
        port,
    };
    let map = SlotMap::from_cluster_slots(&reply, &seed).expect("a complete map");
    channels
        .iter()
        .map(|ch| map.master_of(format!("corecast:{{{ch}}}").as_bytes()).port)
        .collect()
}

/// Polls `PUBSUB SHARDNUMSUB` on `port` until it equals `want`.
async fn wait_shardnumsub(port: u16, channel: &str, want: i64) {
    let mut conn = RespConn::open(port, None).await;
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let n = conn.shardnumsub(channel).await;
        if n == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SHARDNUMSUB {channel} on {port} stayed {n}, want {want}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Two instances on a 3-master cluster: 60 channels spread over all
/// masters, each instance subscribed in Redis (`SSUBSCRIBE` on the owner)
/// to exactly the channels it has local subscribers for; every message
/// published on one instance reaches every subscriber on both, once and
/// in order; losing the last local subscriber unsubscribes on the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_channels_over_three_masters_arrive_once_in_order() {
    let c = RedisCluster::start(3, 0).await;
    let a = cluster_instance(&c, |_| {});
    let b = cluster_instance(&c, |_| {});
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let channels: Vec<String> = (0..60).map(|i| format!("chan-{i}")).collect();
    let owner = owners(&c, &channels).await;
    let masters: std::collections::BTreeSet<u16> = owner.iter().copied().collect();
    assert_eq!(masters.len(), 3, "the channels use every master");

    // A serves channels 0..40, B 20..60: 20..40 on both.
    let mut subs = Vec::new();
    for (i, ch) in channels.iter().enumerate() {
        let path = format!("/ws/{ch}");
        if i < 40 {
            subs.push((i, ws_connect(a.addr, &path).await));
        }
        if i >= 20 {
            subs.push((i, ws_connect(b.addr, &path).await));
        }
    }
    for (i, ch) in channels.iter().enumerate() {
        let want = if (20..40).contains(&i) { 2 } else { 1 };
        wait_shardnumsub(owner[i], ch, want).await;
    }
    // Each master serves only our channels of its own slots.
    for n in &c.nodes {
        let mut conn = RespConn::open(n.port, None).await;
        let mut want: Vec<String> = channels
            .iter()
            .zip(&owner)
            .filter(|(_, &o)| o == n.port)
            .map(|(ch, _)| format!("corecast:{{{ch}}}"))
            .collect();
        want.sort();
        assert_eq!(conn.shardchannels().await, want, "node {}", n.port);
    }

    // 20 messages per channel, from both instances, each confirmed.
    let mut http = [
        HttpConn::connect(a.addr).await,
        HttpConn::connect(b.addr).await,
    ];
    for n in 0..20 {
        for (i, ch) in channels.iter().enumerate() {
            let h = &mut http[(i + n) % 2];
            let req = post_request(&format!("/publish/{ch}"), format!("m{n}").as_bytes(), true);
            let r = h.request(&req).await;
            assert_eq!(r.status, 200, "publish {ch} m{n}: {r:?}");
        }
    }
    for (i, ws) in &mut subs {
        for n in 0..20 {
            assert_eq!(next_text(ws).await, format!("m{n}"), "channel {i}");
        }
    }
    // Nothing more (no duplicates): a fence comes next.
    for (i, ch) in channels.iter().enumerate() {
        let r = http[0]
            .request(&post_request(&format!("/publish/{ch}"), b"fence", true))
            .await;
        assert_eq!(r.status, 200, "fence {i}");
    }
    for (i, ws) in &mut subs {
        assert_eq!(next_text(ws).await, "fence", "channel {i}: a duplicate");
    }

    // A drops its subscribers of 0..20: only B's interest is left.
    subs.retain(|(i, _)| *i >= 20);
    for (i, ch) in channels.iter().enumerate().take(20) {
        wait_shardnumsub(owner[i], ch, 0).await;
    }
    let s = stats(a.addr).await;
    let shards = s["redis_shards"].as_array().expect("per-shard stats");
    assert_eq!(shards.len(), 3, "{s}");
    let slots: u64 = shards.iter().map(|x| x["slots"].as_u64().unwrap()).sum();
    assert_eq!(slots, 16384, "{s}");
    assert!(shards.iter().all(|x| x["connected"] == 1), "{s}");
    let subscribed: u64 = shards
        .iter()
        .map(|x| x["subscriptions"].as_u64().unwrap())
        .sum();
    assert_eq!(subscribed, 20, "A serves 20..40 now: {s}");
}
