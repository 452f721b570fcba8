//! `--token-jwks-url` on monoio: one task per worker fetches the identity
//! provider's key set with the cache's bounded HTTP client (size:
//! `auth::jwks::MAX_JWKS_BYTES`; time: `--token-jwks-timeout`; keys:
//! `auth::MAX_PUBLIC_KEYS`) and keeps the last good one. Tokens are
//! checked against the keys held, synchronously: a token never waits
//! for a fetch. One naming a `kid` no held key has is refused (401,
//! counted) and asks for an early fetch, which `auth::jwks::Refresh`
//! allows at most once per `--token-jwks-refresh`; the set is fetched
//! periodically too. A failed fetch (provider down, slow, malformed,
//! too large) is logged and counted, and the held keys stay in use.
//!
//! At start the set is fetched at once; until it arrives tokens signed
//! with a public key are refused (401) and the fetch is retried with
//! backoff — the server serves everything else meanwhile.
//!
//! With several workers the set is fetched once per process: the first
//! worker fetches and publishes each good set in [`SharedKeys`]; the
//! others copy it when its generation moves (one relaxed load per token
//! checked, a lock only on a change) and flag an unknown `kid` there,
//! which the fetcher looks at every [`NUDGE_POLL`].

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustls::ClientConfig;

use crate::auth::jwks::{self, Refresh, MAX_JWKS_BYTES};
use crate::auth::{AuthConfig, Grants, PublicKey, TokenError};
use crate::cache::origin::{encode_request, OriginUrl, Validators};
use crate::cache::CacheConfig;
use crate::hub::Hub;
use crate::log;
use crate::server::cache::origin::OriginClient;
use crate::stats::Stats;

/// Largest response head from the provider.
const MAX_HEAD: usize = 16 * 1024;

/// How often the fetcher looks for another worker's unknown `kid`
/// (several workers).
const NUDGE_POLL: Duration = Duration::from_millis(100);

/// The process's key set, shared by its workers: the fetching worker
/// publishes each good set; the others copy it.
#[derive(Default)]
pub struct SharedKeys {
    /// Moves with each set published.
    generation: AtomicU64,
    keys: Mutex<Vec<PublicKey>>,
    /// A worker that does not fetch saw an unknown `kid`.
    nudge: AtomicBool,
}

/// One worker's copy of the key set and its fetcher's state.
pub struct JwksEdge {
    /// The process's set, and whether this worker is the one fetching
    /// it (the only one, or the first of several).
    shared: RefCell<Arc<SharedKeys>>,
    fetches: Cell<bool>,
    /// The generation of the shared set copied last.
    seen: Cell<u64>,
    client: OriginClient,
    request: Bytes,
    /// `--token-public-key`'s keys, then the last good set's.
    keys: RefCell<Vec<PublicKey>>,
    configured: usize,
    refresh: RefCell<Refresh>,
    /// Set when an early fetch was asked for; the fetcher's waker.
    nudged: Cell<bool>,
    waker: Cell<Option<Waker>>,
    clock: Instant,
}

impl JwksEdge {
    /// The fetcher's state for `cfg.token_jwks_url` (None: not set).
    /// `tls`: the process's client configuration, for `https://`.
    pub fn new(cfg: &AuthConfig, tls: Option<Arc<ClientConfig>>) -> Option<JwksEdge> {
        let url: OriginUrl = cfg.token_jwks_url.as_deref()?.parse().ok()?;
        let path = if url.base_path.is_empty() {
            "/"
        } else {
            &url.base_path
        };
        let accept = [(&b"Accept"[..], &b"application/json"[..])];
        let request = encode_request(&url, path, "", accept.into_iter(), Validators::default());
        Some(JwksEdge {
            shared: RefCell::default(),
            fetches: Cell::new(true),
            seen: Cell::new(0),
            client: OriginClient::new(url, &client_config(cfg.token_jwks_timeout), tls),
            request,
            keys: RefCell::new(cfg.token_public_keys.clone()),
            configured: cfg.token_public_keys.len(),
            refresh: RefCell::new(Refresh::new(cfg.token_jwks_refresh.as_millis() as u64)),
            nudged: Cell::new(false),
            waker: Cell::new(None),
            clock: Instant::now(),
        })
    }

    /// Several workers: this one uses the process's `shared` set, and
    /// fetches it when `fetches` (one worker does).
    pub fn share(&self, shared: Arc<SharedKeys>, fetches: bool) {
        *self.shared.borrow_mut() = shared;
        self.fetches.set(fetches);
    }

    /// Whether this worker runs the fetcher.
    pub fn fetches(&self) -> bool {
        self.fetches.get()
    }

    /// A worker that does not fetch: the shared set, if it moved since
    /// the last copy.
    fn follow(&self) {
        let shared = self.shared.borrow();
        let generation = shared.generation.load(Ordering::Acquire);
        if self.fetches.get() || generation == self.seen.get() {
            return;
        }
        let fresh = shared.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let mut keys = self.keys.borrow_mut();
        keys.truncate(self.configured);
        keys.extend(fresh.iter().cloned());
        self.seen.set(generation);
    }

    /// Checks `token` with `cfg`'s secret and the keys held. A `kid` no
    /// key has is counted and asks for an early fetch.
    pub fn verify(
        &self,
        cfg: &AuthConfig,
        token: &[u8],
        stats: &mut Stats,
    ) -> Result<Grants, TokenError> {
        self.follow();
        let result = cfg.verify_with(token, &self.keys.borrow());
        if let Err(TokenError::UnknownKey) = result {
            stats.token_jwks_unknown_kid += 1;
            if !self.fetches.get() {
                self.shared.borrow().nudge.store(true, Ordering::Relaxed);
            } else if self.refresh.borrow_mut().want() {
                self.nudged.set(true);
                if let Some(w) = self.waker.take() {
                    w.wake();
                }
            }
        }
        result
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// Waits until the next fetch is due or an early one is asked for.
    async fn wait(&self) {
        let due = self.refresh.borrow().due_ms();
        let now = self.now_ms();
        if due <= now {
            return;
        }
        let mut sleep = pin!(monoio::time::sleep(Duration::from_millis(due - now)));
        // Another worker's unknown `kid` cannot wake this one: looked at
        // every NUDGE_POLL (only while several workers share the set).
        let shared = Arc::strong_count(&self.shared.borrow()) > 1;
        let mut poll = pin!(monoio::time::sleep(NUDGE_POLL));
        poll_fn(|cx| {
            if self.nudged.replace(false) || sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            if shared && poll.as_mut().poll(cx).is_ready() {
                let nudge = self.shared.borrow().nudge.swap(false, Ordering::Relaxed);
                if nudge && self.refresh.borrow_mut().want() {
                    return Poll::Ready(());
                }
                poll.set(monoio::time::sleep(NUDGE_POLL));
                let _ = poll.as_mut().poll(cx);
            }
            self.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        })
        .await
    }

    /// One fetch; the new keys replace the set's old ones when it is good.
    async fn fetch_once(&self, hub: &RefCell<Hub>) -> bool {
        let outcome = match self.client.fetch(self.request.clone()).await {
            Ok(f) if f.status == 200 => read_set(&f.body),
            Ok(f) => Err(format!("status {}", f.status)),
            Err(e) => Err(e.to_string()),
        };
        let stats = &mut hub.borrow_mut().stats;
        stats.token_jwks_fetches += 1;
        match outcome {
            Ok(fresh) => {
                stats.token_jwks_keys = fresh.len() as u64;
                self.publish(&fresh);
                let mut keys = self.keys.borrow_mut();
                keys.truncate(self.configured);
                keys.extend(fresh);
                true
            }
            Err(error) => {
                stats.token_jwks_failures += 1;
                let held = self.keys.borrow().len() - self.configured;
                let url = self.client.url();
                log!(
                    Warn,
                    "key set fetch failed, keeping the held keys",
                    url = url,
                    held = held,
                    error = error
                );
                false
            }
        }
    }
}

impl JwksEdge {
    /// A good set, for the other workers.
    fn publish(&self, fresh: &[PublicKey]) {
        let shared = self.shared.borrow();
        let mut keys = shared.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.clear();
        keys.extend(fresh.iter().cloned());
        shared.generation.fetch_add(1, Ordering::Release);
    }
}

/// A good key set's keys: a set with no usable key is refused too (the
/// held keys are better than none).
fn read_set(body: &[u8]) -> Result<Vec<PublicKey>, String> {
    let set = jwks::parse(body)?;
    if set.keys.is_empty() {
        return Err(format!("no usable key ({} skipped)", set.skipped));
    }
    Ok(set.keys)
}

/// The HTTP client's bounds for a key set: one connection, `timeout` for
/// connecting and for the whole exchange, the set's size bound.
fn client_config(timeout: Duration) -> CacheConfig {
    CacheConfig {
        origin_max_connections: 1,
        origin_pool_size: 1,
        origin_connect_timeout: timeout,
        origin_timeout: timeout,
        origin_idle_timeout: Duration::from_secs(30),
        origin_dns_ttl: Duration::from_secs(60),
        origin_max_body: MAX_JWKS_BYTES,
        origin_max_head: MAX_HEAD,
        ..CacheConfig::default()
    }
}

/// Fetches the key set for as long as the worker runs, counting in
/// `hub`'s stats.
pub async fn fetcher(edge: &JwksEdge, hub: &RefCell<Hub>) {
    loop {
        edge.wait().await;
        if edge.refresh.borrow().due_ms() > edge.now_ms() {
            continue; // nudged, but an early fetch is not allowed yet
        }
        edge.refresh.borrow_mut().started(edge.now_ms());
        let ok = edge.fetch_once(hub).await;
        edge.refresh.borrow_mut().finished(ok);
    }
}
