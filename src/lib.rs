//! corecast: a pinned, thread-per-core WebSocket pub/sub gateway.
//!
//! # Layout
//! - [`ws`]: RFC 6455, sans-I/O — frame headers, masking, message assembly
//!   with incremental UTF-8 checks, close codes, the upgrade handshake.
//! - [`http`]: sans-I/O HTTP/1.1 request heads (httparse), routing,
//!   responses.
//! - [`control`]: the JSON control protocol of `GET /ws`.
//! - [`hub`]: the per-worker connection slab, channel registry and zero-copy
//!   fan-out into bounded outbound queues (sans-I/O; wakes writers through
//!   `Waker`s, at most `--fanout-window` at a time: `hub::pacer`).
//! - [`server`]: the network edge — monoio runtime boot and CPU pinning,
//!   accept loop, per-connection reader and writer tasks, vectored writes,
//!   the sweeper for deadlines and keepalive, graceful shutdown.
//! - [`auth`]: publish keys, JWT (HS256) connection tokens, `Origin`
//!   allow-list, token-bucket publish rates (sans-I/O).
//! - [`cache`]: the HTTP response cache in front of `--origin`, sans-I/O —
//!   `Cache-Control` policy, keys, entry encoding, the LRU memory store,
//!   chunked decoding, origin response heads (edge in `server::cache_edge`).
//! - [`config`]: every limit and knob: flags, environment variables, a
//!   TOML file; `--help` and the README table come from one table.
//! - [`redis`]: RESP (redis-protocol), pipelining, URLs, the envelope of
//!   messages on Redis channels (sans-I/O; connections in `server::redis`).
//! - [`stats`], [`log`](mod@log), [`metrics`]: counters, logfmt logging, and the
//!   Prometheus exposition with latency histograms.
//!
//! Protocol modules never import the runtime; only `server` awaits sockets.
//! The load generator `corecast-bench` is its own crate (`bench/`).

pub mod auth;
pub mod cache;
pub mod config;
pub mod control;
pub mod histogram;
pub mod http;
pub mod hub;
pub mod log;
pub mod metrics;
pub mod redis;
pub mod runtime;
pub mod secret;
pub mod server;
pub mod stats;
pub mod ws;

pub use config::Config;
pub use server::Server;
