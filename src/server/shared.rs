//! What the workers of one process share, behind a lock or an atomic
//! that no delivery takes: the console's sessions and login limits, the
//! identity provider's key set, the per-address table and the count of
//! open connections (`--max-connections` is the process's), each Pusher
//! app's connections and the first `socket_id` tag, the HTTP cache's
//! memory store. A process of
//! one worker has its own of each, unshared.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::cache::memory::MemoryStore;
use crate::config::Config;
use crate::peers::{PeerConfig, PeerRefusal, Peers};
use crate::pusher::state::{process_tag, AppConnections};
use crate::server::auth::jwks::SharedKeys;
use crate::server::cache::SharedCache;

/// Made once per process by `Server::start`, cloned into each worker.
#[derive(Clone)]
pub struct Shared {
    pub console: crate::console::Access,
    pub jwks: Arc<SharedKeys>,
    pub peers: SharedPeers,
    /// Connections open on every worker together.
    pub connections: Arc<AtomicUsize>,
    /// The process's first Pusher tag (`pusher::state::process_tag`)
    /// and each app's connections on every worker.
    pub pusher: (u32, AppConnections),
    /// The HTTP cache's memory store, purge epoch and fetch claims
    /// (without Redis).
    pub cache: Option<SharedCache>,
    /// The outbox consumers' bridge and counters (`--consumer`).
    pub consumers: Option<crate::server::consumer::Handle>,
}

impl Shared {
    /// The parts for a process configured with `cfg`.
    pub fn new(cfg: &Config) -> Shared {
        let apps = cfg.pusher.apps.len();
        let memory = cfg.cache.origin.is_some() && !cfg.redis.enabled();
        let cache = memory.then(|| {
            let store = MemoryStore::new(cfg.cache.max_bytes);
            (Arc::new(Mutex::new(store)), Arc::default(), Arc::default())
        });
        Shared {
            peers: SharedPeers::new(cfg.peers.clone()),
            cache,
            consumers: None,
            console: Default::default(),
            jwks: Default::default(),
            connections: Default::default(),
            pusher: (
                process_tag(),
                (0..apps).map(|_| AtomicU64::new(0)).collect(),
            ),
        }
    }
}

/// The per-address table (`--max-connections-per-ip`,
/// `--handshake-rate-per-ip`), one per process: an address is counted
/// once whatever worker serves each of its connections. Locked once per
/// connection opened or closed and per handshake, never per message; its
/// clock is its own (read under the lock, so it never runs backwards for
/// the table).
#[derive(Clone, Default)]
pub struct SharedPeers(Arc<(Mutex<Peers>, Option<Instant>)>);

impl SharedPeers {
    /// A table for `cfg`.
    pub fn new(cfg: PeerConfig) -> SharedPeers {
        SharedPeers(Arc::new((
            Mutex::new(Peers::new(cfg)),
            Some(Instant::now()),
        )))
    }

    fn with<T>(&self, f: impl FnOnce(&mut Peers, u64) -> T) -> T {
        let mut peers: MutexGuard<'_, Peers> =
            self.0 .0.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.0 .1.map_or(0, |t| t.elapsed().as_millis() as u64);
        f(&mut peers, now)
    }

    /// See [`Peers::connect`].
    pub fn connect(&self, ip: IpAddr) -> Result<bool, PeerRefusal> {
        self.with(|p, now| p.connect(ip, now))
    }

    /// See [`Peers::release`].
    pub fn release(&self, ip: IpAddr) {
        self.with(|p, now| p.release(ip, now))
    }

    /// See [`Peers::handshake`].
    pub fn handshake(&self, ip: IpAddr) -> Result<(), PeerRefusal> {
        self.with(|p, now| p.handshake(ip, now))
    }

    /// See [`Peers::evict_idle`].
    pub fn evict_idle(&self, idle_ms: u64) {
        self.with(|p, now| p.evict_idle(now, idle_ms))
    }

    /// Addresses tracked now.
    pub fn tracked(&self) -> usize {
        self.with(|p, _| p.tracked())
    }
}
