//! What one worker's tasks share: the hub, the configuration, the Redis
//! link and the HTTP cache (each behind its own narrow interface), and the
//! scratch buffer every read goes through. Single-threaded: `Rc` +
//! `RefCell`, no locks.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Instant;

use bytes::BytesMut;
use monoio::net::tcp::TcpOwnedReadHalf;

use crate::config::Config;
use crate::history::relay::Relay;
use crate::hub::Hub;
use crate::namespace::counters::Counters;
use crate::pusher::state::Session;
use crate::pusher::PusherState;
use crate::server::auth::jwks::JwksEdge;
use crate::server::cache::CacheEdge;
use crate::server::conn::park::Parking;
use crate::server::conn::sock;
use crate::server::formats;
use crate::server::hooks::users::Users;
use crate::server::hooks::HookEdge;
use crate::server::pusher::webhook::Webhooks;
use crate::server::redis::RedisLink;
use crate::server::shared::SharedPeers;
use crate::server::sys;
use crate::server::tls::client::ClientTls;
use crate::server::tls::edge::TlsEdge;
use crate::stats::{NamespaceStats, Snapshot};

/// Size of the per-worker scratch buffer every read goes through.
const SCRATCH: usize = 64 * 1024;

/// Input a connection may hold however full the worker's inbound budget
/// is: a partial frame of ordinary messages never gets a connection cut.
pub const INBOUND_FREE: usize = 64 << 10;

/// A reader's share of the worker's inbound memory (`--max-total-inbound`:
/// WebSocket frames and messages being assembled, HTTP request bodies
/// being read), given back when the reader ends, however it ends.
pub struct InboundCharge<'a> {
    total: &'a Cell<usize>,
    held: usize,
}

impl InboundCharge<'_> {
    /// Records that the reader now holds `held` bytes; `false` when its
    /// input grew beyond [`INBOUND_FREE`] while the worker is over `max`.
    pub fn update(&mut self, held: usize, max: usize) -> bool {
        let total = self.total.get() - self.held + held;
        self.total.set(total);
        let grew = held > self.held;
        self.held = held;
        !(grew && held > INBOUND_FREE && total > max)
    }
}

impl Drop for InboundCharge<'_> {
    fn drop(&mut self) {
        self.total.set(self.total.get() - self.held);
    }
}

/// This worker's requests waiting for owners' answers.
pub type OwnerWaits = crate::waits::Waits<crate::server::mesh::Answer>;

/// One worker's shared state.
pub struct Worker {
    /// Connection table and channels.
    pub hub: RefCell<Hub>,
    /// The configuration.
    pub cfg: Config,
    /// Redis mode's connections, when `--redis-url` is set.
    pub redis: Option<Rc<RedisLink>>,
    /// The HTTP cache, when `--origin` is set.
    pub cache: Option<Rc<CacheEdge>>,
    /// Per-client-address limits.
    pub peers: RefCell<SharedPeers>,
    /// Input held by WebSocket readers (`--max-total-inbound`).
    pub inbound: Cell<usize>,
    /// permessage-deflate's counters (shared with the compressed formats'
    /// encoders inside the hub).
    pub compression: formats::SharedCompressionStats,
    /// Redis mode with history: the order of what Redis delivers, and a
    /// cache of recent messages per channel.
    pub relay: Option<RefCell<Relay>>,
    /// What the Pusher connections share (presence, per-app counts).
    pub pusher: RefCell<PusherState>,
    /// Presence members of this instance (`--presence-channels`).
    pub presence: RefCell<crate::presence::Presence>,
    /// Several workers without Redis: the members of the channels this
    /// worker owns, every worker's connections (`presence::owner`).
    pub owned_presence: RefCell<crate::presence::Presence>,
    /// Open Pusher connections' sessions, by connection id.
    pub pusher_sessions: RefCell<std::collections::HashMap<crate::hub::ConnId, Session>>,
    /// Pusher webhooks' queues (`--pusher-webhook`).
    pub webhooks: Webhooks,
    /// Hooks to the application's backend (`--proxy-*`), when any is on.
    pub hooks: Option<Rc<HookEdge>>,
    /// Native WebSockets by user (the server API).
    pub users: RefCell<Users>,
    /// `GET /api/connections` requests waiting for other instances.
    pub api_waits: RefCell<crate::hooks::api::Waits>,
    /// Requests waiting for a channel's owner worker (`history::owner`,
    /// `presence::owner`).
    pub owner_waits: RefCell<OwnerWaits>,
    /// Parked WebSockets (`--park-after`).
    pub parking: Parking,
    /// TLS on the public listener (`--tls-cert`).
    pub tls: Option<TlsEdge>,
    /// The identity provider's key set (`--token-jwks-url`).
    pub jwks: Option<JwksEdge>,
    /// The other workers, with `--workers` above 1 (set once, before
    /// the worker's tasks start).
    pub mesh: std::cell::OnceCell<crate::server::mesh::Mesh>,
    /// The outbox consumers, on the worker that serves them.
    pub consumers: std::cell::OnceCell<crate::server::consumer::Handle>,
    /// Per-namespace counters (none without namespaces).
    pub namespaces: RefCell<Counters>,
    /// The operator console's sessions, instances and series
    /// (`--admin-key`).
    pub console: RefCell<crate::console::State>,
    started: Instant,
    scratch: RefCell<Box<[u8]>>,
    /// Itself, for what is called with `&Worker` (the Redis link's
    /// deliveries) and must start tasks that hold it.
    me: std::rc::Weak<Worker>,
    /// Carries out a server API command heard on the control channel.
    pub(super) on_command: CommandFn,
}

/// `server::hooks::api::apply`, given to the worker by its maker: it acts
/// through the worker, so the worker cannot name it without an import
/// loop.
pub type CommandFn = fn(&Rc<Worker>, (&crate::hooks::api::Command, u32)) -> usize;

impl Worker {
    /// A fresh worker, without TLS.
    #[cfg(test)]
    pub fn new(cfg: Config) -> Rc<Worker> {
        Worker::with_tls(cfg, (None, ClientTls::default()), |_, _| 0)
    }

    /// A fresh worker; `tls`: its listener's TLS, already loaded, and the
    /// process's TLS client configurations (`rediss://`, `https://`);
    /// `on_command`: what carries out the server API's commands.
    pub fn with_tls(
        cfg: Config,
        (tls, client): (Option<TlsEdge>, ClientTls),
        on_command: CommandFn,
    ) -> Rc<Worker> {
        let redis = RedisLink::new(&cfg, client.redis);
        let compression = formats::SharedCompressionStats::default();
        let plain = cfg.uncompressed_namespaces();
        let encoders = formats::encoders_with(&cfg.compression, &compression, plain);
        let encoders = formats::with_sse(encoders, cfg.sse.heartbeat_ms);
        let relay = redis.as_ref().filter(|l| l.keeps_history()).map(|_| {
            RefCell::new(
                Relay::new(cfg.history, relay_seed()).with_namespaces(cfg.history_namespaces()),
            )
        });
        Rc::new_cyclic(|me| Worker {
            me: me.clone(),
            on_command,
            relay,
            hub: RefCell::new(hub(&cfg, encoders)),
            compression,
            cache: CacheEdge::new(&cfg, redis.clone(), client.http.clone()),
            redis,
            peers: RefCell::new(SharedPeers::new(cfg.peers.clone())),
            inbound: Cell::new(0),
            pusher: RefCell::new(PusherState::new(cfg.pusher.apps.len())),
            pusher_sessions: RefCell::default(),
            jwks: JwksEdge::new(&cfg.auth, client.http.clone()),
            hooks: HookEdge::new(&cfg, client.http.clone()).map(Rc::new),
            users: RefCell::default(),
            api_waits: RefCell::default(),
            owner_waits: RefCell::default(),
            webhooks: Webhooks::new(&cfg, client.http),
            presence: RefCell::default(),
            owned_presence: RefCell::default(),
            parking: parking(&cfg),
            tls,
            namespaces: RefCell::new(Counters::new(&cfg.namespaces.table)),
            console: RefCell::default(),
            mesh: std::cell::OnceCell::new(),
            consumers: std::cell::OnceCell::new(),
            started: Instant::now(),
            cfg,
            scratch: RefCell::new(vec![0; SCRATCH].into_boxed_slice()),
        })
    }

    /// The worker's own `Rc` (it lives as long as its runtime, which
    /// is what calls it).
    pub fn rc(&self) -> Rc<Worker> {
        self.me
            .upgrade()
            .expect("a worker is called only while it lives")
    }

    /// Ends connection `id` in the worker's books: out of the hub (its
    /// channels), and its client address's count released if it held one.
    pub fn forget(&self, id: crate::hub::ConnId, release_ip: Option<std::net::IpAddr>) {
        self.hub.borrow_mut().remove(id);
        if let Some(ip) = release_ip {
            self.peers.borrow().release(ip);
        }
    }

    /// Checks a connection token (at an upgrade or a refresh) with every
    /// configured key, the key set's included (see `server::auth::jwks`).
    pub fn verify_token(
        &self,
        token: &[u8],
        stats: &mut crate::stats::Stats,
    ) -> Result<crate::auth::Grants, crate::auth::TokenError> {
        match &self.jwks {
            Some(jwks) => jwks.verify(&self.cfg.auth, token, stats),
            None => self.cfg.auth.verify(token),
        }
    }

    /// `auth::authorize_upgrade` with [`Worker::verify_token`], and the
    /// channel's namespace rules (`namespace::authorize_upgrade`).
    pub fn authorize(
        &self,
        req: &crate::http::Request,
        channel: Option<&str>,
    ) -> Result<crate::auth::Grants, crate::auth::Refusal> {
        let (table, auth) = (&self.cfg.namespaces.table, &self.cfg.auth);
        crate::namespace::authorize_upgrade(table, auth, req, channel, |c| {
            crate::auth::authorize_upgrade_with(auth, req, c, |t| {
                self.verify_token(t, &mut self.hub.borrow_mut().stats)
            })
        })
    }

    /// Milliseconds since the worker started (a precise clock, unlike the
    /// hub's coarse one).
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Reads more bytes from a client into `buf`: `Ok(0)` at end of
    /// stream. Counted in `bytes_in`. `fd` is `rd`'s socket.
    pub async fn read_more(
        &self,
        rd: &mut TcpOwnedReadHalf,
        fd: RawFd,
        buf: &mut BytesMut,
    ) -> io::Result<usize> {
        let n = sock::recv_into(rd, fd, &self.scratch, buf).await?;
        self.hub.borrow_mut().stats.bytes_in += n as u64;
        Ok(n)
    }

    /// [`Worker::read_more`] whose wait may end quietly (`Ok(None)`, see
    /// [`sock::recv_or_quiet`]).
    pub async fn read_more_or_quiet(
        &self,
        rd: &mut TcpOwnedReadHalf,
        fd: RawFd,
        buf: &mut BytesMut,
        quiet: sock::QuietWait<'_>,
    ) -> io::Result<Option<usize>> {
        let n = sock::recv_or_quiet(rd, fd, &self.scratch, buf, Some(quiet)).await?;
        self.hub.borrow_mut().stats.bytes_in += n.unwrap_or(0) as u64;
        Ok(n)
    }

    /// Reads what a parked connection's socket has into `buf`, without
    /// waiting (`WouldBlock`: nothing; it was woken for something else).
    /// Counted in `bytes_in`.
    pub fn read_parked(&self, fd: RawFd, buf: &mut BytesMut) -> io::Result<usize> {
        let mut scratch = self.scratch.borrow_mut();
        let n = loop {
            match sys::recv_nonblocking(fd, &mut scratch) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                res => break res?,
            }
        };
        buf.extend_from_slice(&scratch[..n]);
        self.hub.borrow_mut().stats.bytes_in += n as u64;
        Ok(n)
    }

    /// A new reader's (empty) share of the inbound budget.
    pub fn inbound_charge(&self) -> InboundCharge<'_> {
        InboundCharge {
            total: &self.inbound,
            held: 0,
        }
    }

    /// The hooks, if the connect hook is on.
    pub fn connect_hook(&self) -> Option<&HookEdge> {
        let edge = self.hooks.as_deref()?;
        edge.has(crate::hooks::HookKind::Connect).then_some(edge)
    }

    /// Whether the worker's write backlog (with what waits for a full
    /// ring to another worker) is over `--publish-backpressure`; with
    /// several workers, or another worker's.
    pub fn over_backlog(&self) -> bool {
        let (own, pressed) = {
            let hub = self.hub.borrow();
            (hub.backlog(), hub.pressed())
        };
        let Some(mesh) = self.mesh.get() else {
            return own > self.cfg.publish_backpressure;
        };
        mesh.set_backlog(own, pressed);
        // What is on its way to other workers is not in any queue yet: at
        // most a subscriber's bound of it, so a subscriber anywhere is not
        // overrun before its pressure can be seen.
        if mesh.most_in_flight() > self.cfg.max_outbound_queue {
            return true;
        }
        let worst = (own + mesh.overflow_bytes()).max(mesh.others_backlog());
        worst > self.cfg.publish_backpressure
    }

    /// Whether another worker has a subscriber over its bound (its own
    /// are `Hub::pressed`): a publisher here waits as for its own.
    pub fn others_pressed(&self) -> bool {
        self.mesh.get().is_some_and(|m| m.others_pressed())
    }

    /// `Ok` when this process can deliver (always, without Redis): this
    /// worker's Redis link is ready, and every other worker said its own
    /// is at its last tick.
    pub fn readiness(&self) -> Result<(), String> {
        let own = self.own_readiness();
        if let Some(mesh) = self.mesh.get() {
            // Said now too, not only at the tick: a probe answered ready
            // here is not contradicted by the next one on another worker.
            mesh.set_ready(own.is_ok());
        }
        own?;
        match self.mesh.get().and_then(|m| m.unready_other()) {
            Some(i) => Err(format!("worker {i} is not ready (its Redis link)")),
            None => Ok(()),
        }
    }

    /// `Ok` when this worker can deliver: its Redis link's readiness.
    pub fn own_readiness(&self) -> Result<(), String> {
        self.redis.as_ref().map_or(Ok(()), |l| l.readiness())
    }

    /// Every layer's counters now.
    pub fn snapshot(&self) -> Snapshot {
        let hub = self.hub.borrow();
        let mut worker = hub.stats.clone();
        worker.refusal_logs_suppressed = crate::log::refusals_suppressed();
        // The table is the process's: one worker reports it.
        let reports = self.mesh.get().is_none_or(|m| m.me() == 0);
        worker.per_ip_tracked = match reports {
            true => self.peers.borrow().tracked() as u64,
            false => 0,
        };
        worker.outbound_bytes = hub.total_pending() as u64;
        worker.parked_connections = self.parking.count() as u64;
        worker.sse_connections = worker.sse_opened.saturating_sub(worker.sse_closed);
        (worker.parks, worker.unparks) = self.parking.totals();
        worker.outbound_memory_bytes = hub.outbound_memory() as u64;
        worker.inbound_bytes = self.inbound.get() as u64;
        let (mut messages, mut bytes) = hub.history_usage();
        if let Some(relay) = &self.relay {
            let r = relay.borrow();
            (messages, bytes) = (r.history().messages(), r.history().bytes());
            worker.backfilled_messages = r.backfilled;
            worker.history_gaps = r.gaps;
            worker.history_rollbacks = r.rollbacks;
        }
        (worker.history_messages, worker.history_bytes) = (messages as u64, bytes as u64);
        if let Some(mesh) = self.mesh.get() {
            let m = mesh.stats.get();
            worker.worker_hops_out = m.hops_out;
            worker.worker_hops_in = m.hops_in;
            worker.worker_ring_full = m.ring_full;
            worker.worker_wakes = m.wakes;
            worker.worker_connections_handed = m.handed_over;
        }
        Snapshot {
            worker,
            redis: self.redis.as_ref().map(|l| l.stats()).unwrap_or_default(),
            cache: self.cache.as_ref().map(|c| c.stats()).unwrap_or_default(),
            compression: self.compression.borrow().clone(),
            presence: self.presence_stats(),
            connections: hub.connection_count() as u64,
            channels: self.channel_count(&hub) as u64,
            messages_out: hub.stats.deliveries,
            pusher_apps: self.pusher_apps(),
            namespaces: self.namespace_stats(&hub),
            consumers: self.consumers.get().map(|h| h.stats()).unwrap_or_default(),
            namespace_unknown_channel: (!self.cfg.namespaces.table.is_empty())
                .then(|| self.namespaces.borrow().unknown),
            proxy: self.hooks.as_ref().map(|h| h.stats()).unwrap_or_default(),
            proxy_backend_connections_opened: self
                .hooks
                .as_ref()
                .map_or(0, |h| h.backend_connects()),
        }
    }

    /// Presence's counters: with several workers and no Redis, members,
    /// joins and leaves are the owner's (the channels this worker owns),
    /// refusals and limited reads wherever they happened.
    fn presence_stats(&self) -> crate::presence::PresenceStats {
        let mut s = self.presence.borrow().stats;
        if self.mesh.get().is_some() && self.redis.is_none() {
            let o = self.owned_presence.borrow().stats;
            s.presence_members = o.presence_members;
            s.presence_joins = o.presence_joins;
            s.presence_leaves = o.presence_leaves;
            s.presence_refused += o.presence_refused;
        }
        s
    }

    /// Channels with subscribers; with several workers, those this one
    /// owns (so the workers' sum counts each channel once).
    fn channel_count(&self, hub: &Hub) -> usize {
        let Some(mesh) = self.mesh.get() else {
            return hub.channel_count();
        };
        let local = hub.channels_with_prefix("");
        mesh.owned_channels(local.iter().map(|(c, _)| &**c))
    }

    /// Per-namespace counters and gauges (one pass over the channels,
    /// only with namespaces configured).
    fn namespace_stats(&self, hub: &Hub) -> std::collections::BTreeMap<String, NamespaceStats> {
        let table = &self.cfg.namespaces.table;
        if table.is_empty() {
            return Default::default();
        }
        let channels = hub.channels_with_prefix("");
        let counts = channels.iter().map(|(c, n)| (&**c, *n));
        let conns = hub.subscribed_connections();
        self.namespaces.borrow().snapshot(table, counts, conns)
    }

    /// Runs a delivery into the hub and counts it in the channel's
    /// namespace (Redis mode's deliveries come back here).
    pub fn delivering<T>(&self, channel: &str, f: impl FnOnce(&mut Hub) -> T) -> T {
        let mut hub = self.hub.borrow_mut();
        let before = hub.stats.deliveries;
        let out = f(&mut hub);
        let n = hub.stats.deliveries - before;
        let table = &self.cfg.namespaces.table;
        self.namespaces.borrow_mut().delivered(table, channel, n);
        out
    }

    /// Each Pusher app's counters by app id.
    fn pusher_apps(&self) -> std::collections::BTreeMap<String, crate::stats::PusherAppStats> {
        let state = self.pusher.borrow();
        let ids = self.cfg.pusher.apps.iter().map(|a| a.id.clone());
        ids.zip(state.apps().iter().cloned()).collect()
    }
}

/// Epochs minted by the relay's rings must differ between processes.
fn relay_seed() -> u64 {
    std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 1u8)
}

/// The worker's parking, or none if the epoll set cannot be made (logged:
/// connections then keep their tasks, as with `--park-after 0`).
fn parking(cfg: &Config) -> Parking {
    let after = cfg.park_after.as_millis() as u64;
    Parking::new(after).unwrap_or_else(|e| {
        crate::log!(Error, "parking disabled", error = e);
        Parking::new(0).expect("parking off needs no syscall")
    })
}

/// The worker's hub; a connection that subscribes to a latest-value
/// channel gets `--latest-send-buffer` as its socket's send buffer, so
/// that what waits for it stays in the hub's queue, where a newer value
/// replaces it (the kernel's autotuned buffer would hold megabytes of
/// stale ones).
fn hub(cfg: &Config, encoders: crate::hub::Encoders) -> Hub {
    let mut hub = Hub::new(cfg.hub_limits(), encoders);
    let bytes = cfg.latest_send_buffer;
    if bytes > 0 && !cfg.conflated_namespaces().is_empty() {
        hub.on_latest_subscription(move |fd| {
            if let Err(e) = crate::server::sys::set_send_buffer(fd, bytes) {
                crate::log!(Debug, "latest-value send buffer not set", fd = fd, why = e);
            }
        });
    }
    hub
}
