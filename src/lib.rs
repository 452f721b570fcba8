//! corecast: a pinned, thread-per-core WebSocket pub/sub gateway.
//!
//! Most users run the `corecast` binary (`cargo run --release -- --help`).
//! The library embeds the same server in another program: build a
//! [`Config`] (its [`Default`] is the binary's defaults, or parse flags
//! and environment with [`Config::from_args`]), [`Server::start`] it, and
//! [`Server::stop`] + [`Server::join`] it when done. The server runs on
//! its own pinned worker threads (`--workers`, one by default); the
//! calling thread is free.
//!
//! ```
//! use std::io::{Read, Write};
//!
//! let cfg = corecast::Config {
//!     listen: "127.0.0.1:0".parse().unwrap(), // any free port
//!     ..Default::default()
//! };
//! let server = corecast::Server::start(cfg)?;
//! let addr = server.local_addr();
//!
//! let mut s = std::net::TcpStream::connect(addr)?;
//! s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
//! let mut answer = String::new();
//! s.read_to_string(&mut answer)?;
//! assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
//!
//! server.stop(); // graceful: close 1001 to every WebSocket, then exit
//! server.join()?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # Public API
//! - [`Server`] and [`Config`] (with [`config`]: the per-layer option
//!   structs and the options table behind `--help`).
//! - [`runtime`]: ring builder, driver detection, CPU pinning, the
//!   descriptor limit and SIGTERM/SIGINT — what a program that embeds the
//!   server (or the load generator) sets up before the runtime exists.
//! - [`ws`]: the sans-I/O RFC 6455 codec (also the load generator's).
//! - [`log`](mod@log): the logfmt logger's level and output.
//!
//! `auth`, `cache`, `console`, `control`, `http`, `hub`, `redis`, `sse` and `tls` are public but
//! hidden from the docs: the fuzz targets (`fuzz/`), the microbenchmarks
//! (`benches/`) and the integration tests (`tests/`) reach into their
//! sans-I/O parts; they are not a stable API.
//!
//! # Layout
//! Top to bottom; a module imports only modules below it (→ lists what it
//! may import), no two files import each other, and
//! `scripts/check_imports.py` (in `scripts/test.sh`) fails on any loop.
//! - `server` → everything below: the network edge, one folder per
//!   feature — `conn` (accept, HTTP, upgrade, the WebSocket's task,
//!   reader, writer and its byte transport, parking), `native` (path mode
//!   and the JSON control protocol), `pusher`, `presence`, `history`,
//!   `redis` (one shard per Redis server, one per master of a Redis
//!   Cluster behind a slot map), `cache` — meeting through a few seams
//!   (`worker`, `publish`, `formats`, ...); the sweeper for deadlines and
//!   keepalive, graceful shutdown. Its own Layout section draws who may
//!   import whom; `scripts/check_imports.py` holds the folders to it.
//! - [`config`] → `auth`, `cache`, `console`, `consumer`, `hooks`, `http`, `hub`, `namespace`, `presence`, `pusher`, `redis`, `ring`, `tls`, [`ws`],
//!   `secret`, [`log`](mod@log): every limit and knob: flags, environment
//!   variables, a TOML file; `--help` and the book's options table come from one
//!   table. It composes the layers' own option structs.
//! - `consumer` → `channel`, `filter`: outbox consumers, sans-I/O — a
//!   consumer's `postgres://` URL (table, batch, polling, `LISTEN`
//!   channel), the checks a row passes or the reason it is poison, the
//!   requests and replies a consumer thread and its worker exchange, the
//!   SQL. Its edge is `server::consumer`.
//! - `namespace` → `auth`, `history`, `http`: channel namespaces
//!   (`chat:room-1` is in `chat`), sans-I/O — the compact `--namespace`
//!   form and TOML tables as written (`spec`), the resolved table, and
//!   the subscribe/publish checks every edge makes (unknown namespace,
//!   `publish`, `subscribe`, anonymous connections, user channels).
//! - `auth` → `http`, `secret`: publish keys, JWT connection tokens (HS256,
//!   RS/ES with public keys; JWKS sets read and their refresh schedule),
//!   `Origin` allow-list, token-bucket publish rates (sans-I/O).
//! - `cache` → `http`, `secret`: the HTTP response cache in front of
//!   `--origin`, sans-I/O — `Cache-Control` policy, keys, entry encoding,
//!   the LRU memory store, chunked decoding, origin response heads.
//! - `pusher` → `auth`, `cache` (origin URLs), `secret`, `stats`: the
//!   Pusher Channels protocol (v7), sans-I/O — apps, client/server frames,
//!   channel and HTTP API signatures, presence texts (members:
//!   `presence`), the events API's bodies, webhook events, queues and
//!   signed requests; its channels
//!   live in the hub as `pusher/{app id}/{name}` (outside the native
//!   charset) and its frames are the `server::formats::PUSHER` format.
//! - `presence` → `auth`, `channel`, `stats`: who is in a presence
//!   channel (`--presence-channels`), counted per user — a user's second
//!   connection does not join again, its last one leaving is the one
//!   leave — with its bounds, and the JSON texts of `join`, `leave` and
//!   the `presence` answer (sans-I/O). Its edge is `server::presence`
//!   (`edge`: the JSON protocol's presence; `redis`: the refresh/prune
//!   loop around `redis::presence`'s scripts).
//! - `tls` (leaf; rustls on ring): the listener's TLS, sans-I/O — the
//!   `--tls-cert`/`--tls-key` files read and checked, the certificate
//!   chosen by SNI, the rustls server configuration with its session
//!   cache and ticket keys (kept across SIGHUP reloads), errors as one
//!   enum; and `tls::client`, the one verifying client configuration for
//!   `rediss://`. Its edge is `server::tls`.
//! - `hooks` → `auth`, `cache` (origin URLs), `channel`, `http`,
//!   `histogram`, `namespace` (names), [`ws`]: hooks to the application's
//!   backend (`--proxy-*`, named `--proxy`), sans-I/O — Centrifugo's HTTP
//!   proxy requests and answers, the JSON frames they add, per-hook
//!   counters, the server API's commands and cluster listing. Its edge is
//!   `server::hooks`.
//! - `console` → `auth`, `histogram`, [`ws`]: the operator console,
//!   sans-I/O — the admin key's check, session tokens and cookie, the
//!   login form and its per-address limit (`session`), the feed's
//!   snapshot parts: top channels, instances, rates, the 15-minute series
//!   (`snapshot`), and `corecast top`'s requests and text view (`top`).
//!   Its edge is `server::console`.
//! - `ring` (leaf): the bounded single-producer, single-consumer ring
//!   between two threads (the cross-worker transport's building block):
//!   a push that never blocks (a full ring gives the value back), batched
//!   drains, and the park/wake handshake that tells a producer when its
//!   consumer sleeps (sans-I/O: the wake-up itself is the edge's).
//! - `waits` (leaf): a worker's requests waiting for another worker's
//!   answer (a channel's owner), bounded, each with its waker (sans-I/O).
//! - `delta` (leaf): Fossil deltas, written and read (a channel's
//!   publications sent as the difference from the previous one).
//! - `filter` (leaf): publication tags and Centrifugo-shaped tag filters,
//!   bounded, evaluated without allocating (sans-I/O).
//! - `meta` → `filter`: what a publication carries besides its bytes (its
//!   tags, latest-value key, delta wish and idempotency key), and its
//!   Redis wire form (sans-I/O).
//! - `peers` → `http`: per-client-address connection and handshake-rate
//!   limits with a bounded table (sans-I/O).
//! - `http` → [`ws`], `channel`: HTTP/1.1 request heads (httparse),
//!   routing, responses.
//! - `hub` → `history`, `stats`, [`ws`], `channel`, [`log`](mod@log): the per-worker
//!   connection table, channel registry and zero-copy fan-out into bounded
//!   outbound queues (sans-I/O; wakes writers through `Waker`s).
//!   `hub/mod.rs` is a facade (`hub::Hub`); behind it, one module per
//!   job: `conn` (a connection's entry, kind, state), `registry`
//!   (channels, subscriber lists, the Redis interest log), `outbox`
//!   (queues, slow-consumer policy, worker-wide budget, batches), `publish`
//!   (a publish's fan-out; the frames an owner worker encoded reused by
//!   the others), `upstream` (the interest log an upstream — Redis, or
//!   the channels' owner workers — follows, and messages sequenced
//!   there), `timers`
//!   (close reasons, deadlines, token expiry, the keepalive sweep), `pacer`
//!   (at most `--fanout-window` writers at a time), `format` (wire-format
//!   ids and the encoders the edge supplies) and `limits` (`HubLimits`,
//!   built by `Config::hub_limits`). The hub imports neither `config` nor
//!   `control`: wire formats are the edge's (`server::formats`: path mode,
//!   the JSON envelope, and their permessage-deflate variants), so a new
//!   protocol adds an encoder, not a hub edit; a publish encodes (and
//!   compresses) at most once per format in use and shares the frame by
//!   reference count. Its submodules use their siblings,
//!   never the facade.
//! - `history` → [`ws`]: per-channel message history (offsets, epochs,
//!   bounded rings, recovery and gap detection), sans-I/O; the hub holds
//!   one for embedded mode and as Redis mode's cache of recent messages.
//! - `metrics` → `stats` → `histogram`: counters per layer in one
//!   snapshot, the Prometheus exposition, latency histograms.
//! - `sse` → `channel`, `http`: Server-Sent Events (`GET /sse`), sans-I/O — the
//!   request's channels and positions (`Last-Event-ID`, `since`), events
//!   as HTTP chunks, their `{channel}:{epoch}:{offset}` ids; its edge is
//!   `server::sse`, its deliveries the `server::formats::SSE` format.
//! - `control`, `redis` → `history`, `presence`, [`ws`]: the JSON control
//!   protocol of `GET /ws`; RESP (redis-protocol), commands, URLs, the
//!   envelope of messages on Redis channels, the history, presence and
//!   Pusher channel occupancy scripts, Redis Cluster placement (slots,
//!   slot maps, redirects) (sans-I/O).
//! - Leaves: [`ws`] (RFC 6455 — frame headers, masking, message assembly
//!   with incremental UTF-8 checks, close codes, the upgrade handshake;
//!   RFC 7692 permessage-deflate — negotiation, shared compressed frames,
//!   inflation bounded by the message limit),
//!   `channel` (channel-name rules), `secret` (secrets that never print),
//!   [`log`](mod@log) (logfmt),
//!   [`runtime`] (ring, pinning, rlimit, signals; used by `server` and
//!   by `corecast-bench`).
//!
//! Protocol modules never import monoio; only `server` and [`runtime`]
//! do. The load generator `corecast-bench` is its own crate (`bench/` in
//! the workspace) and uses only this public API.

#![warn(missing_docs)]

// Hidden but public: reached by fuzz/, benches/ and tests/ (see above).
#[doc(hidden)]
pub mod auth;
#[doc(hidden)]
pub mod cache;
#[doc(hidden)]
pub mod channel;
pub mod config;
#[doc(hidden)]
pub mod console;
#[doc(hidden)]
pub mod consumer;
#[doc(hidden)]
pub mod control;
#[doc(hidden)]
pub mod delta;
#[doc(hidden)]
pub mod filter;
#[cfg(test)]
mod generated;
pub(crate) mod histogram;
#[doc(hidden)]
pub mod history;
#[doc(hidden)]
pub mod hooks;
#[doc(hidden)]
pub mod http;
#[doc(hidden)]
pub mod hub;
pub mod log;
pub mod meta;
pub(crate) mod metrics;

/// Every series `/metrics` can show, as the book's metrics table
/// (`examples/print_metrics_table.rs` prints it for docs/src/metrics.md).
#[doc(hidden)]
pub fn metrics_markdown_table() -> String {
    metrics::catalogue::markdown_table()
}
#[doc(hidden)]
pub mod namespace;
#[doc(hidden)]
pub mod peers;
#[doc(hidden)]
pub mod presence;
#[doc(hidden)]
pub mod pusher;
#[doc(hidden)]
pub mod redis;
#[doc(hidden)]
pub mod ring;
pub mod runtime;
pub(crate) mod secret;
pub(crate) mod server;
#[doc(hidden)]
pub mod sse;
pub(crate) mod stats;
#[doc(hidden)]
pub mod tls;
#[doc(hidden)]
pub mod waits;
pub mod ws;

pub use config::Config;
pub use server::Server;

/// The edge's wire-format encoders (path mode, the JSON envelope), for
/// the fan-out microbenchmark (`benches/fanout.rs`); not a stable API.
#[doc(hidden)]
pub use server::formats;
