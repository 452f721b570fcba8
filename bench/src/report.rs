//! What the subcommands report: serialisable structs (the `--json` output)
//! and their plain-text rendering.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::client::Failures;
use super::stats::Histogram;

/// Quantiles of the latency spectrum in [`LatencySummary::percentiles`]:
/// dense towards the tail, where the interesting differences are.
pub const SPECTRUM: [f64; 16] = [
    0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999,
];

/// Percentiles of a latency histogram, in microseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest sample (exact).
    pub max_us: f64,
    /// Mean (exact).
    pub mean_us: f64,
    /// Share of samples slower than 10 ms.
    pub over_10ms: f64,
    /// Share of samples slower than 50 ms.
    pub over_50ms: f64,
    /// Share of samples slower than 100 ms.
    pub over_100ms: f64,
    /// `[quantile, µs]` pairs over [`SPECTRUM`] and the maximum (quantile
    /// 1): the whole distribution, for charts.
    #[serde(default)]
    pub percentiles: Vec<(f64, f64)>,
}

impl LatencySummary {
    /// Summarises a histogram of nanosecond values.
    pub fn from_ns(h: &Histogram) -> Self {
        let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
        let share = |ms: u64| {
            if h.count() == 0 {
                0.0
            } else {
                h.count_above(ms * 1_000_000) as f64 / h.count() as f64
            }
        };
        LatencySummary {
            count: h.count(),
            p50_us: us(h.quantile(0.5)),
            p90_us: us(h.quantile(0.9)),
            p99_us: us(h.quantile(0.99)),
            p999_us: us(h.quantile(0.999)),
            max_us: us(h.max()),
            mean_us: (h.mean() / 100.0).round() / 10.0,
            over_10ms: share(10),
            over_50ms: share(50),
            over_100ms: share(100),
            percentiles: SPECTRUM
                .iter()
                .map(|&q| (q, us(if q == 0.0 { h.min() } else { h.quantile(q) })))
                .chain(std::iter::once((1.0, us(h.max()))))
                .collect(),
        }
    }

    /// One formatted line of the summary.
    pub fn line(&self, name: &str) -> String {
        format!(
            "  {name:<16} p50 {:>9.1}  p90 {:>9.1}  p99 {:>9.1}  p99.9 {:>9.1}  max {:>9.1} µs  \
             (>10ms {:.4}%, >50ms {:.4}%, >100ms {:.4}%; n={})\n",
            self.p50_us,
            self.p90_us,
            self.p99_us,
            self.p999_us,
            self.max_us,
            self.over_10ms * 100.0,
            self.over_50ms * 100.0,
            self.over_100ms * 100.0,
            self.count
        )
    }
}

/// The generator's own cost over the measured window.
#[derive(Debug, Clone, Serialize)]
pub struct GeneratorCpu {
    /// CPU time (user + system) / wall time, in percent of one core.
    pub cpu_percent: f64,
    /// Frames received in the window.
    pub frames: u64,
    /// CPU microseconds per received frame.
    pub cpu_us_per_frame: f64,
}

/// CPU used on the whole machine over the measured window.
#[derive(Debug, Clone, Serialize)]
pub struct MachineCpu {
    /// All CPUs' busy time / wall time, percent of one core (200 = two
    /// cores fully busy).
    pub busy_percent: f64,
    /// Each CPU's busy time / wall time, percent. The server's CPU at 100
    /// means saturated even when the process's own CPU time is lower:
    /// softirq work for its sockets is not always charged to it.
    pub per_cpu_busy_percent: Vec<f64>,
    /// Busy time not used by the generator or the sampled server: other
    /// processes and unattributed kernel work. Large values mean the
    /// figures are disturbed.
    pub others_percent: f64,
}

/// Server samples from /proc.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerSample {
    /// The sampled process.
    pub pid: u32,
    /// CPU time / wall time over the measured window, percent of one core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
    /// VmRSS before the first connection, KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_before_kib: Option<u64>,
    /// VmRSS once every connection was up, KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_connected_kib: Option<u64>,
    /// VmRSS at the end of the hold, KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_held_kib: Option<u64>,
    /// (rss_held - rss_before) / connections, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes_per_connection: Option<f64>,
    /// RssAnon before the first connection, KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_anon_before_kib: Option<u64>,
    /// RssAnon at the end of the hold, KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_anon_held_kib: Option<u64>,
    /// (rss_anon_held - rss_anon_before) / connections, bytes: what the
    /// connections own, without file pages the kernel pages in and out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anon_bytes_per_connection: Option<f64>,
}

/// `connect` results.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectReport {
    /// Always "connect".
    pub command: &'static str,
    /// Target URL.
    pub url: String,
    /// Connections asked for.
    pub requested: usize,
    /// Handshakes completed and validated.
    pub connected: usize,
    /// Attempts that failed.
    pub failed: usize,
    /// Failures by cause.
    pub failures: Failures,
    /// Time from the first attempt to the last result, seconds.
    pub open_seconds: f64,
    /// Connections completed per second over `open_seconds`.
    pub open_rate: f64,
    /// Connect + handshake time per connection.
    pub handshake: LatencySummary,
    /// Held for, seconds.
    pub held_seconds: f64,
    /// Connections that ended during the hold (server close or error).
    pub dropped_during_hold: usize,
    /// Connections whose close handshake completed at the end.
    pub closed_clean: usize,
    /// Server samples, with `--server-pid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerSample>,
}

impl ConnectReport {
    /// Human-readable rendering.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "connect {}", self.url);
        let _ = writeln!(
            s,
            "  connected {}/{} in {:.2} s ({:.0}/s), failed {}",
            self.connected, self.requested, self.open_seconds, self.open_rate, self.failed
        );
        for (cause, n) in &self.failures {
            let _ = writeln!(s, "    {cause}: {n}");
        }
        s.push_str(&self.handshake.line("handshake"));
        let _ = writeln!(
            s,
            "  held {:.1} s, dropped during hold {}, closed cleanly {}",
            self.held_seconds, self.dropped_during_hold, self.closed_clean
        );
        if let Some(srv) = &self.server {
            let kib = |v: Option<u64>| v.map_or("?".into(), |v| format!("{v} KiB"));
            let _ = writeln!(
                s,
                "  server pid {}: RSS before {}, connected {}, after hold {}; {} bytes/connection",
                srv.pid,
                kib(srv.rss_before_kib),
                kib(srv.rss_connected_kib),
                kib(srv.rss_held_kib),
                srv.rss_bytes_per_connection
                    .map_or("?".into(), |b| format!("{b:.0}"))
            );
        }
        s
    }
}

/// `broadcast` results.
#[derive(Debug, Clone, Serialize)]
pub struct BroadcastReport {
    /// Always "broadcast".
    pub command: &'static str,
    /// Target URLs.
    pub urls: Vec<String>,
    /// "ws" or "http".
    pub via: &'static str,
    /// Subscriber connections.
    pub subscribers: usize,
    /// Publishers.
    pub publishers: usize,
    /// Target total publish rate, messages/s.
    pub rate: f64,
    /// Message size, bytes.
    pub size: usize,
    /// Measured window, seconds.
    pub duration_seconds: f64,
    /// Unmeasured lead-in, seconds.
    pub warmup_seconds: f64,
    /// Messages published (accepted by the server for HTTP).
    pub sent: u64,
    /// HTTP publishes the server refused (not in `sent`).
    pub publish_rejected: u64,
    /// Deliveries expected: each message times the subscribers of its URL.
    pub expected: u64,
    /// Deliveries received, duplicates included.
    pub received: u64,
    /// Distinct deliveries received.
    pub unique: u64,
    /// Expected deliveries that never arrived.
    pub lost: u64,
    /// Deliveries received more than once.
    pub duplicates: u64,
    /// Deliveries that arrived after a later one from the same publisher.
    pub out_of_order: u64,
    /// Deliveries too late for the reorder window to classify.
    pub stale: u64,
    /// Frames without a valid stamp, or from another URL's publisher.
    pub malformed: u64,
    /// Subscribers whose connection ended before the end of the run.
    pub disconnected: usize,
    /// Why they ended (`close_1008`: the server's slow-consumer close).
    pub disconnect_causes: Failures,
    /// Publishers that stopped early, and why.
    pub publisher_errors: Vec<String>,
    /// Distinct deliveries of messages sent in the window, per second.
    pub delivered_per_second: f64,
    /// Latency from send to the kernel's receive timestamp, if available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_kernel: Option<LatencySummary>,
    /// Latency from send to the generator parsing the frame.
    pub latency_parse: LatencySummary,
    /// Why kernel-receive latency is missing, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_timestamps_note: Option<String>,
    /// Worst delay of a publish behind its schedule, microseconds.
    pub publisher_max_lag_us: f64,
    /// The generator's own CPU use.
    pub generator: GeneratorCpu,
    /// Whole-machine CPU use over the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<MachineCpu>,
    /// Server samples, with `--server-pid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerSample>,
}

impl BroadcastReport {
    /// Human-readable rendering.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "broadcast via {}: {} subscribers, {} publishers, {} msg/s of {} B, {:.0} s (+{:.0} s warm-up)",
            self.via,
            self.subscribers,
            self.publishers,
            self.rate,
            self.size,
            self.duration_seconds,
            self.warmup_seconds
        );
        let _ = writeln!(
            s,
            "  sent {} (rejected {}), expected {}, received {} (unique {}), lost {}, dup {}, \
             out-of-order {}, stale {}, malformed {}, disconnected {}",
            self.sent,
            self.publish_rejected,
            self.expected,
            self.received,
            self.unique,
            self.lost,
            self.duplicates,
            self.out_of_order,
            self.stale,
            self.malformed,
            self.disconnected
        );
        for (cause, n) in &self.disconnect_causes {
            let _ = writeln!(s, "    disconnected by {cause}: {n}");
        }
        for e in &self.publisher_errors {
            let _ = writeln!(s, "    {e}");
        }
        let _ = writeln!(
            s,
            "  delivered {:.0}/s; publisher max lag {:.0} µs",
            self.delivered_per_second, self.publisher_max_lag_us
        );
        if let Some(k) = &self.latency_kernel {
            s.push_str(&k.line("kernel receive"));
        }
        if let Some(note) = &self.kernel_timestamps_note {
            let _ = writeln!(s, "  kernel receive: {note}");
        }
        s.push_str(&self.latency_parse.line("parse"));
        let g = &self.generator;
        let _ = writeln!(
            s,
            "  generator CPU {:.1}% ({:.2} µs/frame over {} frames)",
            g.cpu_percent, g.cpu_us_per_frame, g.frames
        );
        if let Some(m) = &self.machine {
            let _ = writeln!(
                s,
                "  machine busy {:.1}% of one core (per CPU {:.0?}), others {:.1}%",
                m.busy_percent, m.per_cpu_busy_percent, m.others_percent
            );
        }
        if let Some(srv) = &self.server {
            let _ = writeln!(
                s,
                "  server pid {} CPU {}",
                srv.pid,
                srv.cpu_percent.map_or("?".into(), |c| format!("{c:.1}%"))
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_summary_converts_to_microseconds() {
        let mut h = Histogram::new();
        for ns in [50_000u64, 60_000, 70_000, 20_000_000] {
            h.record(ns);
        }
        let s = LatencySummary::from_ns(&h);
        assert_eq!(s.count, 4);
        assert!((s.p50_us - 60.0).abs() / 60.0 < 0.01, "{}", s.p50_us);
        assert_eq!(s.max_us, 20_000.0);
        assert_eq!(s.over_10ms, 0.25);
        assert_eq!(s.over_50ms, 0.0);
        let line = s.line("parse");
        assert!(line.contains("p50"), "{line}");
    }
}
