//! Redis Cluster placement checked against a real cluster: the slot of
//! every key (hash tags included) is the one Redis computes, the slot map
//! built from a real `CLUSTER SLOTS` sends each key to the master that
//! serves it, and a real `MOVED` parses to the right node.

mod common;
mod redis_support;

use bytes::BytesMut;
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
