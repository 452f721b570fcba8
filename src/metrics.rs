//! Prometheus text exposition (format 0.0.4) of a worker's counters, and
//! the fixed-bucket histograms behind it. Sans-I/O: rendering is a pure
//! function of [`Stats`] and gauges, testable with a real parser.

use std::fmt::Write as _;

use crate::stats::Stats;

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

    fn render(&self, out: &mut String, name: &str, help: &str) {
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

/// Gauges sampled when `/metrics` is served.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// Connections in the table.
    pub connections: u64,
    /// Channels with subscribers.
    pub channels: u64,
    /// Outbound bytes queued or in flight.
    pub outbound_bytes: u64,
    /// Redis mode on.
    pub redis_enabled: bool,
    /// `/readyz` would answer 200.
    pub ready: bool,
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
    );
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

fn labelled(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    label: &str,
    rows: &[(&str, u64)],
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (value, n) in rows {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {n}");
    }
}

/// Renders every metric. Names follow Prometheus conventions: a
/// `corecast_` prefix, `_total` on counters, base units (bytes, seconds).
pub fn render(s: &Stats, g: &Gauges) -> String {
    let mut o = String::with_capacity(8 * 1024);
    gauge(
        &mut o,
        "corecast_connections",
        "Open TCP connections (HTTP and WebSocket).",
        g.connections,
    );
    counter(
        &mut o,
        "corecast_connections_opened_total",
        "TCP connections accepted.",
        s.connections_opened,
    );
    counter(
        &mut o,
        "corecast_connections_rejected_total",
        "Connections refused at --max-connections (503).",
        s.connections_rejected,
    );
    labelled(
        &mut o,
        "corecast_connections_closed_total",
        "Connections ended, by reason (server-side reasons; `other` = client left or error).",
        "counter",
        "reason",
        &[
            ("slow_consumer", s.slow_consumer_disconnects),
            ("protocol_error", s.protocol_errors),
            ("handshake_timeout", s.handshake_timeouts),
            ("idle_timeout", s.idle_timeouts),
            ("close_timeout", s.close_timeouts),
            (
                "other",
                s.connections_closed.saturating_sub(
                    s.slow_consumer_disconnects
                        + s.protocol_errors
                        + s.handshake_timeouts
                        + s.idle_timeouts
                        + s.close_timeouts,
                ),
            ),
        ],
    );
    counter(
        &mut o,
        "corecast_websockets_opened_total",
        "Successful WebSocket upgrades.",
        s.websockets_opened,
    );
    labelled(
        &mut o,
        "corecast_handshake_failures_total",
        "Refused upgrades, by reason.",
        "counter",
        "reason",
        &[
            ("bad_request", s.handshake_failures),
            ("unauthorized", s.auth_failures),
        ],
    );
    gauge(
        &mut o,
        "corecast_channels",
        "Channels with at least one local subscriber.",
        g.channels,
    );
    gauge(
        &mut o,
        "corecast_subscriptions",
        "Channel subscriptions.",
        s.subscriptions,
    );
    counter(
        &mut o,
        "corecast_messages_in_total",
        "Messages fanned out by this instance.",
        s.messages_in,
    );
    counter(
        &mut o,
        "corecast_deliveries_total",
        "Messages queued to a subscriber (one per subscriber).",
        s.deliveries,
    );
    counter(
        &mut o,
        "corecast_messages_not_delivered_total",
        "Deliveries dropped (slow consumer, closing connection).",
        s.messages_not_delivered,
    );
    counter(
        &mut o,
        "corecast_received_bytes_total",
        "Bytes received from clients.",
        s.bytes_in,
    );
    counter(
        &mut o,
        "corecast_sent_bytes_total",
        "Bytes written to clients.",
        s.bytes_out,
    );
    counter(
        &mut o,
        "corecast_writes_total",
        "Vectored writes issued to clients.",
        s.writes,
    );
    gauge(
        &mut o,
        "corecast_outbound_queued_bytes",
        "Bytes queued or in flight to clients.",
        g.outbound_bytes,
    );
    counter(
        &mut o,
        "corecast_slow_consumer_disconnects_total",
        "Subscribers cut off with close 1008.",
        s.slow_consumer_disconnects,
    );
    counter(
        &mut o,
        "corecast_slow_consumer_drops_total",
        "Messages dropped under drop-oldest.",
        s.slow_consumer_drops,
    );
    counter(
        &mut o,
        "corecast_outbound_budget_exceeded_total",
        "Times --max-total-outbound was reached.",
        s.outbound_budget_exceeded,
    );
    counter(
        &mut o,
        "corecast_fanout_paced_total",
        "Writer wake-ups that waited for a place in the fan-out window.",
        s.fanout_paced,
    );
    counter(
        &mut o,
        "corecast_fanout_window_stalls_total",
        "Times the fan-out window was full of writes waiting for peers that do not read.",
        s.fanout_window_stalls,
    );
    counter(
        &mut o,
        "corecast_publish_rate_limited_total",
        "Publisher pauses under --publish-rate.",
        s.publish_rate_limited,
    );
    counter(
        &mut o,
        "corecast_publish_backpressure_total",
        "Publisher pauses while the write backlog is over --publish-backpressure.",
        s.publish_backpressure,
    );
    counter(
        &mut o,
        "corecast_http_requests_total",
        "Plain HTTP requests answered.",
        s.http_requests,
    );
    gauge(
        &mut o,
        "corecast_ready",
        "1 while /readyz answers 200.",
        u64::from(g.ready),
    );
    if g.redis_enabled {
        gauge(
            &mut o,
            "corecast_redis_connected",
            "1 while the Redis command connection is up.",
            s.redis_connected,
        );
        counter(
            &mut o,
            "corecast_redis_reconnects_total",
            "Redis connections lost and re-established.",
            s.redis_reconnects,
        );
        counter(
            &mut o,
            "corecast_redis_publishes_total",
            "Publishes queued for Redis.",
            s.redis_publishes,
        );
        gauge(
            &mut o,
            "corecast_redis_publishes_buffered",
            "Publishes waiting for Redis.",
            s.redis_publishes_buffered,
        );
        counter(
            &mut o,
            "corecast_redis_publishes_rejected_total",
            "Publishes refused: buffer full.",
            s.redis_publishes_rejected,
        );
        counter(
            &mut o,
            "corecast_redis_messages_received_total",
            "Messages received from Redis.",
            s.redis_messages_received,
        );
        let _ = writeln!(
            o,
            "# HELP corecast_redis_canary_rtt_seconds Round trip of the last readiness canary.\n\
             # TYPE corecast_redis_canary_rtt_seconds gauge\ncorecast_redis_canary_rtt_seconds {}",
            s.redis_canary_rtt_us as f64 / 1e6
        );
    }
    s.fanout_delay.render(
        &mut o,
        "corecast_fanout_write_delay_seconds",
        "Time from publish until the write carrying the message to a subscriber completed (per write, oldest message).",
    );
    s.loop_lag.render(
        &mut o,
        "corecast_event_loop_lag_seconds",
        "How late the 100 ms housekeeping timer fired: time the event loop was busy.",
    );
    o
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

    #[test]
    fn every_family_has_help_and_type() {
        let text = render(
            &Stats::default(),
            &Gauges {
                redis_enabled: true,
                ..Gauges::default()
            },
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(text.contains(&format!("# TYPE {family} ")), "{name}");
            assert!(name.starts_with("corecast_"), "{name}");
        }
    }
}
