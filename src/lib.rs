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
//!   `Waker`s).
//! - [`server`]: the network edge — monoio runtime boot and CPU pinning,
//!   accept loop, per-connection reader and writer tasks, vectored writes,
//!   the sweeper for deadlines and keepalive, graceful shutdown.
//! - [`config`]: every limit and knob, flags and environment variables.
//! - [`stats`], [`log`]: counters and logfmt logging.
//!
//! Protocol modules never import the runtime; only `server` awaits sockets.

pub mod config;
pub mod control;
pub mod http;
pub mod hub;
pub mod log;
pub mod redis;
pub mod server;
pub mod stats;
pub mod ws;
