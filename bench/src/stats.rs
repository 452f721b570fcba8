//! Latency and delivery accounting, sans-I/O: plain values in, counts out.
//!
//! - [`Histogram`]: a log-linear histogram of nanosecond values with a fixed
//!   bucket array (about 58 KiB, whatever is recorded) and at most 1/128
//!   (0.79 %) relative error on any percentile.
//! - [`SeqTracker`]: the sequence numbers one subscriber received from one
//!   publisher, classified as in order, late (out of order), duplicate or
//!   stale, with a bounded window; losses are what was sent minus what
//!   arrived.

/// Values below `2^SUB_BITS + 1` get a bucket each; above, every power-of-two
/// range `[2^m, 2^(m+1))` is cut into `2^SUB_BITS` equal buckets, so a
/// bucket is at most `2^m / 128` wide: relative error below 1 %.
const SUB_BITS: u32 = 7;
const SUB_COUNT: usize = 1 << SUB_BITS;
/// Values `< LINEAR` are stored exactly.
const LINEAR: u64 = 2 << SUB_BITS;
/// One exact bucket per value below `LINEAR`, then `SUB_COUNT` per octave
/// for the octaves `2^8 ..= 2^63`.
const BUCKETS: usize = LINEAR as usize + (63 - SUB_BITS as usize) * SUB_COUNT;

/// A log-linear histogram of `u64` values (nanoseconds here).
///
/// Memory is fixed at construction: the bucket array does not grow with the
/// number or range of recorded values.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("total", &self.total)
            .field("min", &self.min)
            .field("max", &self.max)
            .finish()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        if let Some(c) = self.counts.get_mut(bucket_of(v)) {
            *c += 1;
        }
        self.total += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += u128::from(v);
    }

    /// Adds every value recorded in `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Largest recorded value (exact), 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Smallest recorded value (exact), 0 when empty.
    pub fn min(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min
        }
    }

    /// Mean of the recorded values (exact), 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// The value at quantile `q` (0.0..=1.0): the highest value of the
    /// bucket holding the `ceil(q * count)`-th smallest recording, capped
    /// at the exact maximum. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_high(i).min(self.max);
            }
        }
        self.max
    }

    /// How many recorded values are above `v`, give or take the values in
    /// `v`'s own bucket (within 0.79 % of `v`), which count as not above.
    pub fn count_above(&self, v: u64) -> u64 {
        let first = bucket_of(v).saturating_add(1);
        self.counts.get(first..).map_or(0, |c| c.iter().sum())
    }
}

/// The bucket index of `v`.
#[inline]
fn bucket_of(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    // v >= 256, so msb >= 8 and the shift keeps the top 8 bits: the
    // leading 1 and SUB_BITS bits below it.
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    let sub = (v >> shift) as usize - SUB_COUNT;
    LINEAR as usize + (msb - SUB_BITS - 1) as usize * SUB_COUNT + sub
}

/// The largest value that lands in bucket `i`.
fn bucket_high(i: usize) -> u64 {
    if i < LINEAR as usize {
        return i as u64;
    }
    let octave = (i - LINEAR as usize) / SUB_COUNT;
    let sub = ((i - LINEAR as usize) % SUB_COUNT + SUB_COUNT) as u64;
    let shift = octave as u32 + 1;
    // `(sub + 1) << shift` is 2^64 for the very last bucket, which wraps to
    // 0; minus one that is u64::MAX, its correct high end.
    ((sub + 1) << shift).wrapping_sub(1)
}

/// How many sequence numbers behind the newest one a [`SeqTracker`] still
/// remembers; an arrival older than that is [`Arrival::Stale`].
pub const SEQ_WINDOW: u64 = 1024;
const WINDOW_WORDS: usize = (SEQ_WINDOW / 64) as usize;

/// How one arrival was classified by [`SeqTracker::observe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next expected sequence number, or a newer one (skipping some,
    /// which may still arrive late or be lost).
    InOrder,
    /// Older than the newest seen, and not seen before: out of order.
    Late,
    /// Seen before.
    Duplicate,
    /// Older than the window: cannot tell late from duplicate.
    Stale,
}

/// The deliveries one subscriber got from one publisher, whose sequence
/// numbers start at 0 and go up by one.
///
/// Remembers which of the last [`SEQ_WINDOW`] sequence numbers arrived in a
/// fixed bitmap, so duplicates and late arrivals are told apart exactly
/// within that window with bounded memory.
#[derive(Debug, Clone)]
pub struct SeqTracker {
    /// Bit `s % SEQ_WINDOW` says whether `s` arrived, for `s` in
    /// `next - SEQ_WINDOW .. next`.
    seen: [u64; WINDOW_WORDS],
    /// One past the newest sequence number seen.
    next: u64,
    /// Distinct sequence numbers received.
    pub unique: u64,
    /// Arrivals of a sequence number already received.
    pub duplicates: u64,
    /// First arrivals of a sequence number older than the newest seen.
    pub out_of_order: u64,
    /// Arrivals too old for the window to classify (counted, not unique).
    pub stale: u64,
}

impl Default for SeqTracker {
    fn default() -> Self {
        SeqTracker {
            seen: [0; WINDOW_WORDS],
            next: 0,
            unique: 0,
            duplicates: 0,
            out_of_order: 0,
            stale: 0,
        }
    }
}

impl SeqTracker {
    /// Records the arrival of `seq` and says what it was.
    #[inline]
    pub fn observe(&mut self, seq: u64) -> Arrival {
        if seq >= self.next {
            self.advance_to(seq);
            self.set(seq);
            self.unique += 1;
            return Arrival::InOrder;
        }
        if self.next - seq > SEQ_WINDOW {
            self.stale += 1;
            return Arrival::Stale;
        }
        if self.is_set(seq) {
            self.duplicates += 1;
            Arrival::Duplicate
        } else {
            self.set(seq);
            self.unique += 1;
            self.out_of_order += 1;
            Arrival::Late
        }
    }

    /// Sequence numbers never received out of the `sent` the publisher
    /// sent (0 ..sent). Arrivals beyond `sent` would be a bug in the
    /// publisher and do not hide losses: `unique` counts only distinct ones.
    pub fn lost(&self, sent: u64) -> u64 {
        sent.saturating_sub(self.unique)
    }

    /// One past the newest sequence number seen.
    pub fn next_expected(&self) -> u64 {
        self.next
    }

    /// Moves the window so that `seq` is its newest slot, clearing the
    /// slots of the sequence numbers that fall out.
    fn advance_to(&mut self, seq: u64) {
        let new_next = seq + 1;
        if new_next - self.next >= SEQ_WINDOW {
            self.seen = [0; WINDOW_WORDS];
        } else {
            for s in self.next..new_next {
                self.clear(s);
            }
        }
        self.next = new_next;
    }

    #[inline]
    fn slot(seq: u64) -> (usize, u64) {
        let bit = seq % SEQ_WINDOW;
        ((bit / 64) as usize, 1 << (bit % 64))
    }

    #[inline]
    fn set(&mut self, seq: u64) {
        let (w, m) = Self::slot(seq);
        if let Some(word) = self.seen.get_mut(w) {
            *word |= m;
        }
    }

    #[inline]
    fn clear(&mut self, seq: u64) {
        let (w, m) = Self::slot(seq);
        if let Some(word) = self.seen.get_mut(w) {
            *word &= !m;
        }
    }

    #[inline]
    fn is_set(&self, seq: u64) -> bool {
        let (w, m) = Self::slot(seq);
        self.seen.get(w).is_some_and(|word| word & m != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift64*), enough for tests.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    #[test]
    fn buckets_are_monotonic_and_cover_their_values() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut values: Vec<u64> = (0..2000).collect();
        values.extend((0..64).map(|s| 1u64 << s));
        values.extend((1..64).map(|s| (1u64 << s) - 1));
        values.extend((0..20_000).map(|_| rng.next() >> (rng.next() % 64)));
        values.push(u64::MAX);
        for v in values {
            let i = bucket_of(v);
            assert!(i < BUCKETS, "{v} -> {i}");
            assert!(bucket_high(i) >= v, "{v}: high {}", bucket_high(i));
            if i > 0 {
                assert!(bucket_high(i - 1) < v, "{v} also fits bucket {}", i - 1);
            }
            // Relative error of reporting the bucket's high end.
            let err = (bucket_high(i) - v) as f64 / v.max(1) as f64;
            assert!(err <= 1.0 / 128.0, "{v}: error {err}");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_match_a_sorted_reference_within_one_percent() {
        let mut rng = Rng(42);
        let mut h = Histogram::new();
        // Latency-like: mostly tens of microseconds, a long tail to seconds.
        let mut values: Vec<u64> = (0..100_000)
            .map(|_| {
                let base = 20_000 + rng.next() % 30_000;
                if rng.next().is_multiple_of(100) {
                    base * (1 + rng.next() % 50_000)
                } else {
                    base
                }
            })
            .collect();
        for &v in &values {
            h.record(v);
        }
        values.sort_unstable();
        for q in [0.0, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
            let rank = ((q * values.len() as f64).ceil() as usize).max(1);
            let exact = values[rank - 1];
            let got = h.quantile(q);
            let err = (got as f64 - exact as f64).abs() / exact as f64;
            assert!(err <= 0.01, "q={q}: exact {exact} got {got}");
            assert!(got >= exact);
        }
        assert_eq!(h.quantile(1.0), *values.last().unwrap());
        assert_eq!(h.max(), *values.last().unwrap());
        assert_eq!(h.min(), values[0]);
        assert_eq!(h.count(), 100_000);
    }

    #[test]
    fn count_above_and_merge() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        for v in [1_000u64, 5_000_000, 20_000_000, 60_000_000] {
            a.record(v);
        }
        b.record(200_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 5);
        assert_eq!(a.count_above(10_000_000), 3);
        assert_eq!(a.count_above(50_000_000), 2);
        assert_eq!(a.count_above(100_000_000), 1);
        assert_eq!(a.count_above(u64::MAX), 0);
        assert_eq!(a.max(), 200_000_000);
        assert_eq!(a.min(), 1_000);
    }

    #[test]
    fn empty_histogram_reports_zeroes() {
        let h = Histogram::new();
        assert_eq!((h.quantile(0.5), h.max(), h.min(), h.count()), (0, 0, 0, 0));
        assert_eq!(h.mean(), 0.0);
    }

    fn feed(t: &mut SeqTracker, seqs: impl IntoIterator<Item = u64>) -> Vec<Arrival> {
        seqs.into_iter().map(|s| t.observe(s)).collect()
    }

    #[test]
    fn in_order_stream_has_no_anomalies() {
        let mut t = SeqTracker::default();
        let out = feed(&mut t, 0..10_000);
        assert!(out.iter().all(|a| *a == Arrival::InOrder));
        assert_eq!(
            (t.unique, t.duplicates, t.out_of_order, t.stale),
            (10_000, 0, 0, 0)
        );
        assert_eq!(t.lost(10_000), 0);
    }

    #[test]
    fn gaps_are_losses_unless_filled_late() {
        let mut t = SeqTracker::default();
        // 3 and 5 skipped, 3 arrives late; 9 never sent to us (trailing).
        let out = feed(&mut t, [0, 1, 2, 4, 6, 3, 7, 8]);
        assert_eq!(out[5], Arrival::Late);
        assert_eq!(t.out_of_order, 1);
        assert_eq!(t.unique, 8);
        assert_eq!(t.lost(10), 2); // 5 and 9
        assert_eq!(t.next_expected(), 9);
    }

    #[test]
    fn duplicates_are_told_from_late_arrivals() {
        let mut t = SeqTracker::default();
        let out = feed(&mut t, [0, 2, 2, 1, 1, 0, 3]);
        use Arrival::*;
        assert_eq!(
            out,
            [InOrder, InOrder, Duplicate, Late, Duplicate, Duplicate, InOrder]
        );
        assert_eq!((t.unique, t.duplicates, t.out_of_order), (4, 3, 1));
        assert_eq!(t.lost(4), 0);
    }

    #[test]
    fn window_edges() {
        let mut t = SeqTracker::default();
        t.observe(0);
        t.observe(SEQ_WINDOW); // 1..SEQ_WINDOW skipped
                               // 1 is SEQ_WINDOW behind next (SEQ_WINDOW + 1): still in the window.
        assert_eq!(t.observe(1), Arrival::Late);
        assert_eq!(t.observe(1), Arrival::Duplicate);
        // 0 is exactly SEQ_WINDOW + 1 behind next: out of the window.
        assert_eq!(t.observe(0), Arrival::Stale);
        // A jump past the whole window forgets everything older.
        t.observe(10 * SEQ_WINDOW);
        assert_eq!(t.observe(10 * SEQ_WINDOW - 5), Arrival::Late);
        assert_eq!(t.observe(10 * SEQ_WINDOW), Arrival::Duplicate);
    }

    #[test]
    fn shuffled_stream_with_losses_and_duplicates_matches_reference() {
        let mut rng = Rng(7);
        let sent = 50_000u64;
        // Each message: dropped (1 %), duplicated (1 %), or delivered; then
        // locally reordered by swapping neighbours within a short distance.
        let mut stream = Vec::new();
        let mut dropped = 0;
        for s in 0..sent {
            match rng.next() % 100 {
                0 => dropped += 1,
                1 => stream.extend([s, s]),
                _ => stream.push(s),
            }
        }
        for i in 0..stream.len() {
            let j = (i + (rng.next() % 8) as usize).min(stream.len() - 1);
            stream.swap(i, j);
        }
        let mut t = SeqTracker::default();
        let mut seen = std::collections::HashSet::new();
        let (mut dups, mut late, mut max) = (0u64, 0u64, None::<u64>);
        for &s in &stream {
            let first = seen.insert(s);
            let a = t.observe(s);
            match a {
                Arrival::Duplicate => assert!(!first),
                Arrival::Late => assert!(first && max.is_some_and(|m| s < m)),
                Arrival::InOrder => assert!(first),
                Arrival::Stale => panic!("reordering is far inside the window"),
            }
            dups += u64::from(!first);
            late += u64::from(first && max.is_some_and(|m| s < m));
            max = max.max(Some(s));
        }
        assert_eq!(t.duplicates, dups);
        assert_eq!(t.out_of_order, late);
        assert_eq!(t.lost(sent), dropped);
    }
}
