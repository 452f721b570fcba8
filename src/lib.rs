//! corecast: a pinned, thread-per-core WebSocket pub/sub gateway.
//!
//! # Layout
//! - [`ws`]: RFC 6455, sans-I/O — frame headers, masking, message assembly
//!   with incremental UTF-8 checks, close codes, the upgrade handshake.
//! - [`http`]: sans-I/O HTTP/1.1 request heads (httparse), routing,
//!   responses.
//! - [`control`]: the JSON control protocol of `GET /ws`.
//! - [`channel`]: channel-name rules (a leaf: the router, the control
//!   protocol, the configuration and the hub all read them here).
//! - [`hub`]: the per-worker connection table, channel registry and
//!   zero-copy fan-out into bounded outbound queues (sans-I/O; wakes
//!   writers through `Waker`s). `hub/mod.rs` is a facade ([`hub::Hub`]);
//!   behind it, one module per job: `conn` (a connection's entry, kind,
//!   state), `registry` (channels, subscriber lists, the Redis interest
//!   log), `outbox` (queues, slow-consumer policy, worker-wide budget,
//!   batches), `timers` (close reasons, deadlines, the keepalive sweep),
//!   `pacer` (at most `--fanout-window` writers at a time), `format`
//!   (wire-format ids and the encoders the edge supplies) and `limits`
//!   ([`hub::HubLimits`], built by `Config::hub_limits`). The hub imports
//!   neither [`config`] nor [`control`]: wire formats are the edge's
//!   (`server::formats`: path mode, the JSON envelope), so a new protocol
//!   adds an encoder, not a hub edit; a publish encodes at most once per
//!   format in use and shares the frame by reference count.
//! - [`server`]: the network edge — monoio runtime boot and CPU pinning,
//!   accept loop, per-connection reader and writer tasks, vectored writes,
//!   the sweeper for deadlines and keepalive, graceful shutdown.
//! - [`auth`]: publish keys, JWT (HS256) connection tokens, `Origin`
//!   allow-list, token-bucket publish rates (sans-I/O).
//! - [`peers`]: per-client-address connection and handshake-rate limits
//!   with a bounded table (sans-I/O).
//! - [`cache`]: the HTTP response cache in front of `--origin`, sans-I/O —
//!   `Cache-Control` policy, keys, entry encoding, the LRU memory store,
//!   chunked decoding, origin response heads (edge in `server::cache_edge`).
//! - [`config`]: every limit and knob: flags, environment variables, a
//!   TOML file; `--help` and the README table come from one table.
//! - [`redis`]: RESP (redis-protocol), pipelining, URLs, the envelope of
//!   messages on Redis channels (sans-I/O; connections in `server::redis`).
//! - [`stats`], [`log`](mod@log), [`metrics`]: counters, logfmt logging, and the
//!   Prometheus exposition with latency histograms.
//! - [`loadgen`]: the `corecast-bench` load generator (connect, broadcast,
//!   http) and `paper`, which orchestrates Redis, an origin, corecast
//!   instances and those subcommands (as child processes) into the
//!   reference experiment's report.
//!
//! Protocol modules never import the runtime; only `server` (and the load
//! generator's client edge in `loadgen`) await sockets.
//!
//! Who may import whom (no two modules import each other): `ws`,
//! `channel`, `histogram`, `secret` and `log` are leaves; `http` and
//! `control` use `ws` and `channel`; `hub` uses `ws`, `channel`, `stats`
//! and `log` (its submodules use their siblings, never the facade);
//! `config` uses the layers whose settings it builds (`hub::HubLimits`,
//! `ws::Limits`, ...); `server` uses everything above it and is imported
//! only by the binaries and `loadgen`.

pub mod auth;
pub mod cache;
pub mod channel;
pub mod config;
pub mod control;
pub mod histogram;
pub mod http;
pub mod hub;
pub mod loadgen;
pub mod log;
pub mod metrics;
pub mod peers;
pub mod redis;
pub mod secret;
pub mod server;
pub mod stats;
pub mod ws;
