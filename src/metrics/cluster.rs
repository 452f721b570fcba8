//! Redis Cluster metrics: the link's redirect and topology counters, and
//! one series per shard labelled `node="host:port"` (connected, slots,
//! subscriptions, publishes, `MOVED`/`ASK`, resubscribes after a slot
//! move, reconnects). Nothing is written with one Redis.

use std::fmt::Write as _;

use crate::stats::{RedisStats, ShardStats};

/// A per-shard metric: name, help, type, and how to read it.
type PerShard = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ShardStats) -> u64,
);

const PER_SHARD: &[PerShard] = &[
    (
        "corecast_redis_shard_connected",
        "1 while both connections to the master are up and subscriptions restored.",
        "gauge",
        |s| s.connected,
    ),
    (
        "corecast_redis_shard_slots",
        "Slots the master serves in our slot map.",
        "gauge",
        |s| s.slots,
    ),
    (
        "corecast_redis_shard_subscriptions",
        "Channels subscribed (SSUBSCRIBE) on the master.",
        "gauge",
        |s| s.subscriptions,
    ),
    (
        "corecast_redis_shard_publishes_total",
        "Publishes queued for the master.",
        "counter",
        |s| s.publishes,
    ),
    (
        "corecast_redis_shard_moved_total",
        "Commands and subscriptions the master redirected (MOVED/ASK).",
        "counter",
        |s| s.moved,
    ),
    (
        "corecast_redis_shard_resubscribes_total",
        "Channels the master dropped when their slot moved, subscribed again on the new owner.",
        "counter",
        |s| s.resubscribes,
    ),
    (
        "corecast_redis_shard_reconnects_total",
        "Connections to the master lost and re-established.",
        "counter",
        |s| s.reconnects,
    ),
];

/// Failovers followed (Sentinel or Cluster) and the Sentinels' errors:
/// shown in every Redis mode.
pub(super) fn failovers(o: &mut String, r: &RedisStats) {
    for (name, help, value) in [
        (
            "corecast_redis_failovers_total",
            "Failovers followed: the link re-pointed to a master a Sentinel or the cluster promoted (per worker).",
            r.failovers,
        ),
        (
            "corecast_redis_sentinel_errors_total",
            "Reads of the master's address that no Sentinel answered usefully.",
            r.sentinel_errors,
        ),
    ] {
        let _ = writeln!(
            o,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
}

/// Appends the cluster metrics of `r` to `o` (none without shards).
pub(super) fn render(o: &mut String, r: &RedisStats) {
    if r.shards.is_empty() {
        return;
    }
    for (name, help, value) in [
        (
            "corecast_redis_redirects_total",
            "Commands a cluster node redirected (MOVED/ASK).",
            r.redirects,
        ),
        (
            "corecast_redis_topology_refreshes_total",
            "Cluster topology reads that succeeded.",
            r.topology_refreshes,
        ),
        (
            "corecast_redis_topology_errors_total",
            "Cluster topology reads that found no usable node.",
            r.topology_errors,
        ),
    ] {
        let _ = writeln!(
            o,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
    for (name, help, kind, get) in PER_SHARD {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in &r.shards {
            let _ = writeln!(o, "{name}{{node=\"{}\"}} {}", s.addr, get(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_series_per_shard_labelled_by_node() {
        let mut o = String::new();
        render(&mut o, &RedisStats::default());
        assert!(o.is_empty(), "nothing with one Redis");
        let r = RedisStats {
            redirects: 3,
            shards: vec![
                ShardStats {
                    addr: "10.0.0.1:7000".into(),
                    slots: 8192,
                    moved: 2,
                    ..Default::default()
                },
                ShardStats {
                    addr: "10.0.0.2:7000".into(),
                    slots: 8192,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        render(&mut o, &r);
        assert!(o.contains("corecast_redis_redirects_total 3\n"), "{o}");
        assert!(o.contains("corecast_redis_shard_slots{node=\"10.0.0.2:7000\"} 8192\n"));
        assert!(o.contains("corecast_redis_shard_moved_total{node=\"10.0.0.1:7000\"} 2\n"));
        assert_eq!(
            o.matches("# TYPE corecast_redis_shard_slots gauge").count(),
            1
        );
    }
}
