//! Per-worker counters, served as JSON by `GET /stats`.
//!
//! Plain integers, not atomics: each worker owns its counters and nothing
//! else ever touches them.

use serde::Serialize;

use crate::histogram::Histogram;

/// Counters of one worker. Monotonic unless noted.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Stats {
    /// TCP connections accepted into the table.
    pub connections_opened: u64,
    /// TCP connections removed from the table.
    pub connections_closed: u64,
    /// Connections refused at `max_connections` (answered 503).
    pub connections_rejected: u64,
    /// Successful WebSocket upgrades.
    pub websockets_opened: u64,
    /// WebSockets that ended.
    pub websockets_closed: u64,
    /// Upgrades refused (bad handshake), by any reason.
    pub handshake_failures: u64,
    /// Request heads not completed within `handshake_timeout`.
    pub handshake_timeouts: u64,
    /// WebSockets closed for silence (`idle_timeout`).
    pub idle_timeouts: u64,
    /// Peers that did not answer our close frame in time.
    pub close_timeouts: u64,
    /// WebSockets failed for breaking RFC 6455 (1002/1007/1009 sent).
    pub protocol_errors: u64,
    /// Plain HTTP requests answered.
    pub http_requests: u64,
    /// Current subscriptions (gauge).
    pub subscriptions: u64,
    /// Messages published (WebSocket or HTTP).
    pub messages_in: u64,
    /// Messages queued to a subscriber (one per subscriber per message).
    pub deliveries: u64,
    /// Deliveries that could not be made: dropped by the slow-consumer
    /// policy, or addressed to a connection already closing.
    pub messages_not_delivered: u64,
    /// Bytes received from clients.
    pub bytes_in: u64,
    /// Bytes written to clients.
    pub bytes_out: u64,
    /// Subscribers cut off with close 1008 for exceeding their queue bound.
    pub slow_consumer_disconnects: u64,
    /// Queued messages dropped under the `drop-oldest` policy.
    pub slow_consumer_drops: u64,
    /// Times the worker-wide outbound budget (`--max-total-outbound`) was
    /// reached; the subscriber being queued to is then treated as slow.
    pub outbound_budget_exceeded: u64,
    /// Writer wake-ups that waited for a place in the fan-out window
    /// (`--fanout-window`).
    pub fanout_paced: u64,
    /// Times the fan-out window was full of writes waiting for their
    /// peers (not reading) and was handed to the next writers.
    pub fanout_window_stalls: u64,
    /// Times a publisher was paused by `--publish-rate`.
    pub publish_rate_limited: u64,
    /// Times a publisher was paused because the worker's write backlog was
    /// over `--publish-backpressure` (the server falling behind).
    pub publish_backpressure: u64,
    /// Upgrades refused for a missing/invalid token (401), a channel the
    /// token does not grant or a disallowed Origin (403).
    pub auth_failures: u64,
    /// Vectored writes issued.
    pub writes: u64,
    /// Publish → completed write, per subscriber write (`/metrics` only).
    #[serde(skip)]
    pub fanout_delay: Histogram,
    /// Lateness of the housekeeping timer (`/metrics` only).
    #[serde(skip)]
    pub loop_lag: Histogram,
    /// Redis mode: 1 while the command connection is up (gauge).
    pub redis_connected: u64,
    /// Redis mode: command connections lost and re-established.
    pub redis_reconnects: u64,
    /// Redis mode: publishes queued for Redis.
    pub redis_publishes: u64,
    /// Redis mode: publishes waiting to be written or confirmed (gauge).
    pub redis_publishes_buffered: u64,
    /// Redis mode: publishes refused because the buffer was full.
    pub redis_publishes_rejected: u64,
    /// Redis mode: PUBLISH commands Redis answered with an error.
    pub redis_publish_errors: u64,
    /// Redis mode: messages received from Redis and fanned out.
    pub redis_messages_received: u64,
    /// Redis mode: round trip of the last canary, in microseconds.
    pub redis_canary_rtt_us: u64,
    /// Cache: requests answered from a fresh stored response.
    pub cache_hits: u64,
    /// Cache: requests that fetched from the origin themselves (nothing
    /// usable stored, or the wait for another fetch ran out).
    pub cache_misses: u64,
    /// Cache: stale responses served (stale-while-revalidate or
    /// stale-if-error).
    pub cache_stale_served: u64,
    /// Cache: requests that waited for another request's origin fetch.
    pub cache_coalesced_waiters: u64,
    /// Cache: origin fetches that failed (unreachable, timeout, malformed,
    /// too large) or answered 500/502/503/504.
    pub cache_origin_errors: u64,
    /// Cache: requests sent to the origin (foreground and background).
    pub cache_origin_requests: u64,
    /// Cache: new connections opened to the origin (the rest reused one).
    pub cache_origin_connects: u64,
    /// Cache: bytes of entries written to the store (cumulative).
    pub cache_bytes_stored: u64,
    /// Cache: entries written to the store.
    pub cache_stores: u64,
    /// Cache: store reads/writes that failed or timed out (Redis down,
    /// slow, or its pipeline full); each was treated as a miss / no store.
    pub cache_store_errors: u64,
    /// Cache: bytes held by the in-memory store (gauge).
    pub cache_memory_bytes: u64,
    /// Cache: keys removed by `POST /cache/purge`.
    pub cache_purged: u64,
}
