//! Per outbox consumer (label `consumer`: the configured names, `A-Z a-z
//! 0-9 - _ .`, safe in a label without escaping). Nothing without
//! consumers.

use super::series::labelled;
use crate::stats::{ConsumerStats, Snapshot};

type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ConsumerStats) -> u64,
);

pub(super) fn consumers(o: &mut String, snap: &Snapshot) {
    if snap.consumers.is_empty() {
        return;
    }
    let families: [Family; 6] = [
        (
            "corecast_consumer_published_total",
            "counter",
            "Outbox rows published (confirmed) and deleted.",
            |c| c.published,
        ),
        (
            "corecast_consumer_dead_lettered_total",
            "counter",
            "Poison outbox rows moved to the dead-letter table.",
            |c| c.dead_lettered,
        ),
        (
            "corecast_consumer_retried_total",
            "counter",
            "Outbox rows left for a later claim (publish not confirmed).",
            |c| c.retried,
        ),
        (
            "corecast_consumer_errors_total",
            "counter",
            "Outbox consumer connections lost or refused, statements failed.",
            |c| c.errors,
        ),
        (
            "corecast_consumer_claims_total",
            "counter",
            "Outbox batches claimed.",
            |c| c.claims,
        ),
        (
            "corecast_consumer_connected",
            "gauge",
            "1 while the consumer is connected with its tables found.",
            |c| c.connected,
        ),
    ];
    for (name, kind, help, value) in families {
        let rows: Vec<(&str, u64)> = snap
            .consumers
            .iter()
            .map(|(n, c)| (n.as_str(), value(c)))
            .collect();
        labelled(o, name, help, kind, "consumer", &rows);
    }
}
