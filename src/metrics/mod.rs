//! Prometheus text exposition (format 0.0.4) of a worker's counters, and
//! the fixed-bucket histograms behind it. Sans-I/O: rendering is a pure
//! function of a [`Snapshot`] and gauges, testable with a real parser.

pub mod catalogue;
mod cluster;

use std::fmt::Write as _;

use crate::stats::{CompressionStats, RedisStats, Snapshot, Stats};

mod consumers;
mod namespaces;
mod pusher;
mod series;
mod workers;
use pusher::{pusher, pusher_apps, pusher_webhooks};
use series::{counter, gauge, labelled};
pub use workers::render_workers;

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

/// Renders every metric. Names follow Prometheus conventions: a
/// `corecast_` prefix, `_total` on counters, base units (bytes, seconds).
pub fn render(snap: &Snapshot, g: &Gauges) -> String {
    let (s, r) = (&snap.worker, &snap.redis);
    let mut o = String::with_capacity(8 * 1024);
    connections(&mut o, s, g);
    deliveries(&mut o, s, g);
    pressure(&mut o, s, g);
    parking(&mut o, s);
    sse(&mut o, s);
    refusals(&mut o, snap);
    compression(&mut o, &snap.compression);
    presence(&mut o, &snap.presence);
    history(&mut o, s);
    pusher(&mut o, s);
    pusher_webhooks(&mut o, s);
    pusher_apps(&mut o, snap);
    namespaces::namespaces(&mut o, snap);
    consumers::consumers(&mut o, snap);
    if g.redis_enabled {
        redis(&mut o, r);
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

/// Connections, upgrades, channels and subscriptions.
fn connections(o: &mut String, s: &Stats, g: &Gauges) {
    gauge(
        o,
        "corecast_connections",
        "Open TCP connections (HTTP and WebSocket).",
        g.connections,
    );
    counter(
        o,
        "corecast_connections_opened_total",
        "TCP connections accepted.",
        s.connections_opened,
    );
    counter(
        o,
        "corecast_connections_rejected_total",
        "Connections refused at --max-connections (503).",
        s.connections_rejected,
    );
    labelled(
        o,
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
        o,
        "corecast_websockets_opened_total",
        "Successful WebSocket upgrades.",
        s.websockets_opened,
    );
    labelled(
        o,
        "corecast_handshake_failures_total",
        "Refused upgrades, by reason.",
        "counter",
        "reason",
        &[
            ("bad_request", s.handshake_failures),
            ("unauthorized", s.auth_failures),
        ],
    );
    tls(o, s);
    gauge(
        o,
        "corecast_channels",
        "Channels with at least one local subscriber.",
        g.channels,
    );
    gauge(
        o,
        "corecast_subscriptions",
        "Channel subscriptions.",
        s.subscriptions,
    );
}

/// TLS handshakes and certificate reloads (`--tls-cert`).
fn tls(o: &mut String, s: &Stats) {
    labelled(
        o,
        "corecast_tls_handshakes_total",
        "TLS handshakes on --listen, by outcome (`failed`: ended before completing; `refused`: over --tls-max-handshakes).",
        "counter",
        "result",
        &[
            ("full", s.tls_handshakes.saturating_sub(s.tls_resumed)),
            ("resumed", s.tls_resumed),
            ("failed", s.tls_handshake_failures),
            ("refused", s.tls_handshakes_refused),
        ],
    );
    labelled(
        o,
        "corecast_tls_errors_total",
        "Established TLS connections closed for what the client sent, by kind.",
        "counter",
        "kind",
        &[
            ("protocol", s.tls_errors),
            ("after_close_notify", s.tls_after_close_notify),
        ],
    );
    labelled(
        o,
        "corecast_tls_reloads_total",
        "Certificate reloads on SIGHUP, by outcome (`failed`: the old certificates stay).",
        "counter",
        "result",
        &[("ok", s.tls_reloads), ("failed", s.tls_reload_failures)],
    );
    jwks(o, s);
}

/// The `--token-jwks-url` key set: fetches, keys, unknown `kid`s.
fn jwks(o: &mut String, s: &Stats) {
    labelled(
        o,
        "corecast_token_jwks_fetches_total",
        "Fetches of the --token-jwks-url key set, by outcome (`failed`: the held keys stay).",
        "counter",
        "result",
        &[
            ("ok", s.token_jwks_fetches - s.token_jwks_failures),
            ("failed", s.token_jwks_failures),
        ],
    );
    gauge(
        o,
        "corecast_token_jwks_keys",
        "Keys taken from the last good key set.",
        s.token_jwks_keys,
    );
    counter(
        o,
        "corecast_token_jwks_unknown_kid_total",
        "Tokens refused for a kid no held key has.",
        s.token_jwks_unknown_kid,
    );
}

/// Messages, deliveries, bytes and writes.
fn deliveries(o: &mut String, s: &Stats, g: &Gauges) {
    counter(
        o,
        "corecast_messages_in_total",
        "Messages fanned out by this instance.",
        s.messages_in,
    );
    counter(
        o,
        "corecast_deliveries_total",
        "Messages queued to a subscriber (one per subscriber).",
        s.deliveries,
    );
    counter(
        o,
        "corecast_messages_not_delivered_total",
        "Deliveries dropped (slow consumer, closing connection).",
        s.messages_not_delivered,
    );
    counter(
        o,
        "corecast_received_bytes_total",
        "Bytes received from clients.",
        s.bytes_in,
    );
    counter(
        o,
        "corecast_sent_bytes_total",
        "Bytes written to clients.",
        s.bytes_out,
    );
    counter(
        o,
        "corecast_writes_total",
        "Vectored writes issued to clients.",
        s.writes,
    );
    gauge(
        o,
        "corecast_outbound_queued_bytes",
        "Bytes queued or in flight to clients.",
        g.outbound_bytes,
    );
    gauge(
        o,
        "corecast_outbound_queued_bytes_peak",
        "The most bytes queued or in flight to clients right after a fan-out.",
        s.outbound_bytes_peak,
    );
    gauge(
        o,
        "corecast_outbound_memory_bytes",
        "Memory held by outbound frames, each shared frame counted once (bounded by --max-total-outbound).",
        s.outbound_memory_bytes,
    );
    gauge(
        o,
        "corecast_inbound_bytes",
        "Input held by readers: partial WebSocket frames, messages being assembled, HTTP bodies being read (bounded by --max-total-inbound).",
        s.inbound_bytes,
    );
}

/// Parked WebSockets (`--park-after`).
fn parking(o: &mut String, s: &Stats) {
    counter(
        o,
        "corecast_parks_total",
        "WebSockets parked after --park-after of quiet (tasks freed).",
        s.parks,
    );
    counter(
        o,
        "corecast_unparks_total",
        "Parked WebSockets run again.",
        s.unparks,
    );
    gauge(
        o,
        "corecast_parked_connections",
        "WebSockets parked now.",
        s.parked_connections,
    );
}

/// Server-Sent Events streams (`GET /sse`).
fn sse(o: &mut String, s: &Stats) {
    gauge(
        o,
        "corecast_sse_connections",
        "Server-Sent Events streams open now.",
        s.sse_connections,
    );
    counter(
        o,
        "corecast_sse_opened_total",
        "Server-Sent Events streams opened (GET /sse answered 200).",
        s.sse_opened,
    );
    counter(
        o,
        "corecast_sse_refused_total",
        "GET /sse requests refused (bad query or Last-Event-ID, too many channels, token, rate), and streams closed for sending input.",
        s.sse_refused,
    );
}

/// Slow consumers, the outbound budget, pacing, publish limits, plain HTTP
/// and readiness.
fn pressure(o: &mut String, s: &Stats, g: &Gauges) {
    counter(
        o,
        "corecast_slow_consumer_disconnects_total",
        "Subscribers cut off with close 1008.",
        s.slow_consumer_disconnects,
    );
    counter(
        o,
        "corecast_write_stall_timeouts_total",
        "Connections cut because their writes accepted no byte for --write-stall-timeout.",
        s.write_stall_timeouts,
    );
    counter(
        o,
        "corecast_slow_consumer_drops_total",
        "Messages dropped under drop-oldest.",
        s.slow_consumer_drops,
    );
    counter(
        o,
        "corecast_messages_conflated_total",
        "Messages of latest-value channels replaced in a queue by a newer one of the same channel and key.",
        s.messages_conflated,
    );
    counter(
        o,
        "corecast_delta_deliveries_total",
        "Deliveries sent as a Fossil delta of the subscriber's previous message on the channel.",
        s.delta_deliveries,
    );
    counter(
        o,
        "corecast_inbound_budget_refusals_total",
        "WebSockets closed with 1013 and requests answered 503 because their input grew while the worker was over --max-total-inbound.",
        s.inbound_budget_refusals,
    );
    counter(
        o,
        "corecast_outbound_budget_exceeded_total",
        "Times --max-total-outbound was reached.",
        s.outbound_budget_exceeded,
    );
    counter(
        o,
        "corecast_fanout_paced_total",
        "Writer wake-ups that waited for a place in the fan-out window.",
        s.fanout_paced,
    );
    counter(
        o,
        "corecast_fanout_window_stalls_total",
        "Times the fan-out window was full of writes waiting for peers that do not read.",
        s.fanout_window_stalls,
    );
    counter(
        o,
        "corecast_publish_rate_limited_total",
        "Publisher pauses under --publish-rate.",
        s.publish_rate_limited,
    );
    counter(
        o,
        "corecast_publish_backpressure_total",
        "Publisher pauses while the write backlog is over --publish-backpressure.",
        s.publish_backpressure,
    );
    counter(
        o,
        "corecast_http_requests_total",
        "Plain HTTP requests answered.",
        s.http_requests,
    );
    gauge(
        o,
        "corecast_ready",
        "1 while /readyz answers 200.",
        u64::from(g.ready),
    );
}

/// Channel history: what it holds, resumes, backfills and gaps.
fn history(o: &mut String, s: &Stats) {
    gauge(
        o,
        "corecast_history_messages",
        "Messages held in channel histories.",
        s.history_messages,
    );
    gauge(
        o,
        "corecast_history_bytes",
        "Bytes channel histories hold (part of the --max-total-outbound budget).",
        s.history_bytes,
    );
    let rows: [(&str, &str, u64); 6] = [
        (
            "recoveries",
            "Subscribes with since that were recovered.",
            s.recoveries,
        ),
        (
            "recovered_messages",
            "Messages replayed to recovered subscribes.",
            s.recovered_messages,
        ),
        (
            "recoveries_failed",
            "Subscribes with since that could not be recovered.",
            s.recoveries_failed,
        ),
        (
            "backfilled_messages",
            "Messages read back from Redis to close a gap.",
            s.backfilled_messages,
        ),
        (
            "history_gaps",
            "Gaps that could not be backfilled.",
            s.history_gaps,
        ),
        (
            "history_rollbacks",
            "Redis lost messages it had acknowledged (a failover): gap notices sent where.",
            s.history_rollbacks,
        ),
    ];
    for (name, help, value) in rows {
        counter(o, &format!("corecast_{name}_total"), help, value);
    }
}

/// Refusals: publishes without the grant, per-address limits, wrong purge
/// tokens, expired tokens, and the refusal log lines held back.
fn refusals(o: &mut String, snap: &Snapshot) {
    let s = &snap.worker;
    counter(
        o,
        "corecast_publish_forbidden_total",
        "WebSocket publishes refused: the connection may not publish there.",
        s.publish_forbidden,
    );
    counter(
        o,
        "corecast_refusal_logs_suppressed_total",
        "Refusal log lines suppressed by the per-kind rate limit.",
        s.refusal_logs_suppressed,
    );
    counter(
        o,
        "corecast_per_ip_connections_rejected_total",
        "Connections refused at --max-connections-per-ip.",
        s.per_ip_connections_rejected,
    );
    counter(
        o,
        "corecast_per_ip_handshakes_limited_total",
        "Upgrades refused over --handshake-rate-per-ip.",
        s.per_ip_handshakes_limited,
    );
    gauge(
        o,
        "corecast_per_ip_tracked",
        "Client addresses tracked by the per-IP limits.",
        s.per_ip_tracked,
    );
    counter(
        o,
        "corecast_cache_purge_refused_total",
        "POST /cache/purge refused for a missing or wrong token.",
        snap.cache.purge_refused,
    );
    counter(
        o,
        "corecast_cache_origin_time_microseconds_total",
        "Time spent waiting for the origin, summed over its requests.",
        snap.cache.origin_time_us,
    );
    counter(
        o,
        "corecast_cache_store_skipped_total",
        "Cache store writes skipped over --cache-redis-write-buffer.",
        snap.cache.store_skipped,
    );
    counter(
        o,
        "corecast_token_expirations_total",
        "WebSockets closed with 4001 when their token expired.",
        s.token_expirations,
    );
    counter(
        o,
        "corecast_token_refreshes_total",
        "Connection tokens refreshed in JSON mode.",
        s.token_refreshes,
    );
}

/// Redis mode's link.
fn redis(o: &mut String, r: &RedisStats) {
    gauge(
        o,
        "corecast_redis_connected",
        "1 while the Redis command connection is up.",
        r.connected,
    );
    counter(
        o,
        "corecast_redis_reconnects_total",
        "Redis connections lost and re-established.",
        r.reconnects,
    );
    counter(
        o,
        "corecast_redis_publishes_total",
        "Publishes queued for Redis.",
        r.publishes,
    );
    gauge(
        o,
        "corecast_redis_publishes_buffered",
        "Publishes waiting for Redis.",
        r.publishes_buffered,
    );
    counter(
        o,
        "corecast_redis_publishes_rejected_total",
        "Publishes refused: buffer full.",
        r.publishes_rejected,
    );
    counter(
        o,
        "corecast_redis_messages_received_total",
        "Messages received from Redis.",
        r.messages_received,
    );
    counter(
        o,
        "corecast_redis_messages_dropped_total",
        "Messages from Redis not delivered (too large, invalid UTF-8 text, unknown channel).",
        r.messages_dropped,
    );
    counter(
        o,
        "corecast_redis_protocol_errors_total",
        "Redis connections dropped for what Redis sent (malformed, too deep, too large).",
        r.protocol_errors,
    );
    counter(
        o,
        "corecast_redis_tls_failures_total",
        "rediss:// connections whose TLS handshake failed (certificate refused, not TLS, closed).",
        r.tls_failures,
    );
    cluster::failovers(o, r);
    let _ = writeln!(
        o,
        "# HELP corecast_redis_canary_rtt_seconds Round trip of the last readiness canary.\n\
         # TYPE corecast_redis_canary_rtt_seconds gauge\ncorecast_redis_canary_rtt_seconds {}",
        r.canary_rtt_us as f64 / 1e6
    );
    cluster::render(o, r);
}

/// permessage-deflate: connections, compression work and its yield.
fn compression(o: &mut String, c: &CompressionStats) {
    gauge(
        o,
        "corecast_compression_connections",
        "Open WebSockets that negotiated permessage-deflate.",
        c.connections,
    );
    counter(
        o,
        "corecast_compression_messages_total",
        "Messages compressed (at most once per publish per window size).",
        c.messages,
    );
    counter(
        o,
        "corecast_compression_skipped_total",
        "Messages sent uncompressed to compressed connections (short or incompressible).",
        c.skipped,
    );
    labelled(
        o,
        "corecast_compression_bytes_total",
        "Bytes of compressed messages before (stage=in, payload) and after (stage=out, frame) compression.",
        "counter",
        "stage",
        &[("in", c.bytes_in), ("out", c.bytes_out)],
    );
    let _ = writeln!(
        o,
        "# HELP corecast_compression_seconds_total Time spent compressing messages.\n\
         # TYPE corecast_compression_seconds_total counter\ncorecast_compression_seconds_total {}",
        c.time_us as f64 / 1e6
    );
    counter(
        o,
        "corecast_compression_inflated_messages_total",
        "Compressed messages received from clients.",
        c.inflated_messages,
    );
}

/// Presence: members, announced joins and leaves, expiries, refusals.
fn presence(o: &mut String, p: &crate::stats::PresenceStats) {
    gauge(
        o,
        "corecast_presence_members",
        "Users present in presence channels, summed over channels (this instance's own).",
        p.presence_members,
    );
    let rows = [
        (
            "presence_joins",
            "Joins announced (a user's first connection to a channel).",
            p.presence_joins,
        ),
        (
            "presence_leaves",
            "Leaves announced (a user's last connection gone, or expired).",
            p.presence_leaves,
        ),
        (
            "presence_expired",
            "Members removed because their instance stopped refreshing them (Redis mode).",
            p.presence_expired,
        ),
        (
            "presence_refused",
            "Subscribes refused because the presence channel was full.",
            p.presence_refused,
        ),
        (
            "presence_reads_limited",
            "Presence reads refused over --presence-read-rate (per connection).",
            p.presence_reads_limited,
        ),
    ];
    for (name, help, n) in rows {
        counter(o, &format!("corecast_{name}_total"), help, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_help_and_type() {
        let text = render(
            &Snapshot::default(),
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
