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
use futures_util::SinkExt;
use redis_support::*;
use tokio_tungstenite::tungstenite::Message;

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
    // CLUSTER SHARDS (Redis 7) describes the same map.
    let mut raw = BytesMut::from(&raw_reply(port, &["CLUSTER", "SHARDS"]).await[..]);
    let shards = resp::decode(&mut raw, &Limits::default()).unwrap().unwrap();
    let from_shards = SlotMap::from_cluster_shards(&shards, &seed).expect("a complete map");
    for s in 0..cluster::SLOTS {
        assert_eq!(
            from_shards.masters[from_shards.owner(s)],
            map.masters[map.owner(s)],
            "slot {s}"
        );
    }
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
    one_worker_per_server("counts one instance's shard connections");
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
    assert_eq!(counter(&s, "redis_connected"), 1, "{s}");
    let subscribed: u64 = shards
        .iter()
        .map(|x| x["subscriptions"].as_u64().unwrap())
        .sum();
    assert_eq!(subscribed, 20, "A serves 20..40 now: {s}");
    let m = get(a.addr, "/metrics").await;
    let text = String::from_utf8(m.body).expect("UTF-8 metrics");
    let slots: u64 = text
        .lines()
        .filter(|l| l.starts_with("corecast_redis_shard_slots{node="))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(slots, 16384, "{text}");
}

// ------------------------------------------------------- slot migration --

/// `CLUSTER MYID` of the node on `port`.
async fn node_id(port: u16) -> String {
    RespConn::open(port, None)
        .await
        .cmd(&["CLUSTER", "MYID"])
        .await
        .text()
}

/// Moves `slot` from `src` to `dst` the way `redis-cli --cluster reshard`
/// does: IMPORTING on the target, MIGRATING on the source, the keys
/// MIGRATEd, then SETSLOT NODE on the target, the source and the others.
async fn migrate_slot(c: &RedisCluster, slot: u16, src: u16, dst: u16) {
    let (src_id, dst_id) = (node_id(src).await, node_id(dst).await);
    let slot = slot.to_string();
    let mut s = RespConn::open(src, None).await;
    let mut d = RespConn::open(dst, None).await;
    let ok = Resp::Simple("OK".into());
    let r = d
        .cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id])
        .await;
    assert_eq!(r, ok);
    let r = s
        .cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id])
        .await;
    assert_eq!(r, ok);
    loop {
        let keys = match s.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"]).await {
            Resp::Array(Some(k)) => k.iter().map(Resp::text).collect::<Vec<_>>(),
            other => panic!("GETKEYSINSLOT: {other:?}"),
        };
        if keys.is_empty() {
            break;
        }
        let port = dst.to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        args.extend(keys.iter().map(String::as_str));
        let r = s.cmd(&args).await;
        assert_eq!(r, ok, "MIGRATE");
    }
    let r = d.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]).await;
    assert_eq!(r, ok);
    let r = s.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]).await;
    assert_eq!(r, ok);
    for n in &c.nodes {
        if n.port != src && n.port != dst {
            let mut o = RespConn::open(n.port, None).await;
            let r = o.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]).await;
            assert_eq!(r, ok);
        }
    }
}

/// What a slot move cost a subscriber: messages `0..sent` numbered, the
/// numbers received (in order of arrival) and the longest run missing.
struct Received {
    got: Vec<u64>,
    missing: u64,
    longest_gap: u64,
}

/// Publishes `busy` at ~1,000 messages/s from B while A's subscriber
/// reads; moves the channel's slot to another master one second in; the
/// publisher stops two seconds later and sends a fence.
async fn busy_channel_across_a_slot_move(
    history: bool,
    to_new_master: bool,
) -> (Received, serde_json::Value) {
    let mut c = RedisCluster::start(3, 0).await;
    let tweak = |cfg: &mut corecast::config::Config| {
        if history {
            cfg.history.size = 10_000;
        }
    };
    let a = cluster_instance(&c, tweak);
    let b = cluster_instance(&c, tweak);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let owner = owners(&c, &["busy".to_string()]).await[0];
    let dst = match to_new_master {
        // Scale-out: a master the instances have not heard of yet.
        true => c.add_master().await,
        false => c
            .nodes
            .iter()
            .map(|n| n.port)
            .find(|&p| p != owner)
            .unwrap(),
    };
    let slot = cluster::slot(b"corecast:{busy}");

    let mut sub = ws_connect(a.addr, "/ws/busy").await;
    wait_shardnumsub(owner, "busy", 1).await;
    let mut http = HttpConn::connect(b.addr).await;
    let publisher = tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(1));
        let start = std::time::Instant::now();
        let mut n = 0u64;
        while start.elapsed() < std::time::Duration::from_secs(3) {
            tick.tick().await;
            let req = post_request("/publish/busy", n.to_string().as_bytes(), true);
            let r = http.request(&req).await;
            // Accepted either way: confirmed (200), or buffered while the
            // link to the slot's new master is being made (202).
            assert!(matches!(r.status, 200 | 202), "publish {n}: {r:?}");
            n += 1;
        }
        let r = http
            .request(&post_request("/publish/busy", b"fence", true))
            .await;
        assert_eq!(r.status, 200, "fence: {r:?}");
        n
    });
    // One second of traffic on the old owner, then the move.
    let mut got = Vec::new();
    while got.len() < 1000 {
        got.push(next_text(&mut sub).await.parse::<u64>().expect("a number"));
    }
    let moving = std::time::Instant::now();
    migrate_slot(&c, slot, owner, dst).await;
    let moved = moving.elapsed();
    // The longest silence on the subscriber once the move started.
    let mut last = std::time::Instant::now();
    let mut pause = std::time::Duration::ZERO;
    loop {
        let t = next_text(&mut sub).await;
        pause = pause.max(last.elapsed());
        last = std::time::Instant::now();
        if t == "fence" {
            break;
        }
        got.push(t.parse().expect("a number"));
    }
    eprintln!("slot move: commands took {moved:?}; longest silence at the subscriber {pause:?}");
    let sent = publisher.await.expect("publisher");
    wait_shardnumsub(dst, "busy", 1).await;
    wait_shardnumsub(owner, "busy", 0).await;
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order, once");
    let missing = sent - got.len() as u64;
    let longest_gap = got
        .windows(2)
        .map(|w| w[1] - w[0] - 1)
        .max()
        .unwrap_or(0)
        .max(sent - 1 - got.last().copied().unwrap_or(0));
    (
        Received {
            got,
            missing,
            longest_gap,
        },
        stats(a.addr).await,
    )
}

/// A busy channel's slot moves to another master while ~1,000 messages/s
/// flow: the subscriber keeps receiving (Redis pushes `sunsubscribe`, the
/// instance subscribes on the new owner at once), in order, and the loss
/// window without history is short and measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_channel_survives_a_slot_move() {
    let (r, s) = busy_channel_across_a_slot_move(false, false).await;
    eprintln!(
        "slot move without history: {} received, {} lost, longest gap {} messages (~1 ms each)",
        r.got.len(),
        r.missing,
        r.longest_gap
    );
    assert!(r.got.len() > 2000, "kept receiving: {}", r.got.len());
    assert!(
        r.longest_gap < 500,
        "loss window {} messages",
        r.longest_gap
    );
    let shards = s["redis_shards"].as_array().expect("per-shard stats");
    let resub: u64 = shards
        .iter()
        .map(|x| x["resubscribes"].as_u64().unwrap())
        .sum();
    assert!(resub >= 1, "the move was seen: {s}");
}

/// The same move with history on: the gap is read back from the stream
/// (the history keys moved with the slot), so nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_history_a_slot_move_loses_nothing() {
    let (r, _) = busy_channel_across_a_slot_move(true, false).await;
    eprintln!(
        "slot move with history: {} received, {} lost",
        r.got.len(),
        r.missing
    );
    assert_eq!(r.missing, 0, "longest gap {}", r.longest_gap);
}

/// Scale-out: a fourth master joins and the busy channel's slot moves to
/// it. The instances learn of it from the redirects (the command waits
/// for the topology read that brings the new shard); the subscriber
/// keeps receiving, and the new master shows in the per-shard stats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_to_a_new_master_is_followed() {
    let (r, s) = busy_channel_across_a_slot_move(false, true).await;
    eprintln!(
        "slot move to a new master: {} received, {} lost, longest gap {}",
        r.got.len(),
        r.missing,
        r.longest_gap
    );
    assert!(
        r.longest_gap < 500,
        "loss window {} messages",
        r.longest_gap
    );
    let shards = s["redis_shards"].as_array().expect("per-shard stats");
    assert_eq!(shards.len(), 4, "{s}");
}

// ------------------------------------------------------------ failover --

/// A master with a replica is killed (3+3 cluster): `/readyz` goes 503
/// naming the node, the replica is promoted, the instances re-point the
/// shard to it, resubscribe and send what was published meanwhile; the
/// subscriber receives everything, in order, and `/readyz` is 200 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_failover_loses_no_subscriber_and_no_buffered_publish() {
    let mut c = RedisCluster::start(3, 1).await;
    // The default resume delay (1 s): each instance finds the new master
    // on its own, up to a reconnect backoff step (1 s) apart, and the
    // delay is what lets the subscriber's instance resubscribe before the
    // publisher's buffered messages go out (the README's contract). With
    // 500 ms, one run in a loaded full suite lost a buffered message.
    let tweak = |cfg: &mut corecast::config::Config| {
        cfg.redis.resume_delay = std::time::Duration::from_secs(1);
    };
    let a = cluster_instance(&c, tweak);
    let b = cluster_instance(&c, tweak);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let owner = owners(&c, &["fo".to_string()]).await[0];
    let mut sub = ws_connect(a.addr, "/ws/fo").await;
    wait_shardnumsub(owner, "fo", 1).await;
    let mut publisher = ws_connect(b.addr, "/ws/fo").await;
    wait_shardnumsub(owner, "fo", 2).await;
    publisher.send(Message::text("before")).await.expect("send");
    assert_eq!(next_text(&mut sub).await, "before");

    let killed = std::time::Instant::now();
    c.nodes
        .iter_mut()
        .find(|n| n.port == owner)
        .expect("owner")
        .kill();
    let body = wait_readyz(a.addr, 503).await;
    let reason = body["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains(&owner.to_string()),
        "names the node: {reason}"
    );
    // A first subscriber of another channel of the dead master is
    // acknowledged at once (as with one Redis that is down), not when
    // the failover is over; it receives once the channel is restored.
    let names: Vec<String> = (0..100).map(|i| format!("fo-{i}")).collect();
    let on_dead = owners(&c, &names).await;
    let late = &names[on_dead.iter().position(|&p| p == owner).expect("a channel")];
    let mut late_sub = ws_connect(a.addr, "/ws").await;
    let req = format!(r#"{{"op":"subscribe","channel":"{late}","id":7}}"#);
    late_sub.send(Message::text(req)).await.expect("send");
    // Failover takes seconds (node timeout 1 s + election): an ack that
    // waited for it would miss this bound.
    let ack = within_for(
        std::time::Duration::from_millis(1000),
        "ack while the shard is down",
        next_text(&mut late_sub),
    )
    .await;
    assert!(ack.contains("subscribed"), "{ack}");
    assert!(
        matches!(readyz(a.addr).await, Some((503, _))),
        "acknowledged while the shard is down"
    );
    // Published while the master is down: held by B's shard.
    for i in 0..10 {
        publisher
            .send(Message::text(format!("during-{i}")))
            .await
            .expect("send");
    }
    let deadline = killed + std::time::Duration::from_secs(30);
    loop {
        let (ra, rb) = (readyz(a.addr).await, readyz(b.addr).await);
        if matches!(ra, Some((200, _))) && matches!(rb, Some((200, _))) {
            break;
        }
        if std::time::Instant::now() >= deadline {
            let live = c.nodes.iter().find(|n| n.port != owner).unwrap().port;
            let nodes = RespConn::open(live, None)
                .await
                .cmd(&["CLUSTER", "NODES"])
                .await;
            panic!(
                "not ready 30 s after the kill: {ra:?} {rb:?}\n{}",
                nodes.text()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let failover = killed.elapsed();
    for i in 0..10 {
        let t = within_for(
            std::time::Duration::from_secs(30),
            "buffered",
            next_text(&mut sub),
        )
        .await;
        assert_eq!(t, format!("during-{i}"));
    }
    publisher.send(Message::text("after")).await.expect("send");
    assert_eq!(next_text(&mut sub).await, "after");
    let r = post(b.addr, &format!("/publish/{late}"), b"late").await;
    assert_eq!(r.status, 200, "{r:?}");
    let got = next_text(&mut late_sub).await;
    assert!(got.contains("late"), "{got}");
    eprintln!("failover: kill to /readyz 200 on both instances in {failover:?}");
    let s = stats(a.addr).await;
    let shards = s["redis_shards"].as_array().expect("per-shard stats");
    assert!(
        shards
            .iter()
            .all(|x| x["addr"] != format!("127.0.0.1:{owner}")),
        "the shard follows the promoted replica: {s}"
    );
}

// --------------------------------------------------------- bad configs --

/// Waits for `/readyz` 503 with a reason containing `want`; returns it.
async fn wait_reason(addr: std::net::SocketAddr, want: &str) -> String {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let last = readyz(addr).await;
        if let Some((503, body)) = &last {
            let reason = body["reason"].as_str().unwrap_or_default();
            if reason.contains(want) {
                return reason.to_string();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no 503 saying {want:?}; last: {last:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

fn seeds_config(seeds: &str) -> impl FnOnce(&mut corecast::config::Config) {
    let seeds = seeds.parse().expect("valid seeds");
    move |cfg| {
        cfg.redis.cluster = Some(seeds);
        cfg.redis.canary_interval = std::time::Duration::from_millis(100);
    }
}

/// Seeds nobody listens on: `/readyz` says the topology is unknown and
/// why, and the reads back off (100 ms doubling) instead of storming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_seeds_are_reported_and_retried_with_backoff() {
    one_worker_per_server("counts one instance's connection attempts");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = std::time::Instant::now();
    let srv = TestServer::start(seeds_config(&format!("127.0.0.1:{port}")));
    let reason = wait_reason(srv.addr, &format!("127.0.0.1:{port}")).await;
    assert!(reason.contains("topology unknown"), "{reason}");
    assert!(reason.contains("refused"), "{reason}");
    // Five failed reads take at least 100+200+400+800 ms of backoff.
    wait_stat(srv.addr, "redis_topology_errors", |n| n >= 5).await;
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(1500),
        "five reads in {:?}: a retry storm",
        started.elapsed()
    );
    let s = stats(srv.addr).await;
    assert!(counter(&s, "redis_topology_errors") < 10, "{s}");
    // Publishes have nowhere to go: refused, not queued without bound.
    let r = post(srv.addr, "/publish/x", b"m").await;
    assert_eq!(r.status, 503, "{r:?}");
}

/// A seed that is a plain Redis (cluster mode off), and one that refuses
/// our password: each is named in `/readyz` with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_not_in_cluster_mode_and_refused_credentials_are_clear() {
    let plain = RedisServer::start(&[]).await;
    let srv = TestServer::start(seeds_config(&format!("127.0.0.1:{}", plain.port)));
    let reason = wait_reason(srv.addr, "not in cluster mode").await;
    assert!(reason.contains(&plain.port.to_string()), "{reason}");

    let locked = RedisServer::start(&["--requirepass", "right"]).await;
    let seeds = format!("redis://:wrong@127.0.0.1:{}", locked.port);
    let srv = TestServer::start(seeds_config(&seeds));
    let reason = wait_reason(srv.addr, "refused our credentials").await;
    assert!(
        !reason.contains("wrong"),
        "no password in /readyz: {reason}"
    );
}

// ------------------------------------------------------ master emptied --

/// Every slot of one master is given to another (`SETSLOT NODE` on all
/// masters; the cluster holds no keys, so nothing to MIGRATE): the shard
/// is retired, its channel is subscribed on the new owner, delivery goes
/// on and `/readyz` stays 200 without that master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_emptied_of_slots_is_retired_and_its_channels_move() {
    one_worker_per_server("follows one instance's slot map");
    let c = RedisCluster::start(3, 0).await;
    let a = cluster_instance(&c, |_| {});
    wait_readyz(a.addr, 200).await;
    let old = owners(&c, &["gone".to_string()]).await[0];
    let new = c.nodes.iter().map(|n| n.port).find(|&p| p != old).unwrap();
    let mut sub = ws_connect(a.addr, "/ws/gone").await;
    wait_shardnumsub(old, "gone", 1).await;
    let r = post(a.addr, "/publish/gone", b"one").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(next_text(&mut sub).await, "one");

    let names: Vec<String> = (0..100).map(|i| format!("other-{i}")).collect();
    let on_old = owners(&c, &names).await;
    let other = &names[on_old.iter().position(|&p| p == old).expect("a channel")];
    // Every slot handed over as `redis-cli --cluster reshard` does (no
    // keys to MIGRATE): IMPORTING then NODE on the target (which bumps its
    // epoch, so the others accept the claim), then NODE on the rest.
    let (old_id, new_id) = (node_id(old).await, node_id(new).await);
    let mut raw = BytesMut::from(&raw_reply(old, &["CLUSTER", "SLOTS"]).await[..]);
    let reply = resp::decode(&mut raw, &Limits::default()).unwrap().unwrap();
    let seed = Node {
        host: "127.0.0.1".into(),
        port: old,
    };
    let map = SlotMap::from_cluster_slots(&reply, &seed).unwrap();
    let ranges = map.ranges_of(map.masters.iter().position(|m| m.port == old).unwrap());
    let mut dst = RespConn::open(new, None).await;
    let mut rest = Vec::new();
    for n in c.nodes.iter().filter(|n| n.port != new) {
        rest.push(RespConn::open(n.port, None).await);
    }
    let ok = Resp::Simple("OK".into());
    for &(start, end) in &ranges {
        for slot in start..=end {
            let s = slot.to_string();
            let r = dst
                .cmd(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &old_id])
                .await;
            assert_eq!(r, ok, "IMPORTING {s}");
            let r = dst.cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &new_id]).await;
            assert_eq!(r, ok, "NODE {s} on the target");
            for conn in &mut rest {
                let r = conn.cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &new_id]).await;
                // A master that lost its last slot turns into a replica
                // of the node that took it (cluster-allow-replica-migration).
                let replica = matches!(&r, Resp::Error(e) if e.contains("only with masters"));
                assert!(r == ok || replica, "NODE {s}: {r:?}");
            }
        }
    }
    wait_shardnumsub(new, "gone", 1).await;
    wait_shardnumsub(old, "gone", 0).await;
    // A publish to another of the old master's channels is redirected
    // (MOVED), which has the map read again: the old master is retired.
    let r = post(a.addr, &format!("/publish/{other}"), b"x").await;
    assert_eq!(r.status, 200, "{r:?}");
    let s = wait_until_stat(a.addr, |s| {
        s["redis_shards"].as_array().is_some_and(|v| {
            v.iter()
                .any(|x| x["addr"] == format!("127.0.0.1:{old}") && x["slots"] == 0)
        })
    })
    .await;
    let shards = s["redis_shards"].as_array().unwrap();
    let slots: u64 = shards.iter().map(|x| x["slots"].as_u64().unwrap()).sum();
    assert_eq!(slots, 16384, "{s}");
    wait_readyz(a.addr, 200).await;
    let r = post(a.addr, "/publish/gone", b"two").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(next_text(&mut sub).await, "two");
}

/// The type of the next presence event about `user`.
async fn next_about(ws: &mut Ws, user: &str) -> String {
    loop {
        let v = next_json(ws).await;
        if v["user"] == user {
            return v["type"].as_str().unwrap().to_string();
        }
    }
}

/// Presence on a cluster: the scripts run on the channel's master and
/// `SPUBLISH` the join/leave to the sharded events channel in the same slot
/// as their keys, so a member on one instance is announced to and listed
/// by the other, and its leave too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_works_on_a_cluster() {
    const SECRET: &str = "cluster-presence-secret-0123456789abcdef";
    let token = |sub: &str| {
        let claims = format!(r#"{{"exp":9999999999,"sub":"{sub}","subscribe":["*"]}}"#);
        corecast::auth::sign_token(&claims, SECRET.as_bytes())
    };
    let c = RedisCluster::start(3, 0).await;
    let tweak = |cfg: &mut corecast::Config| {
        cfg.auth.token_secret = Some(corecast::config::Secret(SECRET.into()));
        cfg.presence.set_patterns("room-*").unwrap();
        cfg.presence.ttl_ms = 10_000;
        cfg.presence.refresh_ms = 300;
    };
    let a = cluster_instance(&c, tweak);
    let b = cluster_instance(&c, tweak);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let join = |addr: std::net::SocketAddr, sub: &'static str| {
        let path = format!("/ws?token={}", token(sub));
        async move {
            let mut ws = ws_connect(addr, &path).await;
            let sub = serde_json::json!({"op":"subscribe","channel":"room-1","presence":true});
            ws.send(Message::text(sub.to_string())).await.unwrap();
            loop {
                let r = next_json(&mut ws).await;
                if r["type"] == "subscribed" {
                    return ws;
                }
            }
        }
    };
    let mut ann = join(a.addr, "ann").await;
    let bob = join(b.addr, "bob").await;
    assert_eq!(next_about(&mut ann, "bob").await, "join");
    let t = token("reader");
    for addr in [a.addr, b.addr] {
        let r = get(addr, &format!("/presence/room-1?token={t}")).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["count"], 2, "{addr}");
    }
    drop(bob);
    assert_eq!(next_about(&mut ann, "bob").await, "leave");
}
