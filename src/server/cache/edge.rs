//! The cache of one worker: settings, origin client, store and flights,
//! and the steps a request is made of (lookup, fetch, settle, store,
//! background refresh). `job` sequences them for one request.

use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::rc::Rc;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustls::ClientConfig;

use crate::cache::entry::{self, Entry, Stored, VaryMarker};
use crate::cache::key::{self, Vary};
use crate::cache::now_ms;
use crate::cache::origin::{encode_request, Validators};
use crate::cache::policy::{is_error_status, Defaults, Freshness};
use crate::cache::request::ClientRequest;
use crate::cache::response::Fwd;
use crate::cache::stored::{self, Asked, OriginResponse};
use crate::config::Config;
use crate::http::{self, CacheRoutes};
use crate::log;
use crate::secret::Secret;
use crate::server::redis::RedisLink;
use crate::stats::CacheStats;

use super::claim::{Claims, Release, SharedClaims};
use super::flight::{FlightGuard, Flights, Outcome, Served};
use super::origin::{FetchError, Fetched, OriginClient};
use super::store::{Item, SharedMemory, Store, StoreError};

/// What the workers of a process share of the cache without Redis: the
/// memory store, the purge epoch, the fetch claims.
pub type SharedCache = (SharedMemory, Arc<AtomicU64>, SharedClaims);

pub struct CacheEdge {
    pub(super) prefix: String,
    pub(super) defaults: Defaults,
    pub(super) coalesce_timeout: Duration,
    pub(super) purge_token: Option<Secret>,
    pub(super) purge_max_keys: usize,
    /// `--cache-bypass-headers`: requests with one are personal.
    pub(super) bypass: Vec<String>,
    pub(super) origin: OriginClient,
    pub(super) store: Store,
    pub(super) flights: Rc<Flights>,
    /// Fetches claimed across workers (several workers, no Redis).
    pub(super) claims: Rc<Claims>,
    /// Counters, read by `/stats` and `/metrics`.
    pub(super) stats: RefCell<CacheStats>,
}

impl CacheEdge {
    /// The cache for `cfg`, when an origin is configured: Redis-backed in
    /// Redis mode, else in memory.
    pub fn new(
        cfg: &Config,
        redis: Option<Rc<RedisLink>>,
        tls: Option<Arc<ClientConfig>>,
    ) -> Option<Rc<CacheEdge>> {
        let c = &cfg.cache;
        let url = c.origin.clone()?;
        let store = match redis {
            Some(link) => Store::redis(
                link,
                &cfg.redis.prefix,
                c.redis_timeout,
                cfg.redis.command_timeout,
            ),
            None => Store::memory(c.max_bytes),
        };
        let ms = |d: Duration| d.as_millis().min(u128::from(u64::MAX)) as u64;
        Some(Rc::new(CacheEdge {
            prefix: c.prefix.clone(),
            defaults: Defaults {
                ttl_ms: ms(c.default_ttl),
                swr_ms: ms(c.stale_while_revalidate),
                sie_ms: ms(c.stale_if_error),
            },
            coalesce_timeout: c.coalesce_timeout,
            purge_token: c.purge_token.clone(),
            purge_max_keys: c.purge_max_keys,
            bypass: c.bypass_headers.clone(),
            origin: OriginClient::new(url, c, tls),
            flights: Rc::new(Flights::new(flight_keep(&store, c.redis_timeout))),
            store,
            claims: Rc::default(),
            stats: RefCell::new(CacheStats::default()),
        }))
    }

    /// A snapshot of the counters (the memory store's bytes as they are
    /// now: with several workers, another worker may have written).
    pub fn stats(&self) -> CacheStats {
        let mut s = self.stats.borrow().clone();
        if let Some(m) = self.store.memory_bytes() {
            s.memory_bytes = m;
        }
        s
    }

    /// Makes this worker (`me`) of several without Redis use the
    /// process's memory store, purge epoch and fetch claims, so that an
    /// entry stored or purged on one worker is one on every worker and a
    /// cold key is fetched once; `release` tells the other workers that a
    /// claimed fetch is over.
    pub fn share(&self, shared: SharedCache, me: usize, release: Release) {
        let (memory, purges, claims) = shared;
        self.store.share(memory);
        self.flights.share_epoch(purges);
        self.claims.share(claims, me, release);
    }

    /// Another worker's fetch of `key` is over.
    pub fn released(&self, key: &[u8]) {
        self.claims.wake(key);
    }

    pub(super) fn count(&self, f: impl FnOnce(&mut CacheStats)) {
        f(&mut self.stats.borrow_mut());
    }

    /// The routes the cache adds to the gateway's.
    pub fn routes(&self) -> CacheRoutes<'_> {
        CacheRoutes {
            prefix: &self.prefix,
            purge: self.purge_token.is_some(),
        }
    }
}

/// How long an ended fetch that stored its response stands in for a
/// Redis read that went unanswered: a burst's stragglers on a busy worker
/// arrive up to about a second after the fetch ended. The memory store
/// always answers at once.
fn flight_keep(store: &Store, redis_timeout: Duration) -> Duration {
    match store {
        Store::Memory(_) => Duration::ZERO,
        Store::Redis(_) => redis_timeout.saturating_mul(2).max(FLIGHT_KEEP_MIN),
    }
}

/// The least [`flight_keep`] for Redis.
const FLIGHT_KEEP_MIN: Duration = Duration::from_secs(1);

/// One request for the cache, as the HTTP phase hands it over.
pub struct Incoming {
    /// The request head.
    pub head: Bytes,
    /// The request body (used by purge only).
    pub body: Bytes,
    /// Keep the connection open afterwards.
    pub keep_alive: bool,
    /// `HEAD`: describe the body without sending it.
    pub head_only: bool,
}

impl Incoming {
    /// The cache's view of `req`: its head bytes and
    /// (already read) body.
    pub fn new(req: &http::Request, head: Bytes, body: Bytes) -> Incoming {
        Incoming {
            head,
            body,
            keep_alive: req.keep_alive,
            head_only: req.method == http::Method::Head,
        }
    }
}

/// What a lookup found.
pub(super) enum Found {
    /// A stored response (and the marker it was found through).
    Entry {
        entry: Rc<Entry>,
        marker: Option<VaryMarker>,
    },
    /// Nothing for this request (a marker, if the key varies).
    Missing { marker: Option<VaryMarker> },
    /// The store did not answer.
    Unavailable,
}

/// Whether `stale` may stand in for a failed origin.
pub(super) fn usable_on_error(stale: Option<&Entry>) -> bool {
    stale.is_some_and(|e| {
        matches!(
            e.life.classify(e.age_ms(now_ms())),
            Freshness::Fresh { .. } | Freshness::Stale { if_error: true, .. }
        )
    })
}

/// An entry's `Vary` names with `req`'s values of them.
pub(super) fn vary_of(entry: &Entry, req: &ClientRequest) -> Option<(Vec<String>, Vec<u8>)> {
    match key::parse_vary(entry.header("vary")) {
        Vary::Names(names) => {
            let values = req.vary_values(&names);
            Some((names, values))
        }
        _ => None,
    }
}

impl CacheEdge {
    pub(super) async fn lookup(&self, base: &[u8], req: &ClientRequest) -> Found {
        let marker = match self.get(base).await {
            Err(()) => return Found::Unavailable,
            Ok(None) => return Found::Missing { marker: None },
            Ok(Some(Stored::Response(e))) => {
                return Found::Entry {
                    entry: Rc::new(e),
                    marker: None,
                }
            }
            Ok(Some(Stored::Vary(m))) => m,
        };
        let variant = key::variant_key(base, marker.nonce, &req.vary_values(&marker.names));
        match self.get(&variant).await {
            Err(()) => Found::Unavailable,
            Ok(Some(Stored::Response(e))) => Found::Entry {
                entry: Rc::new(e),
                marker: Some(marker),
            },
            Ok(_) => Found::Missing {
                marker: Some(marker),
            },
        }
    }

    /// Whether `req` carries a `--cache-bypass-headers` header: it is not
    /// served from the cache, and its response is stored only when the
    /// origin marks it `public` or gives `s-maxage`.
    pub(super) fn is_personal(&self, req: &ClientRequest) -> bool {
        req.has_any(&self.bypass)
    }

    /// A decoded value; a foreign or corrupt one is a miss.
    pub(super) async fn get(&self, key: &[u8]) -> Result<Option<Stored>, ()> {
        match self.store.get(key).await {
            Ok(Some(bytes)) => match entry::decode(bytes) {
                Ok(s) => Ok(Some(s)),
                Err(e) => {
                    log!(Debug, "undecodable cache entry ignored", error = e);
                    Ok(None)
                }
            },
            Ok(None) => Ok(None),
            Err(e) => {
                self.count(|s| s.store_errors += 1);
                log!(
                    Debug,
                    "cache store read failed, treating as a miss",
                    error = e
                );
                Err(())
            }
        }
    }

    /// Fetches from the origin for `req` (revalidating `stale` if it has
    /// validators) and decides what to serve and what to store.
    pub(super) async fn fetch(
        &self,
        req: &ClientRequest,
        base: &[u8],
        fwd: Fwd,
        stale: Option<Rc<Entry>>,
        marker: Option<VaryMarker>,
    ) -> (Outcome, Vec<Item>) {
        let validators = stale
            .as_deref()
            .map_or_else(Validators::default, |e| Validators {
                etag: e.etag.as_deref().filter(|_| e.etag_from_origin),
                last_modified: e.header("last-modified").next(),
            });
        let url = self.origin.url();
        let rest = req.path.strip_prefix(self.prefix.as_str()).unwrap_or("");
        let request = encode_request(
            url,
            &url.path_for(rest),
            &req.query,
            // The bypass headers only reach the origin on personal
            // requests (having one is what makes a request personal).
            req.forwarded(&self.bypass),
            validators,
        );
        self.count(|s| s.origin_requests += 1);
        let t0 = std::time::Instant::now();
        let result = self.origin.fetch(request).await;
        self.count(|s| {
            s.origin_time_us += t0.elapsed().as_micros() as u64;
            s.origin_connects = self.origin.connects();
            s.origin_tls_failures = self.origin.tls_failures();
        });
        self.settle(req, base, fwd, stale, marker, result)
    }

    #[allow(clippy::too_many_arguments)] // the fetch's whole context, once
    pub(super) fn settle(
        &self,
        req: &ClientRequest,
        base: &[u8],
        fwd: Fwd,
        stale: Option<Rc<Entry>>,
        marker: Option<VaryMarker>,
        result: Result<Fetched, FetchError>,
    ) -> (Outcome, Vec<Item>) {
        let fallback = stale.clone().filter(|e| usable_on_error(Some(e)));
        let stale_on_error = |entry: Rc<Entry>, fwd_status| {
            let vary = vary_of(&entry, req);
            Outcome::StaleOnError {
                entry,
                fwd_status,
                vary,
            }
        };
        let fetched = match result {
            Ok(f) if is_error_status(f.status) => {
                self.count(|s| s.origin_errors += 1);
                if let Some(entry) = fallback {
                    return (stale_on_error(entry, Some(f.status)), Vec::new());
                }
                f
            }
            Ok(f) => f,
            Err(error) => {
                self.count(|s| s.origin_errors += 1);
                log!(Debug, "origin fetch failed", error = error);
                let outcome = match fallback {
                    Some(entry) => stale_on_error(entry, None),
                    None => Outcome::Failed { error, fwd },
                };
                return (outcome, Vec::new());
            }
        };
        let now = now_ms();
        let asked = Asked {
            personal: self.is_personal(req),
            origin: req.header("origin"),
        };
        let built = match &stale {
            Some(old) if fetched.status == 304 => {
                stored::revalidated(old, &fetched.headers, asked, now, &self.defaults)
            }
            _ => {
                let r = OriginResponse {
                    status: fetched.status,
                    headers: &fetched.headers,
                    body: &fetched.body,
                };
                stored::from_origin(r, asked, now, &self.defaults)
            }
        };
        let vary = vary_of(&built.entry, req);
        let ttl = built.verdict.life.store_ttl_ms(built.entry.age_ms(now));
        let items = if built.verdict.storable && ttl > 0 {
            items(base, &built.entry, ttl, vary.as_ref(), marker)
        } else {
            Vec::new()
        };
        let served = Served {
            entry: Rc::new(built.entry),
            fwd,
            fwd_status: fetched.status,
            stored: !items.is_empty(),
            shareable: built.verdict.shareable,
            vary,
        };
        (Outcome::Fresh(served), items)
    }

    /// Writes `items` in a task of its own, unless a purge happened since
    /// `epoch`; `guard`'s flight stays visible until the write is done.
    pub(super) fn store(self: &Rc<Self>, items: Vec<Item>, epoch: u64, guard: Option<FlightGuard>) {
        if items.is_empty() || self.flights.epoch() != epoch {
            if let Some(g) = guard {
                g.unwritten();
            }
            return;
        }
        let edge = self.clone();
        monoio::spawn(async move {
            let valid = || edge.flights.epoch() == epoch;
            let result = edge.store.set(&items, valid).await;
            let memory = edge.store.memory_bytes();
            edge.count(|s| {
                match &result {
                    Ok(None) => {}
                    Ok(Some(bytes)) => {
                        s.stores += items.len() as u64;
                        s.bytes_stored += bytes;
                    }
                    Err(StoreError::Full) => s.store_skipped += 1,
                    Err(_) => s.store_errors += 1,
                }
                if let Some(m) = memory {
                    s.memory_bytes = m;
                }
            });
            if let Err(e) = result {
                log!(Debug, "cache store write failed, not stored", error = e);
                if let (Some(g), false) = (&guard, e == StoreError::Timeout) {
                    g.unwritten();
                }
            }
            drop(guard);
        });
    }

    /// Serves nothing; refreshes `stale` from the origin once, in the
    /// background (no-op while a fetch of the key is in flight).
    pub(super) fn refresh_in_background(
        self: &Rc<Self>,
        req: &Rc<ClientRequest>,
        base: &[u8],
        marker: Option<VaryMarker>,
        stale: Rc<Entry>,
    ) {
        if self.flights.get(base, true).is_some() {
            return;
        }
        let guard = self.flights.begin(base.to_vec(), true);
        let (edge, req, base) = (self.clone(), req.clone(), base.to_vec());
        monoio::spawn(async move {
            let fetched = edge.fetch(&req, &base, Fwd::Stale, Some(stale), marker);
            let (outcome, items) = fetched.await;
            guard.complete(Rc::new(outcome));
            edge.store(items, guard.epoch(), Some(guard));
        });
    }
}

/// What to write for a storable response: the entry under the base key,
/// or (it varies) a marker there and the entry under its variant key.
pub(super) fn items(
    base: &[u8],
    entry: &Entry,
    ttl: u64,
    vary: Option<&(Vec<String>, Vec<u8>)>,
    marker: Option<VaryMarker>,
) -> Vec<Item> {
    let value = entry::encode(entry);
    let Some((names, values)) = vary else {
        return vec![(base.to_vec(), value, ttl)];
    };
    let nonce = match marker {
        Some(m) if m.names == *names => m.nonce,
        _ => RandomState::new().build_hasher().finish(),
    };
    let marker = VaryMarker {
        nonce,
        names: names.clone(),
    };
    vec![
        (base.to_vec(), entry::encode_marker(&marker), ttl),
        (key::variant_key(base, nonce, values), value, ttl),
    ]
}
