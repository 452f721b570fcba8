//! `/metrics` with several workers: the series that differ between them,
//! one per worker (a `worker` label), after the totals.

use super::series::labelled;
use crate::stats::Snapshot;

/// One per-worker series: name, type, help, and its value in a snapshot.
type Series = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Snapshot) -> u64,
);

const SERIES: [Series; 7] = [
    ("corecast_worker_connections", "gauge", "Open connections, per worker.", |s| s.connections),
    ("corecast_worker_channels", "gauge", "Channels with subscribers, per worker.", |s| s.channels),
    ("corecast_worker_deliveries_total", "counter", "Messages queued to subscribers, per worker.", |s| s.worker.deliveries),
    ("corecast_worker_hops_sent_total", "counter", "Hops sent to the other workers (publishes to a channel's owner, deliveries, interest, handed-over connections).", |s| s.worker.worker_hops_out),
    ("corecast_worker_hops_received_total", "counter", "Hops taken from the other workers' rings.", |s| s.worker.worker_hops_in),
    ("corecast_worker_ring_full_total", "counter", "Hops that found their ring full and waited in the sender's overflow queue (delayed, not lost).", |s| s.worker.worker_ring_full),
    ("corecast_worker_wakes_total", "counter", "Doorbells rung for a sleeping worker.", |s| s.worker.worker_wakes),
];

/// Writes each per-worker series for `parts` (worker index, snapshot).
pub fn render_workers(o: &mut String, parts: &[(usize, &Snapshot)]) {
    for (name, kind, help, value) in SERIES {
        let labels: Vec<String> = parts.iter().map(|(i, _)| i.to_string()).collect();
        let rows: Vec<(&str, u64)> = labels
            .iter()
            .zip(parts)
            .map(|(l, (_, s))| (l.as_str(), value(s)))
            .collect();
        labelled(o, name, help, kind, "worker", &rows);
    }
}
