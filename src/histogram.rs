//! A fixed-bucket latency histogram: what `/metrics` exposes and the
//! status page reads quantiles from. A leaf: it knows nothing of the
//! counters that hold it or of the exposition format around it.

use std::fmt::Write as _;

/// Upper bounds (seconds) of the latency histogram buckets: 50 µs to 5 s.
pub const BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
];

/// A fixed-bucket latency histogram (non-cumulative counts; rendered
/// cumulatively). Observing is a short linear scan, no allocation.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: [u64; BUCKETS.len() + 1],
    sum_ns: u64,
    count: u64,
}

impl Histogram {
    /// Records one observation of `ns` nanoseconds.
    #[inline]
    pub fn observe_ns(&mut self, ns: u64) {
        let secs = ns as f64 / 1e9;
        let i = BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BUCKETS.len());
        self.counts[i] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.count += 1;
    }

    /// Observations recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds `other`'s observations (another worker's) to these.
    pub fn add(&mut self, other: &Histogram) {
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.count += other.count;
    }

    /// The observations made since `earlier` (a previous copy of this one).
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let mut d = Histogram::default();
        for (i, c) in d.counts.iter_mut().enumerate() {
            *c = self.counts[i].saturating_sub(earlier.counts[i]);
        }
        d.sum_ns = self.sum_ns.saturating_sub(earlier.sum_ns);
        d.count = self.count.saturating_sub(earlier.count);
        d
    }

    /// Upper bound (seconds) of the bucket holding quantile `q` (0..=1);
    /// `None` without observations. Coarse by design: bucket resolution.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(BUCKETS.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        None
    }

    /// Appends the Prometheus histogram family `name` to `out`.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i];
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS.len()];
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_ns as f64 / 1e9);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_bucket_cumulatively() {
        let mut h = Histogram::default();
        h.observe_ns(40_000); // 40 µs
        h.observe_ns(3_000_000); // 3 ms
        h.observe_ns(60_000_000_000); // 60 s
        let mut out = String::new();
        h.render(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"0.00005\"} 1\n"));
        assert!(out.contains("x_bucket{le=\"0.005\"} 2\n"));
        assert!(out.contains("x_bucket{le=\"5\"} 2\n"));
        assert!(out.contains("x_bucket{le=\"+Inf\"} 3\n"));
        assert!(out.contains("x_count 3\n"));
    }

    #[test]
    fn quantiles_over_an_interval() {
        let mut h = Histogram::default();
        for _ in 0..98 {
            h.observe_ns(200_000); // 0.2 ms → bucket 0.25 ms
        }
        let before = h.clone();
        for _ in 0..99 {
            h.observe_ns(200_000);
        }
        h.observe_ns(20_000_000); // 20 ms → bucket 25 ms
        let d = h.since(&before);
        assert_eq!(d.count(), 100);
        assert_eq!(d.quantile(0.5), Some(0.000_25));
        assert_eq!(d.quantile(0.99), Some(0.000_25));
        assert_eq!(d.quantile(1.0), Some(0.025));
        assert_eq!(Histogram::default().quantile(0.5), None);
    }
}
