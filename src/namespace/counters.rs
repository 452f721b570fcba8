//! Per-namespace counters of one worker, for `/stats` (`namespaces`) and
//! `/metrics` (label `namespace`). The label set is bounded by the
//! configuration: the configured namespaces plus `default`; a channel of
//! an unknown namespace adds no row, only to the `unknown` count. Without
//! namespaces nothing is kept and every call returns at its first branch.

use std::collections::BTreeMap;

pub use super::spec::DEFAULT_LABEL;
use super::{Ns, Table};
use crate::stats::NamespaceStats;

/// One row per namespace: 0 the default one, `i + 1` the `i`-th
/// configured one (none without namespaces).
#[derive(Debug, Default)]
pub struct Counters {
    rows: Vec<NamespaceStats>,
    /// Subscribes, reads and publishes refused for naming a namespace
    /// that is not configured.
    pub unknown: u64,
}

impl Counters {
    /// Counters for `table`'s namespaces.
    pub fn new(table: &Table) -> Counters {
        let n = match table.is_empty() {
            true => 0,
            false => table.names().count() + 1,
        };
        Counters {
            rows: vec![NamespaceStats::default(); n],
            unknown: 0,
        }
    }

    fn row(&mut self, table: &Table, channel: &str) -> Option<&mut NamespaceStats> {
        if self.rows.is_empty() {
            return None;
        }
        let i = match table.find(channel)? {
            Ns::Default => 0,
            Ns::Named(i) => usize::from(i) + 1,
        };
        self.rows.get_mut(i)
    }

    /// A publish on `channel` went through its namespace's rules and
    /// reached `delivered` local subscribers at once (embedded mode).
    pub fn published(&mut self, table: &Table, channel: &str, delivered: u64) {
        if let Some(r) = self.row(table, channel) {
            r.publishes += 1;
            r.deliveries += delivered;
        }
    }

    /// A message on `channel` was queued to `n` local subscribers (Redis
    /// mode: when it comes back from Redis).
    pub fn delivered(&mut self, table: &Table, channel: &str, n: u64) {
        if let Some(r) = self.row(table, channel) {
            r.deliveries += n;
        }
    }

    /// A subscribe, read or publish on `channel` was refused by its
    /// namespace's rules, or for naming an unknown namespace.
    pub fn refused(&mut self, table: &Table, channel: &str) {
        if self.rows.is_empty() {
            return;
        }
        match self.row(table, channel) {
            Some(r) => r.refused += 1,
            None => self.unknown += 1,
        }
    }

    /// Every namespace's counters by label, with the gauges counted from
    /// `channels` (each channel with subscribers and their number) and
    /// `conns` (each subscribed connection's channels); empty without
    /// namespaces.
    pub fn snapshot<'a, C>(
        &self,
        table: &Table,
        channels: impl Iterator<Item = (&'a str, usize)>,
        conns: impl Iterator<Item = C>,
    ) -> BTreeMap<String, NamespaceStats>
    where
        C: Iterator<Item = &'a str>,
    {
        if self.rows.is_empty() {
            return BTreeMap::new();
        }
        let mut rows = self.rows.clone();
        let row_of = |channel: &str| match table.find(channel) {
            Some(Ns::Default) => Some(0),
            Some(Ns::Named(i)) => Some(usize::from(i) + 1),
            None => None,
        };
        for (channel, subscribers) in channels {
            let Some(i) = row_of(channel) else { continue };
            rows[i].channels += 1;
            rows[i].subscriptions += subscribers as u64;
        }
        // A connection counts once per namespace: its rows, deduplicated
        // (a connection holds at most --max-subscriptions channels).
        let mut seen = Vec::new();
        for names in conns {
            seen.clear();
            seen.extend(names.filter_map(row_of));
            seen.sort_unstable();
            seen.dedup();
            for &i in &seen {
                rows[i].connections += 1;
            }
        }
        let labels = std::iter::once(DEFAULT_LABEL).chain(table.names());
        labels.map(str::to_string).zip(rows).collect()
    }
}
