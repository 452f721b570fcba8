//! Tests of merging several workers' stats snapshots.

use super::*;

#[test]
fn workers_counters_add_up_and_peaks_take_the_largest() {
    let stats = |deliveries, outbound_bytes_peak| Stats {
        deliveries,
        outbound_bytes_peak,
        ..Default::default()
    };
    let mut a = Snapshot {
        connections: 3,
        worker: stats(10, 700),
        ..Default::default()
    };
    a.worker.loop_lag.observe_ns(1_000);
    a.namespaces.insert(
        "chat".into(),
        NamespaceStats {
            publishes: 2,
            ..Default::default()
        },
    );
    let mut b = Snapshot {
        connections: 4,
        worker: stats(5, 900),
        ..Default::default()
    };
    b.worker.loop_lag.observe_ns(2_000);
    b.namespaces.insert(
        "chat".into(),
        NamespaceStats {
            publishes: 1,
            ..Default::default()
        },
    );
    let t = merge(&[a, b]);
    assert_eq!(t.connections, 7);
    assert_eq!(t.worker.deliveries, 15);
    assert_eq!(t.worker.outbound_bytes_peak, 900);
    assert_eq!(t.worker.loop_lag.count(), 2);
    assert_eq!(t.namespaces["chat"].publishes, 3);
}

#[test]
fn redis_links_of_workers_merge_by_shard() {
    let shard = |addr: &str, connected, slots, publishes| ShardStats {
        addr: addr.into(),
        connected,
        slots,
        publishes,
        ..Default::default()
    };
    let worker = |connected, shards| Snapshot {
        redis: RedisStats {
            connected,
            shards,
            ..Default::default()
        },
        ..Default::default()
    };
    let a = worker(1, vec![shard("a:1", 1, 8192, 5), shard("b:1", 1, 8192, 1)]);
    let b = worker(0, vec![shard("b:1", 0, 4096, 2), shard("c:1", 1, 4096, 3)]);
    let t = merge(&[a, b]);
    assert_eq!(t.redis.connected, 0, "one worker's link is down");
    let rows: Vec<_> = t
        .redis
        .shards
        .iter()
        .map(|s| (s.addr.as_str(), s.connected, s.slots, s.publishes))
        .collect();
    assert_eq!(
        rows,
        [
            ("a:1", 1, 8192, 5),
            ("b:1", 0, 8192, 3),
            ("c:1", 1, 4096, 3)
        ]
    );
}
