//! One outbox consumer's counters: atomics its thread adds to and the
//! serving worker's `/stats` reads.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::stats::ConsumerStats;

/// One consumer's counters, written by its thread, read by `/stats`.
#[derive(Default)]
pub struct Counters {
    pub published: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub retried: AtomicU64,
    pub errors: AtomicU64,
    pub claims: AtomicU64,
    pub connected: AtomicU64,
}

impl Counters {
    pub(super) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> ConsumerStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ConsumerStats {
            published: get(&self.published),
            dead_lettered: get(&self.dead_lettered),
            retried: get(&self.retried),
            errors: get(&self.errors),
            claims: get(&self.claims),
            connected: get(&self.connected),
        }
    }
}
