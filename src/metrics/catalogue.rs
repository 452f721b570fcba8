//! Every series `/metrics` can show, as the book's metrics page lists
//! them (docs/src/metrics.md, between its markers; a test fails when the
//! page is stale). Regenerate with `cargo run --example print_metrics_table`.

use crate::hooks::stats::HookStats;
use crate::hooks::HookKind;
use crate::stats::{ConsumerStats, NamespaceStats, PusherAppStats, ShardStats, Snapshot};

use super::{render, render_workers, Gauges};

/// Every family (name, type, help), in the order `/metrics` shows them:
/// rendered from a snapshot that has one of everything that is listed
/// per app, per namespace, per Redis master, per hook and per worker.
pub fn families() -> Vec<(String, String, String)> {
    let mut snap = Snapshot::default();
    snap.redis.shards.push(ShardStats {
        addr: "redis:6379".into(),
        ..ShardStats::default()
    });
    snap.pusher_apps
        .insert("app".into(), PusherAppStats::default());
    snap.namespaces
        .insert("ns".into(), NamespaceStats::default());
    snap.consumers
        .insert("outbox".into(), ConsumerStats::default());
    snap.proxy = HookKind::ALL
        .iter()
        .map(|k| (*k, HookStats::default()))
        .collect();
    let gauges = Gauges {
        redis_enabled: true,
        ..Gauges::default()
    };
    let mut text = render(&snap, &gauges);
    crate::hooks::stats::render(&mut text, &snap.proxy);
    render_workers(&mut text, &[(0, &snap)]);
    let mut out: Vec<(String, String, String)> = Vec::new();
    let mut help = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').map_or("", |(_, h)| h).to_string();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if !out.iter().any(|(n, _, _)| n == name) {
                out.push((name.to_string(), kind.to_string(), help.clone()));
            }
        }
    }
    out
}

/// The families as a Markdown table.
pub fn markdown_table() -> String {
    let mut out = String::from("| series | type | meaning |\n|---|---|---|\n");
    for (name, kind, help) in families() {
        let help = help.replace('|', "\\|");
        out.push_str(&format!("| `{name}` | {kind} | {help} |\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_books_metrics_page_lists_every_series_as_generated() {
        let page = include_str!("../../docs/src/metrics.md");
        let table = crate::generated::between_markers(page, "<!-- generated: every series");
        assert!(
            table == markdown_table().trim_end(),
            "docs/src/metrics.md is stale: regenerate its table with \
             `cargo run --example print_metrics_table` between its markers"
        );
    }

    #[test]
    fn every_family_is_listed_once_with_its_type_and_help() {
        let families = families();
        assert!(families.len() > 100, "{}", families.len());
        for (name, kind, help) in &families {
            assert!(name.starts_with("corecast_"), "{name}");
            assert!(!kind.is_empty() && !help.is_empty(), "{name}");
        }
        for wanted in ["corecast_worker_connections", "corecast_redis_shard_slots"] {
            assert!(families.iter().any(|(n, _, _)| n == wanted), "{wanted}");
        }
    }
}
