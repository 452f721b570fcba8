//! The HTTP cache's network edge: `GET`/`HEAD` under `--cache-prefix`
//! served from the store or fetched from `--origin`, and
//! `POST /cache/purge`.
//!
//! A request goes through these steps (decisions are the sans-I/O
//! `cache` modules; this file sequences them around the awaits):
//! 1. a foreground fetch of the same key in flight → wait for it;
//! 2. look the key up (following a `Vary` marker to the variant);
//! 3. fresh → hit; stale within `stale-while-revalidate` → serve it and
//!    refresh once in the background; otherwise
//! 4. join any fetch in flight, or become the one fetch of this worker
//!    (revalidating with the stored validators when there is an entry);
//!    an origin failure falls back to a stale entry within
//!    `stale-if-error`, else 502/504.
//!
//! The store is written after the response is handed to the waiters, in a
//! task of its own; the flight stays visible until then (see `flight`).
//!
//! # Layout
//! - `flight`: coalescing — one fetch per key, waiters, purge epoch.
//! - `origin`: the pooled, bounded HTTP/1.1 client.
//! - `store`: Redis or the memory LRU behind one interface.

mod flight;
mod origin;
mod store;

use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;

use crate::cache::entry::{self, Entry, Stored, VaryMarker};
use crate::cache::key::{self, Vary, VARIANT_SEP};
use crate::cache::now_ms;
use crate::cache::origin::{encode_request, Validators};
use crate::cache::policy::{is_error_status, Defaults, Freshness};
use crate::cache::purge::{self, Purge};
use crate::cache::request::ClientRequest;
use crate::cache::response::{self, CacheStatus, Fwd, Reply};
use crate::cache::stored::{self, OriginResponse};
use crate::config::Config;
use crate::http::{self, CacheRoutes, HttpError, Route};
use crate::log;
use crate::secret::Secret;
use crate::server::redis::RedisLink;
use crate::stats::CacheStats;

use flight::{Flight, FlightGuard, Flights, Outcome, Served};
use origin::{FetchError, Fetched, OriginClient};
use store::{Item, Store};

/// A worker's cache: settings, origin client, store, flights.
pub struct CacheEdge {
    prefix: String,
    defaults: Defaults,
    coalesce_timeout: Duration,
    purge_token: Option<Secret>,
    purge_max_keys: usize,
    origin: OriginClient,
    store: Store,
    flights: Rc<Flights>,
    /// Counters, read by `/stats` and `/metrics`.
    stats: RefCell<CacheStats>,
}

impl CacheEdge {
    /// The cache for `cfg`, when an origin is configured: Redis-backed in
    /// Redis mode, else in memory.
    pub fn new(cfg: &Config, redis: Option<Rc<RedisLink>>) -> Option<Rc<CacheEdge>> {
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
            origin: OriginClient::new(url, c),
            store,
            flights: Rc::new(Flights::default()),
            stats: RefCell::new(CacheStats::default()),
        }))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CacheStats {
        self.stats.borrow().clone()
    }

    fn count(&self, f: impl FnOnce(&mut CacheStats)) {
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

/// Answers a cache route: the complete response bytes.
/// `renew` restarts the connection's request deadline while the answer
/// waits on the origin (the deadline measures the client, not the origin).
pub async fn respond(
    cache: Option<&Rc<CacheEdge>>,
    route: &Route<'_>,
    inc: Incoming,
    renew: &dyn Fn(),
) -> Vec<u8> {
    let bad =
        |status, message| http::error_response(&HttpError { status, message }, inc.keep_alive);
    let Some(edge) = cache.cloned() else {
        return bad(404, "not found");
    };
    if *route == Route::CachePurge {
        return purge(&edge, inc).await;
    }
    let req = match ClientRequest::parse(&inc.head) {
        Ok(r) if r.has_dot_segment() => {
            return bad(400, "dot segments are not allowed in cached paths")
        }
        Ok(r) => r,
        Err(_) => return bad(400, "malformed request"),
    };
    let job = Job {
        base: req.base_key(),
        req: Rc::new(req),
        renew,
        edge: &edge,
        keep_alive: inc.keep_alive,
        head_only: inc.head_only,
    };
    job.serve().await
}

/// Remaining freshness in whole seconds (RFC 9211 `ttl`).
fn secs(ms: u64) -> i64 {
    i64::try_from(ms / 1000).unwrap_or(i64::MAX)
}

/// `ttl` of a stale response: negative, rounded away from zero so a
/// response stale by 300 ms does not read `ttl=0`.
fn overdue(ms: u64) -> i64 {
    -i64::try_from(ms.div_ceil(1000)).unwrap_or(i64::MAX)
}

/// What a lookup found.
enum Found {
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

/// One cacheable request being served.
struct Job<'a> {
    renew: &'a dyn Fn(),
    edge: &'a Rc<CacheEdge>,
    req: Rc<ClientRequest>,
    base: Vec<u8>,
    keep_alive: bool,
    head_only: bool,
}

impl Job<'_> {
    async fn serve(&self) -> Vec<u8> {
        // A foreground fetch of this key is under way: its answer is at
        // least as fresh as anything stored, so skip the lookup.
        if let Some(f) = self.edge.flights.get(&self.base, false) {
            return self.join(f, None).await;
        }
        match self.edge.lookup(&self.base, &self.req).await {
            Found::Entry { entry, marker } => self.use_stored(entry, marker).await,
            Found::Missing { marker } => {
                let fwd = if marker.is_some() {
                    Fwd::VaryMiss
                } else {
                    Fwd::Miss
                };
                self.fetch_or_join(fwd, None, marker).await
            }
            Found::Unavailable => self.fetch_or_join(Fwd::Bypass, None, None).await,
        }
    }

    async fn use_stored(&self, entry: Rc<Entry>, marker: Option<VaryMarker>) -> Vec<u8> {
        match entry.life.classify(entry.age_ms(now_ms())) {
            Freshness::Fresh { left_ms } => {
                self.edge.count(|s| s.hits += 1);
                let status = CacheStatus {
                    hit: true,
                    ttl_s: Some(secs(left_ms)),
                    ..CacheStatus::default()
                };
                self.encode(&entry, &status)
            }
            Freshness::Stale {
                over_ms,
                while_revalidate: true,
                ..
            } => {
                self.edge.count(|s| s.stale_served += 1);
                self.edge
                    .refresh_in_background(&self.req, &self.base, marker, entry.clone());
                let status = CacheStatus {
                    hit: true,
                    fwd: Some(Fwd::Stale),
                    ttl_s: Some(overdue(over_ms)),
                    detail: Some("stale-while-revalidate"),
                    ..CacheStatus::default()
                };
                self.encode(&entry, &status)
            }
            Freshness::Stale { .. } => self.fetch_or_join(Fwd::Stale, Some(entry), marker).await,
        }
    }

    /// Waits for the fetch in flight, or becomes it.
    async fn fetch_or_join(
        &self,
        fwd: Fwd,
        stale: Option<Rc<Entry>>,
        marker: Option<VaryMarker>,
    ) -> Vec<u8> {
        if let Some(f) = self.edge.flights.get(&self.base, true) {
            return self.join(f, stale).await;
        }
        self.edge.count(|s| s.misses += 1);
        let guard = self.edge.flights.begin(self.base.clone(), false);
        self.renew_deadline();
        let (outcome, items) = self
            .edge
            .fetch(&self.req, &self.base, fwd, stale, marker)
            .await;
        let outcome = Rc::new(outcome);
        guard.complete(outcome.clone());
        self.edge.store(items, guard.epoch(), Some(guard));
        self.answer(&outcome, false)
    }

    /// Waits (bounded) for another request's fetch; falls back to its own
    /// when that answer is not for this request or takes too long.
    async fn join(&self, flight: Rc<Flight>, stale: Option<Rc<Entry>>) -> Vec<u8> {
        self.edge.count(|s| s.coalesced_waiters += 1);
        self.renew_deadline();
        let waited = monoio::time::timeout(self.edge.coalesce_timeout, flight.wait()).await;
        if let Ok(outcome) = waited {
            match &*outcome {
                Outcome::Failed { .. } if usable_on_error(stale.as_deref()) => {
                    let entry = stale.expect("checked");
                    let (fwd_status, vary) = (None, None);
                    let own = Outcome::StaleOnError {
                        entry,
                        fwd_status,
                        vary,
                    };
                    return self.answer(&own, true);
                }
                Outcome::Fresh(s) if s.shareable && self.same_variant(s.vary.as_ref()) => {
                    return self.answer(&outcome, true);
                }
                Outcome::StaleOnError { vary, .. } if self.same_variant(vary.as_ref()) => {
                    return self.answer(&outcome, true);
                }
                Outcome::Failed { .. } => return self.answer(&outcome, true),
                _ => {}
            }
        }
        self.edge.count(|s| s.misses += 1);
        self.renew_deadline();
        let epoch = self.edge.flights.epoch();
        let fwd = if stale.is_some() {
            Fwd::Stale
        } else {
            Fwd::Miss
        };
        let (outcome, items) = self
            .edge
            .fetch(&self.req, &self.base, fwd, stale, None)
            .await;
        self.edge.store(items, epoch, None);
        self.answer(&outcome, false)
    }

    /// Whether this request has the fetcher's values of the `Vary` names.
    fn same_variant(&self, vary: Option<&(Vec<String>, Vec<u8>)>) -> bool {
        vary.is_none_or(|(names, values)| self.req.vary_values(names) == *values)
    }

    fn answer(&self, outcome: &Outcome, collapsed: bool) -> Vec<u8> {
        match outcome {
            Outcome::Fresh(s) => {
                let status = CacheStatus {
                    fwd: Some(s.fwd),
                    fwd_status: Some(s.fwd_status),
                    stored: s.stored,
                    collapsed,
                    ..CacheStatus::default()
                };
                self.encode(&s.entry, &status)
            }
            Outcome::StaleOnError {
                entry, fwd_status, ..
            } => {
                self.edge.count(|s| s.stale_served += 1);
                let over = entry.age_ms(now_ms()).saturating_sub(entry.life.fresh_ms);
                let status = CacheStatus {
                    hit: true,
                    fwd: Some(Fwd::Stale),
                    fwd_status: *fwd_status,
                    ttl_s: Some(overdue(over)),
                    collapsed,
                    detail: Some("stale-if-error"),
                    ..CacheStatus::default()
                };
                self.encode(entry, &status)
            }
            Outcome::Failed { error, fwd } => {
                let status = CacheStatus {
                    fwd: Some(*fwd),
                    collapsed,
                    ..CacheStatus::default()
                };
                response::error(error.status(), error.message(), &status, self.keep_alive)
            }
            Outcome::Abandoned => {
                let status = CacheStatus::default();
                response::error(502, "origin fetch abandoned", &status, self.keep_alive)
            }
        }
    }

    fn encode(&self, entry: &Entry, status: &CacheStatus) -> Vec<u8> {
        let reply = Reply {
            keep_alive: self.keep_alive,
            head_only: self.head_only,
            if_none_match: self.req.header("if-none-match"),
        };
        response::encode(entry, entry.age_ms(now_ms()) / 1000, status, &reply)
    }

    fn renew_deadline(&self) {
        (self.renew)();
    }
}

/// Whether `stale` may stand in for a failed origin.
fn usable_on_error(stale: Option<&Entry>) -> bool {
    stale.is_some_and(|e| {
        matches!(
            e.life.classify(e.age_ms(now_ms())),
            Freshness::Fresh { .. } | Freshness::Stale { if_error: true, .. }
        )
    })
}

/// An entry's `Vary` names with `req`'s values of them.
fn vary_of(entry: &Entry, req: &ClientRequest) -> Option<(Vec<String>, Vec<u8>)> {
    match key::parse_vary(entry.header("vary")) {
        Vary::Names(names) => {
            let values = req.vary_values(&names);
            Some((names, values))
        }
        _ => None,
    }
}

impl CacheEdge {
    async fn lookup(&self, base: &[u8], req: &ClientRequest) -> Found {
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

    /// A decoded value; a foreign or corrupt one is a miss.
    async fn get(&self, key: &[u8]) -> Result<Option<Stored>, ()> {
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
    async fn fetch(
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
            req.forwarded(),
            validators,
        );
        self.count(|s| s.origin_requests += 1);
        let result = self.origin.fetch(request).await;
        self.count(|s| s.origin_connects = self.origin.connects());
        self.settle(req, base, fwd, stale, marker, result)
    }

    #[allow(clippy::too_many_arguments)] // the fetch's whole context, once
    fn settle(
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
        let authorized = req.header("authorization").is_some();
        let built = match &stale {
            Some(old) if fetched.status == 304 => {
                stored::revalidated(old, &fetched.headers, authorized, now, &self.defaults)
            }
            _ => {
                let r = OriginResponse {
                    status: fetched.status,
                    headers: &fetched.headers,
                    body: &fetched.body,
                };
                stored::from_origin(r, authorized, now, &self.defaults)
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
    fn store(self: &Rc<Self>, items: Vec<Item>, epoch: u64, guard: Option<FlightGuard>) {
        if items.is_empty() || self.flights.epoch() != epoch {
            return;
        }
        let edge = self.clone();
        monoio::spawn(async move {
            let result = edge.store.set(&items).await;
            let memory = edge.store.memory_bytes();
            edge.count(|s| {
                match &result {
                    Ok(bytes) => {
                        s.stores += items.len() as u64;
                        s.bytes_stored += bytes;
                    }
                    Err(_) => s.store_errors += 1,
                }
                if let Some(m) = memory {
                    s.memory_bytes = m;
                }
            });
            if let Err(e) = result {
                log!(Debug, "cache store write failed, not stored", error = e);
            }
            drop(guard);
        });
    }

    /// Serves nothing; refreshes `stale` from the origin once, in the
    /// background (no-op while a fetch of the key is in flight).
    fn refresh_in_background(
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
fn items(
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

/// `POST /cache/purge` with `Authorization: Bearer {token}`.
async fn purge(edge: &CacheEdge, inc: Incoming) -> Vec<u8> {
    let keep = inc.keep_alive;
    let json = |status: u16, body: serde_json::Value, extra: &[(&str, &str)]| {
        let body = body.to_string();
        http::response(
            status,
            "application/json",
            body.as_bytes(),
            keep,
            extra,
            false,
        )
    };
    let Some(token) = &edge.purge_token else {
        return json(404, serde_json::json!({ "error": "not found" }), &[]);
    };
    let req = ClientRequest::parse(&inc.head).ok();
    let auth = req.as_ref().and_then(|r| r.header("authorization"));
    if !purge::bearer_matches(auth, token.expose().as_bytes()) {
        log!(Info, "cache purge refused: missing or wrong bearer token");
        let body = serde_json::json!({ "error": "missing or wrong bearer token" });
        return json(401, body, &[("WWW-Authenticate", "Bearer")]);
    }
    let what = match purge::parse(&inc.body) {
        Ok(p) => p,
        Err(message) => return json(400, serde_json::json!({ "error": message }), &[]),
    };
    edge.flights.purged();
    let max = edge.purge_max_keys;
    let result = match &what {
        Purge::Key(target) => {
            let k = key::key_of_target(target);
            let mut variants = k.clone();
            variants.push(VARIANT_SEP);
            edge.store
                .delete(&k, &variants, max)
                .await
                .map(|n| (n, true))
        }
        Purge::Prefix(prefix) => {
            let k = key::base_key(prefix, "");
            edge.store.delete_prefix(&k, max).await
        }
    };
    let memory = edge.store.memory_bytes();
    match result {
        Ok((n, complete)) => {
            edge.count(|s| {
                s.purged += n as u64;
                if let Some(m) = memory {
                    s.memory_bytes = m;
                }
            });
            log!(
                Info,
                "cache purged",
                what = log::Dbg(&what),
                keys = n,
                complete = complete
            );
            json(
                200,
                serde_json::json!({ "purged": n, "complete": complete }),
                &[],
            )
        }
        Err(e) => {
            log!(
                Warn,
                "cache purge failed",
                what = log::Dbg(&what),
                error = e
            );
            json(
                503,
                serde_json::json!({ "error": "cache store unavailable" }),
                &[],
            )
        }
    }
}
