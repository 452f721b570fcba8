//! The network edge: boot the pinned workers, accept, sweep, shut down.
//!
//! Each worker thread (`--workers`, one by default), pinned with
//! `bind_to_cpu_set` before its runtime is built, runs monoio on io_uring
//! (or epoll where io_uring is unavailable or `--legacy-driver` is set).
//! Everything a worker owns — the hub, its connections, its scratch
//! buffer — is `!Send` and lives inside it; nothing on the delivery path
//! is shared between workers.
//!
//! # Several workers
//! - The first worker owns the listeners and hands each accepted
//!   connection to the least loaded worker (fewest open connections,
//!   ties in turn), itself included, over the mesh: one acceptor rather
//!   than `SO_REUSEPORT`, because the kernel's reuseport hash spreads
//!   connections evenly whatever each worker's load, and because tests
//!   and operators can tell where a connection went.
//! - Each channel has one owner (`mesh::owner`, a hash of its name). A
//!   publish on any worker goes to the owner, which fans it out to its
//!   own subscribers and once to each other worker with subscribers (the
//!   hub's interest log tells the owners, and a subscribe is acknowledged
//!   once its owner knows): one sequencer per channel, so every
//!   subscriber sees one order. A slow owner delays its own channels'
//!   messages; the other workers' channels do not wait for it.
//! - Without Redis the owner also holds what must be single: a channel's
//!   history ring, whose messages (with their offsets) it sends to every
//!   worker for a local copy (`history::owner`), and its presence members
//!   (`presence::owner`). A subscribe that needs the owner's answer (no
//!   copy yet, a presence join) waits for it, bounded (`crate::waits`).
//! - The rings never block a sender: a full ring's hops wait, in order,
//!   in the sender's overflow queue, which counts toward
//!   `--publish-backpressure` (publishers are slowed; nothing accepted is
//!   dropped).
//! - `/stats` and `/metrics` gather every worker's counters (a worker
//!   that does not answer within a second is left out and counted).
//! - A panic in any worker aborts the process (no silent half-server).
//!
//! # Layout
//! By feature: each folder is the edge of one feature, named after it, and
//! the files at this level are the boot and the seams the folders meet
//! through.
//! - `mod.rs` boots the workers (pinning, driver, sweeper, pacer
//!   watchdog, shutdown) and starts each feature's tasks; `fleet` is a
//!   worker's side of the mesh (draining its rings, sending its interest
//!   to channels' owners — not in Redis mode, where each worker is an
//!   instance with its own Redis link and messages cross workers through
//!   Redis; the mesh then carries only connections, counts and stats);
//!   `shared` is what a process's workers share behind a lock or an
//!   atomic no delivery takes (console sessions, the key set, the
//!   per-address table, the count of open connections); `heard` is what
//!   a worker hears besides its clients (Redis mode's `!` channels and
//!   the Redis link's view of the worker, other workers' console rows).
//! - Seams, which any folder may import: `admission` (the one admission
//!   of a (connection identity, channel) pair, on every way in),
//!   `worker` (what the worker's
//!   tasks share: hub, config, Redis link, cache, parking, scratch
//!   buffer), `mesh` (the rings between workers, what crosses them
//!   (`mesh/hop.rs`), the channels' owners), `publish` (the one publish path — in-process,
//!   through a channel's owner worker, or through Redis — and
//!   `POST /publish`), `endpoints` (`/healthz`, `/readyz`,
//!   `/stats`, `/metrics`, status), `formats` (the wire formats — path
//!   mode, the JSON envelope, Pusher — as the encoders the hub is built
//!   with), `resolve` (host names resolved off the worker thread), `sys`
//!   (the few raw syscalls), `iovec` (the owning iovec list for vectored
//!   writes, clients' and Redis's), and `redis/mod.rs` (the Redis link's
//!   face); `status.html` is the page served at `/status`.
//! - `conn/`: a connection's life — `accept`, `http` (head → route →
//!   dispatch), `upgrade` (auth, `101`, the wire format), `sock` (the
//!   split socket and how the worker reads it), `park` (parked
//!   connections: fds in the worker's epoll set, their wakers) and
//!   `websocket/` (task, reader, frames, writer, close, parked, and the
//!   `transport` seam; its own Layout says what a new transport
//!   implements).
//! - `native/`: corecast's own protocol, the session of a WebSocket that
//!   is not Pusher's — path-mode publishes and the JSON control protocol
//!   (`control`).
//! - `pusher/`: Pusher Channels — `ws` (a connection's session), `api`
//!   (the signed HTTP API), `presence` (`presence-*` channels),
//!   `occupancy` (occupied channels, `channel_occupied`/`vacated`, across
//!   instances in Redis mode), `webhook` (each app's queue and sender).
//! - `presence/`: `edge` (the JSON protocol's presence: members on
//!   subscribe, events, `{"op":"presence"}`, `GET /presence`) and `redis`
//!   (Redis mode: the scripts' commands, the refresh/prune loop), which
//!   Pusher presence shares.
//! - `history/`: `recall` (a JSON subscribe's reply and replay,
//!   `GET /history`), `resume` (a subscribe in Redis mode with history:
//!   read, then subscribe + replay in one step; `/history` from Redis),
//!   `relay` (Redis mode's deliveries in offset order and gap notices),
//!   `owner` (several workers without Redis: the owner's ring, a copy on
//!   every worker, a position asked of the owner when a worker has none).
//! - `redis/`: Redis mode's connections around a shard; it sees the
//!   worker only through the narrow `redis::Local` handle. Its `backfill`
//!   (reads of a channel's stream) stays here, not in `history/`: the
//!   subscriber connection itself starts it to close a gap.
//! - `cache/`: the HTTP cache's origin client, stores and coalescing; it
//!   gets a deadline-renewal callback, never the worker.
//!
//! Who may import whom: `mod.rs` and the seams may import any folder; a
//! folder imports the seams and, of its siblings, only what
//! `scripts/check_imports.py` lists as an exception, each with its reason:
//! ```text
//!              mod.rs (boot)
//!                  │
//!                conn ── http ──→ cache, history, presence, pusher::api, console
//!                  │  └─ websocket ──→ native, pusher::ws   (sessions)
//!                  ▼
//!   native ──→ history, presence        history::resume ──→ presence::edge
//!   console::actions ──→ history, presence::edge, hooks::api
//!   pusher::presence ──→ presence::redis ──→ pusher::occupancy
//!   pusher::webhook ──→ cache::origin
//!                  │
//!                  ▼  every folder
//!   worker, publish, endpoints, formats, redis/mod.rs → resolve, sys, iovec
//! ```
//! - `auth/`: `jwks` (`--token-jwks-url`: the identity provider's key set
//!   fetched, cached and refreshed by a task of its own; the worker checks
//!   tokens against the keys it holds), through `cache::origin`'s client.
//! - `tls/`: the listener's TLS (`--tls-cert`) — the configuration new
//!   handshakes get and its reload on SIGHUP (`edge`), a connection's
//!   rustls session (`session`): a byte transport under the HTTP phase
//!   (`conn::stream`) and under `conn/websocket/transport`'s calls.
//! - `hooks/`: calls to the application's backend (`--proxy-*`) through
//!   the cache's origin client — `connect` (at the upgrade, before the
//!   `101`; `conn::upgrade` calls it), `session` (a hook-admitted
//!   connection's welcome and server-side subscriptions; the JSON
//!   protocol's subscribe, publish and rpc, each through its channel's
//!   hook: its namespace's or the global one), `refresh`, `users` (the
//!   server API's index of connections by user), `api` (the server API;
//!   the worker is handed `api::apply` for the control channel's commands,
//!   as `api` imports the worker).
//!
//! - `console/`: the operator console (`--admin-key`) — `mod.rs` (the
//!   login, the pages `console.html` and `login.html`, the session check,
//!   `/console/series`), `feed` (the snapshot a second on the feed's
//!   internal channel, this instance's summary on Redis's `!console`),
//!   `actions` (publish, history, presence, search, disconnect; audited).
//!   `conn::http` routes to it; its actions read through `history`,
//!   `presence::edge` and `hooks::api`. Sessions, limits and snapshots
//!   are `crate::console`'s (sans-I/O); the worker keeps its state and
//!   hears `!console` itself.
//!
//! - `sse/`: Server-Sent Events (`GET /sse`) — a second wire under the
//!   same outbox, a sibling of `conn/websocket`'s writer with its own
//!   format in `formats` (`formats::SSE`); it reads and writes through
//!   `conn/websocket/transport` and parks through `conn/park`, and the
//!   HTTP router and the parked-connections poller hand it its streams.
//!
//! No file imports one that imports it back (the script finds loops
//! through folders too).

mod admission;
mod auth;
mod cache;
mod conn;
mod console;
mod consumer;
mod endpoints;
mod fleet;
pub mod formats;
mod heard;
mod history;
mod hooks;
mod iovec;
mod mesh;
mod native;
mod presence;
mod publish;
mod pusher;
mod redis;
mod resolve;
mod shared;
mod sse;
mod sys;
mod tls;
mod worker;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use conn::http::Listener;
use shared::Shared;
use worker::Worker;

use crate::config::Config;
use crate::hub::Expired;
use crate::log;
use crate::runtime::{self, DriverKind};

/// How often deadlines, keepalive pings and the stop flag are checked.
const TICK: Duration = Duration::from_millis(100);
/// The listener's TLS and the process's TLS client configurations.
type WorkerTls = (Option<tls::edge::TlsEdge>, tls::client::ClientTls);

/// The TLS client configurations of the process, built once at start for
/// what corecast calls over TLS (`rediss://`, an `https://` origin,
/// webhook or key set); a bad `--redis-tls-ca`, or no system roots, is the start's
/// error. Without `--redis-tls-ca` Redis and HTTP share one.
fn client_tls(cfg: &Config) -> io::Result<tls::client::ClientTls> {
    let redis_tls = cfg.redis.first_url().is_some_and(|u| u.tls);
    let http_tls = cfg.cache.origin.as_ref().is_some_and(|u| u.tls)
        || cfg.proxy.urls.iter().flatten().any(|u| u.tls)
        || cfg.proxy.named.iter().any(|p| p.url.tls)
        || cfg
            .pusher
            .apps
            .iter()
            .any(|a| cfg.pusher.webhook_of(a).is_some_and(|u| u.tls))
        || (cfg.auth.token_jwks_url.as_deref()).is_some_and(|u| u.starts_with("https://"));
    let build = |ca| crate::tls::client::config(ca).map_err(io::Error::other);
    let system = match (http_tls, redis_tls && cfg.redis.tls_ca.is_none()) {
        (false, false) => None,
        _ => Some(build(None)?),
    };
    let redis = match (&cfg.redis.tls_ca, redis_tls) {
        (Some(ca), true) => Some(build(Some(ca))?),
        (None, true) => system.clone(),
        (_, false) => None,
    };
    let http = system.filter(|_| http_tls);
    Ok(tls::client::ClientTls { redis, http })
}

/// Listen backlog.
const BACKLOG: i32 = 4096;

/// Submission-queue entries of the worker's ring. The fan-out window
/// (`--fanout-window`, 256) bounds the writes one pass submits, so a
/// larger ring buys nothing, and each 1,024 entries cost ~100 KiB of
/// resident ring memory (SQE array and rings) in an idle server.
const SERVER_RING_ENTRIES: u32 = 1024;

/// A running server: its address, a stop switch and its worker threads.
pub struct Server {
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<io::Result<()>>>,
}

impl Server {
    /// Binds the listener (so bind errors surface here and port 0 resolves),
    /// then starts the pinned workers.
    pub fn start(mut cfg: Config) -> io::Result<Server> {
        // A program may have set namespaces or the global options since.
        cfg.resolve_namespaces()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        let cpus = cfg.worker_cpus(&runtime::allowed_cpus()).map_err(invalid)?;
        // Certificate files are read before anything binds: a bad one is
        // the start's error, naming the file.
        let tls = tls::edge::TlsEdge::new(&cfg.tls)?;
        let client = client_tls(&cfg)?;
        let listener = std::net::TcpListener::bind(cfg.listen)?;
        sys::set_backlog(listener.as_raw_fd(), BACKLOG)?;
        let addr = listener.local_addr()?;
        let admin = cfg
            .admin_listen
            .map(std::net::TcpListener::bind)
            .transpose()?;
        let admin_addr = admin.as_ref().map(|l| l.local_addr()).transpose()?;
        let stop = Arc::new(AtomicBool::new(false));
        let n = cpus.len();
        let mut parts = match n {
            1 => Vec::new(),
            _ => mesh::build(n, cfg.worker_ring)?,
        }
        .into_iter();
        let mut listeners = Some([Some(listener), admin]);
        let mut workers = Vec::with_capacity(n);
        let mut shared = Shared::new(&cfg);
        shared.consumers = consumer::start(&cfg, stop.clone())?;
        for (i, &cpu) in cpus.iter().enumerate() {
            let boot = Boot {
                index: i,
                workers: n,
                cpu,
                pinned: cfg.cpu.is_some() || cfg.cpus.is_some() || n > 1,
                mesh: parts.next(),
                shared: shared.clone(),
            };
            let tls = (tls.as_ref().map(|t| t.share()), client.clone());
            let (cfg, flag) = (cfg.clone(), stop.clone());
            // The first worker accepts (and hands connections out).
            let listeners = listeners.take().unwrap_or([None, None]);
            let worker = std::thread::Builder::new()
                .name(format!("corecast-worker-{i}"))
                .spawn(move || {
                    let _abort = (n > 1).then_some(AbortOnPanic);
                    let out = run_worker((cfg, tls), (listeners, boot), flag.clone());
                    // One worker failing stops them all.
                    flag.store(true, Ordering::SeqCst);
                    out
                })?;
            workers.push(worker);
        }
        Ok(Server {
            addr,
            admin_addr,
            stop,
            workers,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the admin listener (`--admin-listen`), if any.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Asks the workers to shut down gracefully (as SIGTERM does).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Whether every worker has exited.
    pub fn is_finished(&self) -> bool {
        self.workers.iter().all(JoinHandle::is_finished)
    }

    /// Waits for the workers to exit; the first error, if any.
    pub fn join(self) -> io::Result<()> {
        let mut out = Ok(());
        for worker in self.workers {
            let r = worker
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("worker panicked")));
            if out.is_ok() {
                out = r;
            }
        }
        out
    }
}

/// With several workers, a panic in one ends the process: the others
/// would go on as a silent half-server (its connections and channels
/// gone, its rings filling).
struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            log!(Error, "a worker panicked: aborting the process");
            std::process::abort();
        }
    }
}

/// The main listener and the optional admin listener (the first worker's).
type Listeners = [Option<std::net::TcpListener>; 2];

/// What one worker starts with besides the configuration.
struct Boot {
    index: usize,
    workers: usize,
    cpu: usize,
    /// The CPU was chosen (or there are several workers): not pinning is
    /// an error, not a warning.
    pinned: bool,
    mesh: Option<mesh::Parts>,
    shared: Shared,
}

fn run_worker(
    (cfg, tls): (Config, WorkerTls),
    (listeners, boot): (Listeners, Boot),
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    let cpu = boot.cpu;
    if let Err(e) = runtime::pin_to_cpu(cpu) {
        if boot.pinned {
            return Err(e);
        }
        log!(Warn, "cannot pin worker", cpu = cpu, error = e);
    }
    let driver = DriverKind::detect(cfg.force_legacy_driver);
    if driver == DriverKind::Legacy {
        for l in listeners.iter().flatten() {
            l.set_nonblocking(true)?;
        }
    }
    if let Some(listener) = &listeners[0] {
        log!(
            Info,
            "corecast listening",
            addr = listener.local_addr()?,
            tls = tls.0.is_some(),
            driver = log::Dbg(driver),
            cpu = cpu,
            workers = boot.workers,
            version = env!("CARGO_PKG_VERSION"),
        );
    } else {
        log!(Debug, "worker started", worker = boot.index, cpu = cpu);
    }
    if let Some(admin) = &listeners[1] {
        log!(Info, "admin listener", admin_addr = admin.local_addr()?);
    }
    let serve = worker_main((cfg, tls), (listeners, boot.mesh, boot.shared), stop);
    match driver {
        DriverKind::IoUring => {
            runtime::uring_runtime_or_plain(true, SERVER_RING_ENTRIES)?.block_on(serve)
        }
        DriverKind::Legacy => runtime::legacy_runtime()?.block_on(serve),
    }
}

/// Gives the worker what it shares with the others: the console's
/// access, and with several workers the mesh and the key set (the first
/// worker fetches it; the others copy it).
fn join(w: &Rc<Worker>, mesh: Option<mesh::Parts>, shared: Shared) {
    w.console.borrow_mut().access = shared.console;
    *w.peers.borrow_mut() = shared.peers;
    let Some(parts) = mesh else { return };
    w.hub.borrow_mut().count_connections_in(shared.connections);
    let (first, apps) = shared.pusher;
    let at = (first, parts.me(), parts.workers());
    w.pusher.borrow_mut().join_process(at, apps);
    if let (Some(edge), Some(cache)) = (&w.cache, shared.cache) {
        edge.share(cache, parts.me(), Rc::new(fleet::cache_release(w)));
    }
    if let Some(jwks) = &w.jwks {
        jwks.share(shared.jwks, parts.me() == 0);
    }
    let mesh = mesh::Mesh::new(parts);
    mesh.set_ready(w.own_readiness().is_ok());
    let _ = w.mesh.set(mesh);
    fleet::spawn(w);
}

async fn worker_main(
    (cfg, tls): (Config, WorkerTls),
    (listeners, mesh, shared): (Listeners, Option<mesh::Parts>, Shared),
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    let shutdown_timeout = cfg.shutdown_timeout;
    let w = Worker::with_tls(cfg, tls, hooks::api::apply);
    let consumers = shared.consumers.clone();
    join(&w, mesh, shared);
    serve_consumers(&w, consumers);
    let listening: Vec<std::os::fd::RawFd> =
        listeners.iter().flatten().map(|l| l.as_raw_fd()).collect();
    let [main, admin] = listeners;
    let listener = main.map(monoio::net::TcpListener::from_std).transpose()?;
    let admin = admin.map(monoio::net::TcpListener::from_std).transpose()?;
    let started = Instant::now();
    monoio::spawn(sweeper(w.clone(), started));
    if w.parking.after_ms().is_some() {
        monoio::spawn(conn::websocket::unparker(w.clone()));
    }
    if w.hub.borrow().limits().fanout_window > 0 {
        monoio::spawn(pacer_watchdog(w.clone()));
    }
    if let Some(link) = &w.redis {
        redis::spawn(link, w.clone());
        if w.cfg.presence.enabled() || !w.cfg.pusher.apps.is_empty() {
            monoio::spawn(presence::redis::refresh_loop(w.clone(), link.clone()));
        }
        if !w.cfg.pusher.apps.is_empty() {
            monoio::spawn(pusher::occupancy::settle_loop(w.clone(), link.clone()));
        }
    }
    if w.jwks.as_ref().is_some_and(|j| j.fetches()) {
        let w = w.clone();
        monoio::spawn(async move {
            let jwks = w.jwks.as_ref().expect("checked");
            auth::jwks::fetcher(jwks, &w.hub).await
        });
    }
    for app in w.webhooks.apps() {
        let w = w.clone();
        monoio::spawn(async move {
            let cfg = &w.cfg.pusher.apps[app];
            pusher::webhook::sender(&w.webhooks, (app, cfg), &w.hub).await
        });
    }
    let accept_admin = async {
        match admin {
            Some(l) => conn::accept::accept_loop(w.clone(), l, Listener::Admin).await,
            None => std::future::pending().await,
        }
    };
    let accept_public = async {
        match listener {
            Some(l) => conn::accept::accept_loop(w.clone(), l, Listener::Public).await,
            None => std::future::pending().await,
        }
    };
    let accept_main = race(accept_public, accept_admin);
    let stopped = async {
        wait_for_stop(&stop).await;
        // Stop listening now, while the accept loops still own the
        // listeners (their fds cannot have been reused): io_uring closes
        // a dropped listener asynchronously, and a connect landing in its
        // backlog meanwhile would wait unanswered instead of being reset.
        for &fd in &listening {
            sys::shutdown(fd);
        }
    };
    race(accept_main, stopped).await;
    // The listener is dropped here: no new connections from now on.
    graceful_shutdown(&w, shutdown_timeout).await;
    Ok(())
}

/// The first worker to start serves the outbox consumers (`--consumer`).
fn serve_consumers(w: &Rc<Worker>, consumers: Option<consumer::Handle>) {
    let Some(h) = consumers else { return };
    let socket = h.socket.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(socket) = socket {
        let _ = w.consumers.set(h);
        monoio::spawn(consumer::serve::serve(w.clone(), socket));
    }
}

/// Runs `a` until `b` completes (or `a` ends first), dropping the other.
async fn race(a: impl Future<Output = ()>, b: impl Future<Output = ()>) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    std::future::poll_fn(|cx| {
        if b.as_mut().poll(cx).is_ready() || a.as_mut().poll(cx).is_ready() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}

async fn wait_for_stop(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) && !runtime::signalled() {
        monoio::time::sleep(TICK).await;
    }
}

/// Advances the hub's clock, sends keepalive pings, and cuts connections
/// whose deadline passed.
async fn sweeper(w: Rc<Worker>, started: Instant) {
    let mut expired = Vec::new();
    let mut due = Instant::now() + TICK;
    let mut status_prev = Default::default();
    for tick in 1u64.. {
        monoio::time::sleep(TICK).await;
        if let Some(tls) = &w.tls {
            tls.reload_if_asked(&mut w.hub.borrow_mut().stats);
        }
        if tick % 10 == 0 {
            endpoints::publish_status(&w, &mut status_prev);
            console::feed::tick(&w);
            w.parking.trim();
            // The per-address table is the process's: one worker sweeps it.
            if w.mesh.get().is_none_or(|m| m.me() == 0) {
                w.peers.borrow().evict_idle(crate::peers::IDLE_MS);
            }
        }
        {
            let now = Instant::now();
            let mut hub = w.hub.borrow_mut();
            // Lateness of this timer = how long the loop was busy elsewhere.
            let lag = now.saturating_duration_since(due);
            hub.stats.loop_lag.observe_ns(lag.as_nanos() as u64);
            due = now + TICK;
            hub.set_now(started.elapsed().as_millis() as u64);
            match w.mesh.get() {
                // A channel's owner keeps its history's position while
                // any worker has subscribers (`history::owner`).
                Some(mesh) => hub.sweep_with(&mut expired, |c| mesh.interested(c) != 0),
                None => hub.sweep(&mut expired),
            }
            if let Some(mesh) = w.mesh.get() {
                mesh.set_load(hub.connection_count());
                mesh.set_backlog(hub.backlog(), hub.pressed());
                mesh.set_ready(w.own_readiness().is_ok());
            }
            if let Some(relay) = &w.relay {
                let now = hub.now_ms();
                relay
                    .borrow_mut()
                    .sweep(now, |c| hub.subscriber_count(c) > 0);
            }
        }
        for (fd, why) in expired.drain(..) {
            log!(Debug, "deadline passed", fd = fd, reason = log::Dbg(why));
            if why != Expired::Close {
                log!(Trace, "closing", fd = fd);
            }
            sys::shutdown(fd);
        }
    }
}

/// The pacer watchdog's interval: a place in the fan-out window held
/// through a whole interval belongs to a write waiting for its peer.
const PACER_TICK: Duration = Duration::from_millis(1);

/// Hands places in the fan-out window on when the writes holding them
/// wait for peers that do not read (see `hub::Pacer`). Sleeps until the
/// window is full with writers waiting; costs nothing otherwise.
async fn pacer_watchdog(w: Rc<Worker>) {
    loop {
        std::future::poll_fn(|cx| w.hub.borrow_mut().poll_pacer_backlog(cx)).await;
        monoio::time::sleep(PACER_TICK).await;
        let n = w.hub.borrow_mut().pacer_tick();
        if n > 0 {
            log!(
                Debug,
                "fan-out places held by stalled writes handed on",
                count = n
            );
        }
    }
}

/// Sends close 1001 to every WebSocket after what is queued, closes idle
/// HTTP connections, and waits for the table to empty or the deadline.
async fn graceful_shutdown(w: &Rc<Worker>, timeout: Duration) {
    let http_fds = w.hub.borrow_mut().begin_shutdown();
    let count = w.hub.borrow().connection_count();
    log!(
        Info,
        "shutting down",
        connections = count,
        timeout = log::Dbg(timeout)
    );
    for fd in http_fds {
        sys::shutdown(fd);
    }
    let deadline = Instant::now() + timeout;
    while w.hub.borrow().connection_count() > 0 && Instant::now() < deadline {
        monoio::time::sleep(Duration::from_millis(10)).await;
    }
    // What the closed connections queued for Redis (presence removals,
    // last publishes) is written before the worker exits, within the same
    // deadline: their members leave now, not at `--presence-ttl`.
    if let Some(link) = &w.redis {
        while link.is_up() && link.buffered() > 0 && Instant::now() < deadline {
            monoio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    w.parking.stop();
    // One more turn of the ring: the poller's cancelled poll and the
    // closes it and the listener submitted are processed before the
    // worker (and its ring) ends.
    monoio::time::sleep(Duration::from_millis(1)).await;
    let left = w.hub.borrow().connection_count();
    if left > 0 {
        log!(
            Warn,
            "shutdown deadline passed, cutting connections",
            connections = left
        );
    }
    log!(Info, "stopped");
}
