//! Presence reads per connection (`--presence-read-rate`): a read —
//! `{"op":"presence"}` or `GET /presence/{channel}` — lists every member
//! (in Redis mode a prune script over the channel's entries, up to
//! `--presence-max-members` per instance), so no client may ask without
//! limit.

use std::collections::HashMap;

use crate::auth::TokenBucket;

/// A table this small is never swept.
const SWEEP_FLOOR: usize = 1024;

/// Each reading connection's token bucket (`rate` reads per second, a
/// second's worth of burst). A full bucket is what a new one is, so only
/// connections that read within about the last second keep an entry:
/// the table is swept of full buckets whenever it doubles, and so holds
/// at most about twice the connections that read recently (never more
/// than the connections that ever read).
#[derive(Debug)]
pub struct ReadLimiter {
    buckets: HashMap<u64, TokenBucket>,
    sweep_at: usize,
}

impl Default for ReadLimiter {
    fn default() -> Self {
        ReadLimiter {
            buckets: HashMap::new(),
            sweep_at: SWEEP_FLOOR,
        }
    }
}

impl ReadLimiter {
    /// One read by connection `conn` (its serial: never reused) at
    /// `now_ms`; `Err(ms)`: over `rate`, try again in `ms`. `rate` 0: no
    /// limit.
    pub fn take(&mut self, conn: u64, rate: u32, now_ms: u64) -> Result<(), u64> {
        if rate == 0 {
            return Ok(());
        }
        if self.buckets.len() >= self.sweep_at {
            self.buckets.retain(|_, b| !b.is_full(now_ms));
            self.sweep_at = self.buckets.len().saturating_mul(2).max(SWEEP_FLOOR);
        }
        self.buckets
            .entry(conn)
            .or_insert_with(|| TokenBucket::new(rate, rate, now_ms))
            .take(now_ms)
    }

    /// Connections with an entry.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no connection has an entry.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_reads_at_its_rate_and_others_are_apart() {
        let mut r = ReadLimiter::default();
        for _ in 0..5 {
            assert_eq!(r.take(1, 5, 0), Ok(()));
        }
        assert_eq!(r.take(1, 5, 0), Err(200));
        assert_eq!(r.take(2, 5, 0), Ok(()), "another connection has its own");
        assert_eq!(r.take(1, 5, 200), Ok(()), "refilled");
        assert_eq!(r.take(1, 0, 0), Ok(()), "0: unlimited");
    }

    #[test]
    fn the_table_keeps_only_recent_readers() {
        let mut r = ReadLimiter::default();
        for conn in 0..10_000u64 {
            r.take(conn, 10, conn).unwrap();
        }
        // A reader's bucket is full again 100 ms after its one read: only
        // the last ones' entries survive the sweeps.
        assert!(r.len() <= 2 * SWEEP_FLOOR, "{}", r.len());
        let later = 1_000_000;
        for conn in 0..SWEEP_FLOOR as u64 {
            r.take(20_000 + conn, 10, later).unwrap();
        }
        assert!(r.len() <= SWEEP_FLOOR + 1, "{}", r.len());
    }
}
