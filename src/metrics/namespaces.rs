//! Per channel namespace (label `namespace`: the configured names and
//! `default`, a set the configuration bounds; names are `A-Z a-z 0-9 - _
//! .`, safe in a label without escaping). Nothing without namespaces.

use super::series::{counter, labelled};
use crate::stats::{NamespaceStats, Snapshot};

type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&NamespaceStats) -> u64,
);

pub(super) fn namespaces(o: &mut String, snap: &Snapshot) {
    let Some(unknown) = snap.namespace_unknown_channel else {
        return;
    };
    let families: [Family; 6] = [
        (
            "corecast_namespace_publishes_total",
            "counter",
            "Messages published on a namespace's channels that its rules let through.",
            |n| n.publishes,
        ),
        (
            "corecast_namespace_deliveries_total",
            "counter",
            "Messages queued to subscribers of a namespace's channels.",
            |n| n.deliveries,
        ),
        (
            "corecast_namespace_refused_total",
            "counter",
            "Subscribes, reads and publishes a namespace's rules refused.",
            |n| n.refused,
        ),
        (
            "corecast_namespace_subscriptions",
            "gauge",
            "Subscriptions to a namespace's channels.",
            |n| n.subscriptions,
        ),
        (
            "corecast_namespace_connections",
            "gauge",
            "Connections subscribed to at least one of a namespace's channels.",
            |n| n.connections,
        ),
        (
            "corecast_namespace_channels",
            "gauge",
            "A namespace's channels with subscribers.",
            |n| n.channels,
        ),
    ];
    for (name, kind, help, value) in families {
        let rows: Vec<(&str, u64)> = snap
            .namespaces
            .iter()
            .map(|(ns, n)| (ns.as_str(), value(n)))
            .collect();
        labelled(o, name, help, kind, "namespace", &rows);
    }
    counter(
        o,
        "corecast_namespace_unknown_channel_total",
        "Requests refused for naming a channel of a namespace that is not configured.",
        unknown,
    );
}
