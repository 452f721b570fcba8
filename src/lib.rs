//! corecast: a pinned, thread-per-core WebSocket pub/sub gateway.
//!
//! Most users run the `corecast` binary (`cargo run --release -- --help`).
//! The library embeds the same server in another program: build a
//! [`Config`] (its [`Default`] is the binary's defaults, or parse flags
//! and environment with [`Config::from_args`]), [`Server::start`] it, and
//! [`Server::stop`] + [`Server::join`] it when done. The server runs on
//! its own pinned worker thread; the calling thread is free.
//!
//! ```
//! use std::io::{Read, Write};
//!
//! let mut cfg = corecast::Config::default();
//! cfg.listen = "127.0.0.1:0".parse().unwrap(); // any free port
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
//! `auth`, `cache`, `control`, `http`, `hub` and `redis` are public but
//! hidden from the docs: the fuzz targets (`fuzz/`), the microbenchmarks
//! (`benches/`) and the integration tests (`tests/`) reach into their
//! sans-I/O parts; they are not a stable API.
//!
//! # Layout
//! Imports go down this list; no module imports one above it, and no two
//! files import each other (`scripts/check_imports.py` enforces it).
//! - `server`: the network edge — accept loop, per-connection reader and
//!   writer tasks, vectored writes, the sweeper for deadlines and keepalive,
//!   graceful shutdown; the Redis edge (`server::redis`) and the cache
//!   edge (`server::cache_edge`).
//! - [`runtime`]: monoio runtime boot (io_uring ring or epoll), CPU
//!   pinning, rlimit, signals; used by `server` and by `corecast-bench`.
//! - `hub`: the per-worker connection slab, channel registry and zero-copy
//!   fan-out into bounded outbound queues (sans-I/O; wakes writers through
//!   `Waker`s, at most `--fanout-window` at a time: `hub::pacer`).
//! - [`config`]: every limit and knob: flags, environment variables, a
//!   TOML file; `--help` and the README table come from one table. It
//!   composes the layers' own option structs (below).
//! - `control`: the JSON control protocol of `GET /ws`.
//! - `auth`: publish keys, JWT (HS256) connection tokens, `Origin`
//!   allow-list, token-bucket publish rates (sans-I/O).
//! - `cache`: the HTTP response cache in front of `--origin`, sans-I/O —
//!   `Cache-Control` policy, keys, entry encoding, the LRU memory store,
//!   chunked decoding, origin response heads.
//! - `redis`: RESP (redis-protocol), commands, pipelining, URLs, the
//!   envelope of messages on Redis channels (sans-I/O).
//! - `stats`, `metrics`, `histogram`, [`log`](mod@log): counters per
//!   layer, the Prometheus exposition, latency histograms, logfmt logging.
//! - [`ws`], `http`, `secret`: leaves — RFC 6455 (frame headers, masking,
//!   message assembly with incremental UTF-8 checks, close codes, the
//!   upgrade handshake), HTTP/1.1 request heads and responses, secrets
//!   that never print.
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
pub mod config;
#[doc(hidden)]
pub mod control;
pub(crate) mod histogram;
#[doc(hidden)]
pub mod http;
#[doc(hidden)]
pub mod hub;
pub mod log;
pub(crate) mod metrics;
#[doc(hidden)]
pub mod redis;
pub mod runtime;
pub(crate) mod secret;
pub(crate) mod server;
pub(crate) mod stats;
pub mod ws;

pub use config::Config;
pub use server::Server;
