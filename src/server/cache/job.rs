//! One cacheable request being served: follow a fetch in flight, use a
//! stored response, or fetch (alone or joining others), and answer.

use std::rc::Rc;

use crate::cache::entry::{Entry, VaryMarker};
use crate::cache::now_ms;
use crate::cache::policy::Freshness;
use crate::cache::request::ClientRequest;
use crate::cache::response::{self, Answer, CacheStatus, Fwd, Reply};

use super::edge::{usable_on_error, CacheEdge, Found};
use super::flight::{Flight, Outcome};

/// Remaining freshness in whole seconds (RFC 9211 `ttl`).
fn secs(ms: u64) -> i64 {
    i64::try_from(ms / 1000).unwrap_or(i64::MAX)
}

/// `ttl` of a stale response: negative, rounded away from zero so a
/// response stale by 300 ms (or by 0 ms: stale at the exact instant its
/// lifetime ends) does not read `ttl=0`.
fn overdue(ms: u64) -> i64 {
    -i64::try_from(ms.div_ceil(1000).max(1)).unwrap_or(i64::MAX)
}

/// One cacheable request being served.
pub(super) struct Job<'a> {
    pub(super) renew: &'a dyn Fn(),
    pub(super) edge: &'a Rc<CacheEdge>,
    pub(super) req: Rc<ClientRequest>,
    pub(super) base: Vec<u8>,
    pub(super) keep_alive: bool,
    pub(super) head_only: bool,
}

impl Job<'_> {
    pub(super) async fn serve(&self) -> Answer {
        if self.edge.is_personal(&self.req) {
            return self.bypass().await;
        }
        // A foreground fetch of this key is under way: its answer is at
        // least as fresh as anything stored, so skip the lookup.
        if let Some(f) = self.edge.flights.get(&self.base, false) {
            return self.join(f, None).await;
        }
        let lookup = self.edge.flights.lookup();
        let found = self.edge.lookup(&self.base, &self.req).await;
        // A miss may be older than a fetch that ended (and stored) while
        // the store was being asked: that fetch's answer is the one to use.
        // One the store did not answer may be one it holds: a fetch that
        // ended moments ago stands in for it.
        let ended = match found {
            Found::Missing { .. } => lookup.ended_since(&self.base),
            Found::Unavailable => lookup
                .ended_since(&self.base)
                .or_else(|| lookup.ended_recently(&self.base)),
            Found::Entry { .. } => None,
        };
        if let Some(f) = ended.filter(|f| self.may_use(f)) {
            return self.join(f, None).await;
        }
        drop(lookup);
        match found {
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

    async fn use_stored(&self, entry: Rc<Entry>, marker: Option<VaryMarker>) -> Answer {
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

    /// A personal request (`Cookie`, `Authorization`): never answered from
    /// the cache or from another request's fetch, and its own fetch is
    /// never joined; its response is stored only if the origin said it may
    /// be shared (`public`, `s-maxage`), decided in `settle`.
    async fn bypass(&self) -> Answer {
        self.edge.count(|s| s.bypassed += 1);
        self.renew_deadline();
        let epoch = self.edge.flights.epoch();
        let (outcome, items) = self
            .edge
            .fetch(&self.req, &self.base, Fwd::Bypass, None, None)
            .await;
        self.edge.store(items, epoch, None);
        self.answer(&outcome, false)
    }

    /// Waits for the fetch in flight, or becomes it.
    async fn fetch_or_join(
        &self,
        fwd: Fwd,
        stale: Option<Rc<Entry>>,
        marker: Option<VaryMarker>,
    ) -> Answer {
        if let Some(f) = self.edge.flights.get(&self.base, true) {
            return self.join(f, stale).await;
        }
        let claim = match self.edge.claims.claim(&self.base) {
            // Another worker's fetch may have stored it since this
            // request's lookup (and released its claim).
            Ok(Some(claim)) => match self.fresh_in_store().await {
                Some(answer) => return answer,
                None => Some(claim),
            },
            Ok(None) => None,
            Err(()) => match self.after_other_worker().await {
                Some(answer) => return answer,
                None => None,
            },
        };
        self.edge.count(|s| s.misses += 1);
        let mut guard = self.edge.flights.begin(self.base.clone(), false);
        guard.hold(claim);
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

    /// Another worker fetches this key: waits (bounded, as for a flight)
    /// for its response to be stored, and serves it; `None` when it was
    /// not stored fresh (this request then fetches, unclaimed).
    async fn after_other_worker(&self) -> Option<Answer> {
        self.renew_deadline();
        let released = self.edge.claims.released(&self.base);
        let _ = monoio::time::timeout(self.edge.coalesce_timeout, released).await;
        self.fresh_in_store().await
    }

    /// The store's fresh response for this request, served as collapsed
    /// into another worker's fetch.
    async fn fresh_in_store(&self) -> Option<Answer> {
        let Found::Entry { entry, .. } = self.edge.lookup(&self.base, &self.req).await else {
            return None;
        };
        let Freshness::Fresh { left_ms } = entry.life.classify(entry.age_ms(now_ms())) else {
            return None;
        };
        self.edge.count(|s| s.coalesced_waiters += 1);
        let status = CacheStatus {
            hit: true,
            ttl_s: Some(secs(left_ms)),
            collapsed: true,
            ..CacheStatus::default()
        };
        Some(self.encode(&entry, &status))
    }

    /// Waits (bounded) for another request's fetch; falls back to its own
    /// when that answer is not for this request or takes too long.
    async fn join(&self, flight: Rc<Flight>, stale: Option<Rc<Entry>>) -> Answer {
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

    /// Whether an ended flight's response can stand in for the store: it
    /// was stored and shared, and is this request's variant (otherwise the
    /// request goes on as the miss it got, keeping its `Vary` marker).
    fn may_use(&self, flight: &Flight) -> bool {
        flight.outcome().is_some_and(|o| {
            matches!(&*o, Outcome::Fresh(s)
                if s.stored && s.shareable && self.same_variant(s.vary.as_ref()))
        })
    }

    /// Whether this request has the fetcher's values of the `Vary` names.
    fn same_variant(&self, vary: Option<&(Vec<String>, Vec<u8>)>) -> bool {
        vary.is_none_or(|(names, values)| self.req.vary_values(names) == *values)
    }

    fn answer(&self, outcome: &Outcome, collapsed: bool) -> Answer {
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
                response::error(error.status(), error.message(), &status, self.keep_alive).into()
            }
            Outcome::Abandoned => {
                let status = CacheStatus::default();
                response::error(502, "origin fetch abandoned", &status, self.keep_alive).into()
            }
        }
    }

    fn encode(&self, entry: &Entry, status: &CacheStatus) -> Answer {
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

#[cfg(test)]
mod tests {
    use super::overdue;

    #[test]
    fn a_stale_ttl_is_always_negative() {
        assert_eq!(overdue(0), -1, "stale at the boundary");
        assert_eq!(overdue(300), -1);
        assert_eq!(overdue(1000), -1);
        assert_eq!(overdue(1001), -2);
    }
}
