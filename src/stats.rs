//! Per-worker counters, served as JSON by `GET /stats` and rendered by
//! `/metrics`: one struct per layer, each owned by its layer (the hub and
//! the connections, the Redis link, the HTTP cache), put together in a
//! [`Snapshot`] when they are read.
//!
//! Plain integers, not atomics: each worker owns its counters and nothing
//! else ever touches them.

use serde::{Deserialize, Serialize};

use crate::histogram::Histogram;

/// Counters of one worker. Monotonic unless noted.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
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
    /// Server-Sent Events streams opened (`GET /sse`).
    pub sse_opened: u64,
    /// Server-Sent Events streams that ended.
    pub sse_closed: u64,
    /// Server-Sent Events streams open now (gauge).
    pub sse_connections: u64,
    /// Writes made to parked streams without running them (heartbeats).
    pub parked_writes: u64,
    /// `GET /sse` requests refused (bad query or `Last-Event-ID`, too many
    /// channels, a refused token or channel), answered 4xx.
    pub sse_refused: u64,
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
    /// TLS handshakes completed on `--listen` (with `--tls-cert`).
    pub tls_handshakes: u64,
    /// Of those, resumed ones (a ticket or a cached session).
    pub tls_resumed: u64,
    /// TLS connections that ended before their handshake completed: a
    /// refused or broken handshake (plain HTTP, garbage, TLS 1.0/1.1 only,
    /// no common cipher; the alert sent), the handshake deadline, or the
    /// peer leaving half way.
    pub tls_handshake_failures: u64,
    /// TLS connections closed before their handshake because
    /// `--tls-max-handshakes` were under way.
    pub tls_handshakes_refused: u64,
    /// Established TLS connections ended by a TLS error (a bad or
    /// oversized record, more than 32 key updates without data between
    /// them): rustls's alert sent, then the close.
    pub tls_errors: u64,
    /// TLS connections that sent records after their `close_notify`
    /// (not read; the connection closed).
    pub tls_after_close_notify: u64,
    /// Certificate reloads (SIGHUP) that took effect.
    pub tls_reloads: u64,
    /// Certificate reloads refused (a file missing or bad): the old
    /// certificates stay in use; the log says why.
    pub tls_reload_failures: u64,
    /// Plain HTTP requests answered.
    pub http_requests: u64,
    /// Current subscriptions (gauge).
    pub subscriptions: u64,
    /// Messages published (WebSocket or HTTP).
    pub messages_in: u64,
    /// Messages queued to a subscriber (one per subscriber per message).
    pub deliveries: u64,
    /// Deliveries that could not be made: dropped by the slow-consumer
    /// policy, or addressed to a connection already closing; also a data
    /// frame a peer sends after our close frame (reading stops there).
    pub messages_not_delivered: u64,
    /// Bytes received from clients.
    pub bytes_in: u64,
    /// Bytes written to clients.
    pub bytes_out: u64,
    /// Subscribers cut off with close 1008 for exceeding their queue bound.
    pub slow_consumer_disconnects: u64,
    /// Queued messages dropped under the `drop-oldest` policy.
    pub slow_consumer_drops: u64,
    /// Latest-value messages replaced in a queue by a newer one (unsent).
    pub messages_conflated: u64,
    /// Deliveries sent as a Fossil delta of the subscriber's previous
    /// message (a namespace's `delta = "fossil"`).
    pub delta_deliveries: u64,
    /// Times `--max-total-outbound` was reached (the subscriber: slow).
    pub outbound_budget_exceeded: u64,
    /// Writer wake-ups that waited for a place in the fan-out window
    /// (`--fanout-window`).
    pub fanout_paced: u64,
    /// Times the fan-out window, full of stalled writes, moved on.
    pub fanout_window_stalls: u64,
    /// Times a publisher was paused by `--publish-rate`.
    pub publish_rate_limited: u64,
    /// Times a publisher was paused because the worker's write backlog was
    /// Over `--publish-backpressure` (the server falling behind).
    pub publish_backpressure: u64,
    /// WebSockets parked after `--park-after` of quiet (their tasks freed;
    /// the socket waits in the worker's poller).
    pub parks: u64,
    /// Parked WebSockets run again (input, something to write, a deadline).
    pub unparks: u64,
    /// WebSockets parked now.
    pub parked_connections: u64,
    /// Upgrades refused for a missing/invalid token (401), a channel the
    /// Token does not grant or a disallowed Origin (403).
    pub auth_failures: u64,
    /// Publishes refused on an open WebSocket that may not publish there
    /// (no publish key presented, or a token without the channel): path
    /// mode closes 1008, JSON mode answers `forbidden`.
    pub publish_forbidden: u64,
    /// WebSockets closed with 4001 because their token expired without a
    /// refresh.
    pub token_expirations: u64,
    /// Fetches of the `--token-jwks-url` key set, each attempt.
    pub token_jwks_fetches: u64,
    /// Of those, failed ones (unreachable, timed out, not 200, over the
    /// size or key bound, not a key set, no usable key): the keys held
    /// stay in use.
    pub token_jwks_failures: u64,
    /// Keys taken from the last good key set (gauge).
    pub token_jwks_keys: u64,
    /// Tokens refused (401) for a `kid` no held key has; each may ask for
    /// a refresh, at most one per `--token-jwks-refresh`.
    pub token_jwks_unknown_kid: u64,
    /// Successful `{"op":"refresh"}` token refreshes.
    pub token_refreshes: u64,
    /// Refusal log lines (bad purge tokens, refused upgrades, bad publish
    /// keys) not written because one of their kind was written within the
    /// last 10 s (`log::refused`).
    pub refusal_logs_suppressed: u64,
    /// Connections refused (503) at `--max-connections-per-ip`.
    pub per_ip_connections_rejected: u64,
    /// Upgrades refused (429) over `--handshake-rate-per-ip`.
    pub per_ip_handshakes_limited: u64,
    /// Client addresses tracked by the per-IP limits (gauge).
    pub per_ip_tracked: u64,
    /// Vectored writes issued.
    pub writes: u64,
    /// Connections cut because their writes accepted no byte for
    /// `--write-stall-timeout` (also in `slow_consumer_disconnects`).
    pub write_stall_timeouts: u64,
    /// Bytes queued or being written to clients now (gauge).
    pub outbound_bytes: u64,
    /// The most `outbound_bytes` was right after a fan-out (gauge).
    pub outbound_bytes_peak: u64,
    /// Memory the outbound frames hold now, each shared frame counted
    /// once: what `--max-total-outbound` bounds (gauge).
    pub outbound_memory_bytes: u64,
    /// Input held by readers now (partial WebSocket frames, fragmented
    /// messages being assembled, HTTP request bodies being read): what
    /// `--max-total-inbound` bounds (gauge).
    pub inbound_bytes: u64,
    /// WebSockets closed with 1013 and requests answered 503 because their
    /// input grew while the worker was over `--max-total-inbound`.
    pub inbound_budget_refusals: u64,
    /// Messages held in channel histories (gauge).
    pub history_messages: u64,
    /// Bytes channel histories hold, overhead included; part of the
    /// `--max-total-outbound` budget (gauge).
    pub history_bytes: u64,
    /// Subscribes with `since` that were recovered.
    pub recoveries: u64,
    /// Messages replayed to recovered subscribes.
    pub recovered_messages: u64,
    /// Subscribes with `since` that could not be recovered (epoch
    /// changed, messages trimmed or expired, replay too large).
    pub recoveries_failed: u64,
    /// Messages an instance read back from Redis to close a gap in what
    /// it received (Redis mode).
    pub backfilled_messages: u64,
    /// Gaps that could not be backfilled (JSON subscribers were sent
    /// `{"type":"gap"}`, path-mode subscribers closed).
    pub history_gaps: u64,
    /// Times Redis was found to have lost messages it had acknowledged
    /// (a failover to a replica behind its master): subscribers were sent
    /// a gap notice at the first lost offset (counted in `history_gaps`
    /// too).
    pub history_rollbacks: u64,
    /// Open Pusher protocol connections (gauge).
    pub pusher_connections: u64,
    /// Pusher connections refused in-band: unknown app key (4001),
    /// unsupported protocol (4007), app over capacity (4100).
    pub pusher_connections_refused: u64,
    /// Pusher subscriptions refused (`pusher:subscription_error`): bad
    /// signature, bad `channel_data`, full presence channel, limit.
    pub pusher_subscriptions_refused: u64,
    /// Of those, private/presence subscriptions with a missing or wrong
    /// signature.
    pub pusher_auth_failures: u64,
    /// Of those, subscriptions over `--pusher-occupancy-rate` (429).
    pub pusher_subscriptions_limited: u64,
    /// `pusher:signin`s refused (bad signature or `user_data`; close 4009).
    pub pusher_signin_failures: u64,
    /// Pusher frames answered with `pusher:error` (not understood, client
    /// events not allowed).
    pub pusher_errors: u64,
    /// Client events relayed.
    pub pusher_client_events: u64,
    /// Redis mode: times a channel could not be tracked across instances
    /// (its app at `--pusher-max-channels`).
    pub pusher_channels_untracked: u64,
    /// Client events refused over `--pusher-client-event-rate` (4301).
    pub pusher_client_events_limited: u64,
    /// Pusher HTTP API requests served (any answer).
    pub pusher_api_requests: u64,
    /// Pusher HTTP API requests refused for their signature (401).
    pub pusher_api_unauthorized: u64,
    /// Events published through the Pusher HTTP API (one per channel).
    pub pusher_api_events: u64,
    /// Signed Pusher HTTP API requests refused for their body or path
    /// (400, 404, 413).
    pub pusher_api_bad_requests: u64,
    /// Webhook requests answered with 2xx.
    pub pusher_webhook_requests: u64,
    /// Webhook events delivered (in those requests).
    pub pusher_webhook_events: u64,
    /// Webhook attempts that failed (no answer, or not 2xx); each is
    /// retried with backoff, up to 5 attempts.
    pub pusher_webhook_failures: u64,
    /// Webhook events dropped: their request failed 5 times, or the queue
    /// was over `--pusher-webhook-queue`.
    pub pusher_webhook_dropped: u64,
    /// `--workers` above 1: hops this worker sent to the others (through
    /// a ring or its overflow queue).
    pub worker_hops_out: u64,
    /// Hops this worker took from the others' rings.
    pub worker_hops_in: u64,
    /// Hops that found their ring full and waited in the sender's
    /// overflow queue (delayed, not lost).
    pub worker_ring_full: u64,
    /// Doorbells rung: a receiving worker was asleep.
    pub worker_wakes: u64,
    /// Connections this worker accepted and handed to another.
    pub worker_connections_handed: u64,
    /// Publish → completed write, per subscriber write (`/metrics` only).
    #[serde(skip)]
    pub fanout_delay: Histogram,
    /// Lateness of the housekeeping timer (`/metrics` only).
    #[serde(skip)]
    pub loop_lag: Histogram,
}

/// Counters of a worker's Redis link (owned by it). `/stats` names them
/// with a `redis_` prefix.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RedisStats {
    /// 1 while the command connection is up (gauge).
    #[serde(rename = "redis_connected")]
    pub connected: u64,
    /// Command connections lost and re-established.
    #[serde(rename = "redis_reconnects")]
    pub reconnects: u64,
    /// Publishes queued for Redis.
    #[serde(rename = "redis_publishes")]
    pub publishes: u64,
    /// Publishes waiting to be written or confirmed (gauge).
    #[serde(rename = "redis_publishes_buffered")]
    pub publishes_buffered: u64,
    /// Publishes refused because the buffer was full.
    #[serde(rename = "redis_publishes_rejected")]
    pub publishes_rejected: u64,
    /// PUBLISH commands Redis answered with an error.
    #[serde(rename = "redis_publish_errors")]
    pub publish_errors: u64,
    /// Messages received from Redis and fanned out.
    #[serde(rename = "redis_messages_received")]
    pub messages_received: u64,
    /// Messages from Redis not delivered: over `--max-message-size`, text
    /// that is not UTF-8, or on a channel we do not serve.
    #[serde(rename = "redis_messages_dropped")]
    pub messages_dropped: u64,
    /// Redis connections dropped because of what Redis sent (malformed,
    /// too deep, too large, unexpected).
    #[serde(rename = "redis_protocol_errors")]
    pub protocol_errors: u64,
    /// `rediss://` connections whose TLS handshake failed (certificate
    /// refused, not TLS, closed mid-handshake).
    #[serde(rename = "redis_tls_failures")]
    pub tls_failures: u64,
    /// Round trip of the last canary, in microseconds.
    #[serde(rename = "redis_canary_rtt_us")]
    pub canary_rtt_us: u64,
    /// Failovers followed: the link re-pointed to a new master (a replica
    /// a Sentinel or the cluster promoted). Per link: each worker counts
    /// its own.
    #[serde(rename = "redis_failovers")]
    pub failovers: u64,
    /// Redis Sentinel: reads of the master's address that no Sentinel
    /// answered usefully (all down, unknown master name, refused AUTH).
    #[serde(rename = "redis_sentinel_errors")]
    pub sentinel_errors: u64,
    /// Redis Cluster: commands a node redirected (`MOVED`/`ASK`).
    #[serde(rename = "redis_redirects")]
    pub redirects: u64,
    /// Redis Cluster: topology reads (`CLUSTER SLOTS`) that succeeded.
    #[serde(rename = "redis_topology_refreshes")]
    pub topology_refreshes: u64,
    /// Redis Cluster: topology reads that found no usable node (retried
    /// with backoff, 100 ms doubling to 5 s).
    #[serde(rename = "redis_topology_errors")]
    pub topology_errors: u64,
    /// Redis Cluster: one entry per shard (master), empty with one Redis.
    #[serde(rename = "redis_shards", skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardStats>,
}

/// Counters of one Redis Cluster shard (a master and the connections to it).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ShardStats {
    /// `host:port` of the master.
    pub addr: String,
    /// 1 while both connections are up and subscriptions restored (gauge).
    pub connected: u64,
    /// Slots the master owns in our slot map (gauge).
    pub slots: u64,
    /// Channels subscribed on it (gauge).
    pub subscriptions: u64,
    /// Publishes queued for it.
    pub publishes: u64,
    /// Commands it answered with `MOVED` or `ASK`.
    pub moved: u64,
    /// Channels it dropped (`sunsubscribe` pushed: their slot moved) and
    /// that were subscribed again on the new owner.
    pub resubscribes: u64,
    /// Connections to it lost and re-established.
    pub reconnects: u64,
}

/// Counters of a worker's HTTP cache (owned by it). `/stats` names them
/// with a `cache_` prefix.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct CacheStats {
    /// Requests answered from a fresh stored response.
    #[serde(rename = "cache_hits")]
    pub hits: u64,
    /// Requests that fetched from the origin themselves (nothing
    /// Usable stored, or the wait for another fetch ran out).
    #[serde(rename = "cache_misses")]
    pub misses: u64,
    /// Stale responses served (stale-while-revalidate or
    /// Stale-if-error).
    #[serde(rename = "cache_stale_served")]
    pub stale_served: u64,
    /// Requests that waited for another request's origin fetch.
    #[serde(rename = "cache_coalesced_waiters")]
    pub coalesced_waiters: u64,
    /// Origin fetches that failed (unreachable, timeout, malformed,
    /// Too large) or answered 500/502/503/504.
    #[serde(rename = "cache_origin_errors")]
    pub origin_errors: u64,
    /// Requests sent to the origin (foreground and background).
    #[serde(rename = "cache_origin_requests")]
    pub origin_requests: u64,
    /// Time spent waiting for the origin, summed over its requests, in
    /// microseconds (the mean origin latency is its rate over
    /// `origin_requests`' rate).
    #[serde(rename = "cache_origin_time_us")]
    pub origin_time_us: u64,
    /// New connections opened to the origin (the rest reused one).
    #[serde(rename = "cache_origin_connects")]
    pub origin_connects: u64,
    /// `https://` origin connections whose TLS handshake failed
    /// (certificate refused, not TLS, timed out).
    #[serde(rename = "cache_origin_tls_failures")]
    pub origin_tls_failures: u64,
    /// Bytes of entries written to the store (cumulative).
    #[serde(rename = "cache_bytes_stored")]
    pub bytes_stored: u64,
    /// Entries written to the store.
    #[serde(rename = "cache_stores")]
    pub stores: u64,
    /// Store reads/writes that failed or timed out (Redis down,
    /// Slow, or its pipeline full); each was treated as a miss / no store.
    #[serde(rename = "cache_store_errors")]
    pub store_errors: u64,
    /// Store writes skipped because cache writes already held
    /// `--cache-redis-write-buffer` bytes (the response was still served).
    #[serde(rename = "cache_store_skipped")]
    pub store_skipped: u64,
    /// Bytes held by the in-memory store (gauge).
    #[serde(rename = "cache_memory_bytes")]
    pub memory_bytes: u64,
    /// Keys removed by `POST /cache/purge`.
    #[serde(rename = "cache_purged")]
    pub purged: u64,
    /// `POST /cache/purge` refused for a missing or wrong token.
    #[serde(rename = "cache_purge_refused")]
    pub purge_refused: u64,
    /// Personal requests (`--cache-bypass-headers`) sent past the cache.
    #[serde(rename = "cache_bypassed")]
    pub bypassed: u64,
}

/// permessage-deflate counters (RFC 7692), owned by the compressed wire
/// formats' encoders (`server::formats`) and the WebSocket edge. `/stats`
/// names them with a `compression_` prefix.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct CompressionStats {
    /// Open WebSockets that negotiated permessage-deflate (gauge).
    #[serde(rename = "compression_connections")]
    pub connections: u64,
    /// Messages compressed: at most one per publish per parameter set,
    /// whatever the number of compressed subscribers.
    #[serde(rename = "compression_messages")]
    pub messages: u64,
    /// Payload bytes of the compressed messages, before compression.
    #[serde(rename = "compression_bytes_in")]
    pub bytes_in: u64,
    /// Their frames' bytes after compression (header included).
    #[serde(rename = "compression_bytes_out")]
    pub bytes_out: u64,
    /// Time spent compressing, in microseconds.
    #[serde(rename = "compression_time_us")]
    pub time_us: u64,
    /// Messages sent uncompressed to compressed connections: below
    /// `--compression-min-size`, or not smaller compressed (one per
    /// publish per parameter set).
    #[serde(rename = "compression_skipped")]
    pub skipped: u64,
    /// Compressed messages received from clients (and inflated).
    #[serde(rename = "compression_inflated_messages")]
    pub inflated_messages: u64,
}

/// One Pusher app's counters (`/stats` `pusher_apps`, by app id).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct PusherAppStats {
    /// Open connections (gauge).
    pub connections: u64,
    /// Client events relayed.
    pub client_events: u64,
    /// HTTP API requests that passed the signature check.
    pub api_requests: u64,
    /// Events published through the HTTP API (one per channel).
    pub api_events: u64,
}

/// Counters of the presence layer (`/stats`, `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PresenceStats {
    /// Members (users) present, summed over channels (this instance's view
    /// in embedded mode; its local users in Redis mode).
    pub presence_members: u64,
    /// Joins announced (user transitions 0 → 1).
    pub presence_joins: u64,
    /// Leaves announced (user transitions 1 → 0), expiries included.
    pub presence_leaves: u64,
    /// Members removed because their instance stopped refreshing them.
    pub presence_expired: u64,
    /// Presence subscriptions refused (channel full).
    pub presence_refused: u64,
    /// Presence reads refused for `--presence-read-rate`.
    pub presence_reads_limited: u64,
}

impl Stats {
    /// Counts an upgraded connection: a WebSocket, or a Server-Sent
    /// Events stream (`sse`).
    pub fn count_opened(&mut self, sse: bool) {
        let n = if sse {
            &mut self.sse_opened
        } else {
            &mut self.websockets_opened
        };
        *n += 1;
    }

    /// Counts the end of an upgraded connection (see `count_opened`).
    pub fn count_closed(&mut self, sse: bool) {
        let n = if sse {
            &mut self.sse_closed
        } else {
            &mut self.websockets_closed
        };
        *n += 1;
    }
}

/// One outbox consumer's counters (`/stats` `consumers`, `/metrics`
/// label `consumer`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsumerStats {
    /// Rows published (the publish confirmed) and deleted.
    pub published: u64,
    /// Poison rows moved to the dead-letter table.
    pub dead_lettered: u64,
    /// Rows left for a later claim: their publish was not confirmed
    /// (Redis unreachable, the server overloaded, no answer in time).
    pub retried: u64,
    /// Connections lost or refused, statements that failed.
    pub errors: u64,
    /// Batches claimed (rows or none).
    pub claims: u64,
    /// 1 while connected with both tables found (gauge).
    pub connected: u64,
}

/// One channel namespace's counters (`/stats` `namespaces`, `/metrics`
/// label `namespace`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamespaceStats {
    /// Messages published on its channels (by clients or `POST /publish`)
    /// that its rules let through.
    pub publishes: u64,
    /// Messages queued to subscribers of its channels.
    pub deliveries: u64,
    /// Subscribes, reads and publishes its rules refused.
    pub refused: u64,
    /// Subscriptions to its channels (gauge; a connection in two of its
    /// channels counts twice).
    pub subscriptions: u64,
    /// Connections subscribed to at least one of its channels (gauge; a
    /// connection in two of its channels counts once).
    pub connections: u64,
    /// Its channels with subscribers (gauge).
    pub channels: u64,
}

/// Every layer's counters at one moment, for `/stats` and `/metrics`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshot {
    /// Connections, fan-out and the HTTP edge.
    #[serde(flatten)]
    pub worker: Stats,
    /// Redis mode's counters (zero without Redis).
    #[serde(flatten)]
    pub redis: RedisStats,
    /// The HTTP cache's counters (zero without an origin).
    #[serde(flatten)]
    pub cache: CacheStats,
    /// permessage-deflate's counters.
    #[serde(flatten)]
    pub compression: CompressionStats,
    /// Presence's counters (`presence_*`).
    #[serde(flatten)]
    pub presence: PresenceStats,
    /// Connections in the table (gauge).
    pub connections: u64,
    /// Channels with subscribers (gauge).
    pub channels: u64,
    /// Same as `deliveries` (the name `/stats` has always had).
    pub messages_out: u64,
    /// Per Pusher app, by app id.
    pub pusher_apps: std::collections::BTreeMap<String, PusherAppStats>,
    /// Per channel namespace, by name (`default` for channels without
    /// `:`); absent without namespaces.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub namespaces: std::collections::BTreeMap<String, NamespaceStats>,
    /// Outbox consumers by name (the worker that serves them reports
    /// them); absent without consumers.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub consumers: std::collections::BTreeMap<String, ConsumerStats>,
    /// Requests refused for naming a namespace that is not configured;
    /// absent without namespaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace_unknown_channel: Option<u64>,
    /// The hooks that are on and their counters (`/stats` writes them as
    /// `proxy`, with each one's p99; `/metrics` as `corecast_proxy_*`).
    #[serde(skip)]
    pub proxy: Vec<(crate::hooks::HookKind, crate::hooks::stats::HookStats)>,
    /// Connections opened to the hooks' backends.
    #[serde(skip)]
    pub proxy_backend_connections_opened: u64,
}

/// The totals of several workers' snapshots: counters and gauges added,
/// peaks (`*_peak`) the largest, histograms merged; in Redis mode (each
/// worker an instance with its own connections) `redis_connected` is 1
/// only while every worker's link is, and `redis_shards` has one row per
/// master any worker knows, its counters added, `connected` only while
/// every worker that knows it is, `slots` the most any worker places.
pub fn merge(parts: &[Snapshot]) -> Snapshot {
    let mut total = serde_json::Value::Null;
    for part in parts {
        let v = serde_json::to_value(part).expect("stats serialize");
        add_json(&mut total, v, "");
    }
    let mut out: Snapshot = serde_json::from_value(total).expect("merged stats read back");
    for part in parts {
        out.worker.fanout_delay.add(&part.worker.fanout_delay);
        out.worker.loop_lag.add(&part.worker.loop_lag);
    }
    out.redis.connected = parts.iter().map(|p| p.redis.connected).min().unwrap_or(0);
    out.proxy = parts.first().map(|p| p.proxy.clone()).unwrap_or_default();
    for (k, t) in &mut out.proxy {
        *t = Default::default();
        for (_, s) in parts.iter().flat_map(|p| &p.proxy).filter(|(j, _)| j == k) {
            t.add(s);
        }
    }
    out.proxy_backend_connections_opened = parts
        .iter()
        .map(|p| p.proxy_backend_connections_opened)
        .sum();
    out.redis.shards = merge_shards(parts.iter().flat_map(|p| &p.redis.shards));
    out
}

fn merge_shards<'a>(rows: impl Iterator<Item = &'a ShardStats>) -> Vec<ShardStats> {
    let mut out: Vec<ShardStats> = Vec::new();
    for r in rows {
        let Some(t) = out.iter_mut().find(|t| t.addr == r.addr) else {
            out.push(r.clone());
            continue;
        };
        t.connected = t.connected.min(r.connected);
        t.slots = t.slots.max(r.slots);
        t.subscriptions += r.subscriptions;
        t.publishes += r.publishes;
        t.moved += r.moved;
        t.resubscribes += r.resubscribes;
        t.reconnects += r.reconnects;
    }
    out
}

fn add_json(total: &mut serde_json::Value, v: serde_json::Value, key: &str) {
    use serde_json::Value;
    match (total, v) {
        (t @ Value::Null, v) => *t = v,
        (Value::Number(t), Value::Number(v)) => {
            let (a, b) = (t.as_u64().unwrap_or(0), v.as_u64().unwrap_or(0));
            let sum = match key.ends_with("_peak") {
                true => a.max(b),
                false => a.saturating_add(b),
            };
            *t = sum.into();
        }
        (Value::Object(t), Value::Object(v)) => {
            for (k, x) in v {
                add_json(t.entry(k.clone()).or_insert(Value::Null), x, &k);
            }
        }
        // Arrays, strings, switches: the first worker's.
        _ => {}
    }
}

#[cfg(test)]
mod merge_tests;
