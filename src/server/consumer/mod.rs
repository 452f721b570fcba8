//! Outbox consumers at the edge (`--consumer`): one thread,
//! `corecast-consumers`, runs every consumer on a current-thread tokio
//! runtime of its own (the PostgreSQL client needs tokio; no worker ever
//! runs it): PostgreSQL outbox tables and Redis streams. It publishes
//! through one worker over a socket pair — the
//! server API's publish, so a row goes where `POST /publish` would
//! (namespace rules, history, Redis, the other workers).
//!
//! # Layout
//! - this file: starting the thread, the handle the workers get.
//! - `counters`: one consumer's counters (atomics: the thread writes,
//!   `/stats` reads).
//! - `postgres`: one consumer's loop — connect, `LISTEN`, claim a batch
//!   (`FOR UPDATE SKIP LOCKED`), publish, dead-letter the poison, delete
//!   what was published, commit; reconnect with backoff.
//! - `stream`: one Redis stream consumer's loop — `XREADGROUP` with a
//!   consumer group, `XACK` once published, `XAUTOCLAIM` of what a dead
//!   consumer left pending, poison to a dead-letter stream.
//! - `ctx`: what the consumers share, and the loop that reconnects one.
//! - `client`: the consumer thread's end of the socket pair (requests
//!   out, replies matched by `seq`).
//! - `serve`: the worker's end (requests published in arrival order,
//!   replies as each publish is confirmed).
//!
//! Imports: `postgres`, `stream` → `ctx` → `client`, `counters`; `serve`
//! stands alone (it runs on the
//! worker); nothing here imports the worker but `serve`.

mod client;
mod counters;
mod ctx;
mod postgres;
pub mod serve;
mod stream;

use std::io;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::consumer::{ConsumerConfig, Kind as ConsumerKind};
use crate::log;
use crate::stats::ConsumerStats;

pub use counters::Counters;

/// What the workers get: the socket pair's worker end (taken by the
/// first worker to start: it serves the consumers) and the counters.
#[derive(Clone)]
pub struct Handle {
    pub socket: Arc<Mutex<Option<StdUnixStream>>>,
    pub counters: Arc<Vec<(String, Arc<Counters>)>>,
}

impl Handle {
    /// Every consumer's counters, by name.
    pub fn stats(&self) -> std::collections::BTreeMap<String, ConsumerStats> {
        self.counters
            .iter()
            .map(|(n, c)| (n.clone(), c.snapshot()))
            .collect()
    }
}

/// Starts the consumers' thread when any are configured; it stops when
/// `stop` is set or the worker's end closes. A bad connection string or
/// CA file is the start's error.
pub fn start(cfg: &Config, stop: Arc<AtomicBool>) -> io::Result<Option<Handle>> {
    if cfg.consumers.is_empty() {
        return Ok(None);
    }
    let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
    let mut jobs = Vec::new();
    let mut counters = Vec::new();
    for c in &cfg.consumers {
        let pg = match c.kind {
            ConsumerKind::Postgres => Some(
                c.dsn
                    .parse::<tokio_postgres::Config>()
                    .map_err(|e| invalid(format!("--consumer {}: {e}", c.redacted())))?,
            ),
            ConsumerKind::RedisStream(_) => None,
        };
        let tls = crate::tls::client::config(c.tls_ca.as_deref())
            .map_err(|e| invalid(format!("--consumer {}: {e}", c.name)))?;
        let n = Arc::new(Counters::default());
        counters.push((c.name.clone(), n.clone()));
        jobs.push((c.clone(), pg, tls, n));
    }
    let (worker_end, ours) = StdUnixStream::pair()?;
    ours.set_nonblocking(true)?;
    worker_end.set_nonblocking(true)?;
    let max_message = cfg.ws.max_message_size;
    std::thread::Builder::new()
        .name("corecast-consumers".into())
        .spawn(move || run(jobs, ours, max_message, stop))?;
    Ok(Some(Handle {
        socket: Arc::new(Mutex::new(Some(worker_end))),
        counters: Arc::new(counters),
    }))
}

type Job = (
    ConsumerConfig,
    Option<tokio_postgres::Config>,
    Arc<rustls::ClientConfig>,
    Arc<Counters>,
);

/// The thread: a current-thread runtime running every consumer until
/// `stop` (or the bridge closing).
fn run(jobs: Vec<Job>, socket: StdUnixStream, max_message: usize, stop: Arc<AtomicBool>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log!(Error, "outbox consumers cannot start", error = e);
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let bridge = match client::Bridge::open(socket, max_message) {
            Ok(b) => b,
            Err(e) => {
                log!(Error, "outbox consumers cannot start", error = e);
                return;
            }
        };
        let mut tasks = Vec::new();
        for (c, pg, tls, n) in jobs {
            let ctx = ctx::Ctx {
                bridge: bridge.clone(),
                counters: n,
                stop: stop.clone(),
                max_message,
            };
            let task = match (&c.kind, pg) {
                (ConsumerKind::RedisStream(src), _) => {
                    let src = src.clone();
                    tokio::task::spawn_local(stream::run(c, src, tls, ctx))
                }
                (ConsumerKind::Postgres, Some(pg)) => {
                    tokio::task::spawn_local(postgres::run(c, pg, tls, ctx))
                }
                (ConsumerKind::Postgres, None) => continue,
            };
            tasks.push(task);
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}
