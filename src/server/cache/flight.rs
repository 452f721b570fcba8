//! Request coalescing: at most one origin fetch per key and worker is in
//! flight; concurrent requests for the key wait for its outcome.
//!
//! A flight stays in the map after it completes until its entry has been
//! written to the store: a request whose Redis `GET` missed just before
//! the `SET` landed finds the finished flight instead of fetching again.
//!
//! That alone is not enough: the `GET`'s "miss" may be handled after the
//! `SET`'s acknowledgement (both replies arrive in one read, and the tasks
//! run in any order), when the flight has already left the map. So a
//! lookup holds a [`Lookup`] ticket while it waits on the store, and a
//! flight that ends while any ticket older than its end is held is kept
//! as *retired*: a ticket whose store lookup missed finds it there.
//!
//! A lookup the store did not answer (`--cache-redis-timeout`, typically a
//! worker too busy to read Redis' reply in time) cannot tell whether the
//! entry is stored: it uses a flight of its key that ended within the last
//! `keep` (a second, or twice the store timeout if longer) instead of fetching again.
//!
//! The retired set is bounded by time: it holds the flights that ended in
//! the last `keep`, plus those that ended during a lookup still in progress
//! (itself bounded by the store timeout).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use crate::cache::entry::Entry;
use crate::cache::now_ms;
use crate::cache::policy::Freshness;
use crate::cache::response::Fwd;

use super::claim::Claim;
use super::origin::FetchError;

/// What an origin fetch came to, shared by the fetcher and its waiters.
#[derive(Debug)]
pub enum Outcome {
    /// A response to serve (from the origin, or stored and revalidated).
    Fresh(Served),
    /// The origin failed; the stale entry is served (stale-if-error).
    StaleOnError {
        /// The stale entry.
        entry: Rc<Entry>,
        /// The origin's error status, if it answered at all.
        fwd_status: Option<u16>,
        /// As [`Served::vary`]: the entry is the fetcher's variant.
        vary: Option<(Vec<String>, Vec<u8>)>,
    },
    /// The origin failed and nothing stored can stand in.
    Failed {
        /// Why.
        error: FetchError,
        /// Why the request went forward.
        fwd: Fwd,
    },
    /// The fetch was dropped before it finished (the worker is stopping).
    Abandoned,
}

/// A response fetched for one request, and whether others may have it.
#[derive(Debug)]
pub struct Served {
    /// The response.
    pub entry: Rc<Entry>,
    /// Why it went forward.
    pub fwd: Fwd,
    /// The origin's status (304 when it revalidated a stored response).
    pub fwd_status: u16,
    /// It is being stored.
    pub stored: bool,
    /// It may be handed to other requests (not private, no cookies...).
    pub shareable: bool,
    /// Its `Vary` names and the fetching request's values of them: a
    /// waiter whose values differ fetches for itself.
    pub vary: Option<(Vec<String>, Vec<u8>)>,
}

/// One fetch in flight.
#[derive(Debug, Default)]
pub struct Flight {
    outcome: RefCell<Option<Rc<Outcome>>>,
    wakers: RefCell<Vec<Waker>>,
    /// Its store write failed or was skipped: the store does not hold it.
    unwritten: Cell<bool>,
    /// A background (stale-while-revalidate) refresh: a request that has
    /// a usable stale entry does not wait for it.
    pub background: bool,
}

impl Flight {
    /// Whether a request arriving now may take this flight's answer: while
    /// it is under way, yes; once it finished (it lingers only to bridge
    /// its store write), only a response being stored and still fresh —
    /// anything else a late arrival fetches for itself, as it would after
    /// the flight were gone.
    fn joinable(&self) -> bool {
        match self.outcome.borrow().as_deref() {
            None => true,
            Some(Outcome::Fresh(s)) => {
                s.stored
                    && s.shareable
                    && matches!(
                        s.entry.life.classify(s.entry.age_ms(now_ms())),
                        Freshness::Fresh { .. }
                    )
            }
            Some(_) => false,
        }
    }

    /// Publishes the outcome and wakes every waiter (once).
    pub fn complete(&self, outcome: Rc<Outcome>) {
        if self.outcome.borrow().is_some() {
            return;
        }
        *self.outcome.borrow_mut() = Some(outcome);
        for w in self.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// The outcome, once there is one.
    pub fn outcome(&self) -> Option<Rc<Outcome>> {
        self.outcome.borrow().clone()
    }

    /// Whether it ended with a response that is being stored.
    fn stored(&self) -> bool {
        !self.unwritten.get()
            && matches!(self.outcome.borrow().as_deref(), Some(Outcome::Fresh(s)) if s.stored)
    }

    /// Waits for the outcome.
    pub async fn wait(&self) -> Rc<Outcome> {
        poll_fn(|cx| match &*self.outcome.borrow() {
            Some(o) => Poll::Ready(o.clone()),
            None => {
                let mut wakers = self.wakers.borrow_mut();
                if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        })
        .await
    }
}

/// A flight out of the map: its `ended` number, and it.
type Retired = (u64, Rc<Flight>);

/// The flights of one worker, by base key.
#[derive(Default)]
pub struct Flights {
    map: RefCell<HashMap<Vec<u8>, Rc<Flight>>>,
    /// Bumped by every purge: fetches started before it do not store.
    epoch: Cell<u64>,
    /// Several workers sharing the memory store: bumped by a purge on any
    /// of them (added to `epoch`).
    shared_epoch: RefCell<Option<Arc<AtomicU64>>>,
    /// Bumped each time a flight leaves the map.
    ended: Cell<u64>,
    /// Lookups in progress, by the `ended` count when they began.
    lookups: RefCell<BTreeMap<u64, usize>>,
    /// Flights that left the map while an older lookup was in progress:
    /// key → (its `ended` number, the flight), newest per key.
    retired: RefCell<HashMap<Vec<u8>, Retired>>,
    /// `retired`'s keys in the order they ended (and when), for pruning.
    retired_order: RefCell<VecDeque<(u64, Instant, Vec<u8>)>>,
    /// How long an ended flight stands in for a store that did not answer.
    keep: Duration,
}

/// Held while a store lookup is in progress: flights that end meanwhile
/// stay findable through [`Lookup::ended_since`].
pub struct Lookup {
    flights: Rc<Flights>,
    began: u64,
}

impl Lookup {
    /// A flight for `key` that ended since this lookup began: its answer
    /// is at least as fresh as the miss the store gave.
    pub fn ended_since(&self, key: &[u8]) -> Option<Rc<Flight>> {
        let retired = self.flights.retired.borrow();
        retired
            .get(key)
            .filter(|(n, _)| *n > self.began)
            .map(|(_, f)| f.clone())
    }

    /// A flight for `key` that ended within the last `keep` with a
    /// response it stored (or whose write timed out: it may have landed),
    /// for a lookup the store did not answer.
    pub fn ended_recently(&self, key: &[u8]) -> Option<Rc<Flight>> {
        self.flights.prune();
        let retired = self.flights.retired.borrow();
        retired
            .get(key)
            .filter(|(_, f)| f.stored())
            .map(|(_, f)| f.clone())
    }
}

impl Drop for Lookup {
    fn drop(&mut self) {
        let mut lookups = self.flights.lookups.borrow_mut();
        if let Some(n) = lookups.get_mut(&self.began) {
            *n -= 1;
            if *n == 0 {
                lookups.remove(&self.began);
            }
        }
        drop(lookups);
        self.flights.prune();
    }
}

impl Flights {
    /// The flight for `key` a request may join; background ones only if
    /// `any`.
    pub fn get(&self, key: &[u8], any: bool) -> Option<Rc<Flight>> {
        self.map
            .borrow()
            .get(key)
            .filter(|f| (any || !f.background) && f.joinable())
            .cloned()
    }

    /// Starts a flight for `key`; the guard ends it.
    pub fn begin(self: &Rc<Self>, key: Vec<u8>, background: bool) -> FlightGuard {
        let flight = Rc::new(Flight {
            background,
            ..Flight::default()
        });
        self.map.borrow_mut().insert(key.clone(), flight.clone());
        FlightGuard {
            flights: self.clone(),
            key,
            flight,
            epoch: self.epoch(),
            claim: None,
        }
    }

    /// Flights whose ended ones stand in for an unanswered store for
    /// `keep` (see the module docs).
    pub fn new(keep: Duration) -> Flights {
        Flights {
            keep,
            ..Flights::default()
        }
    }

    /// Marks the start of a store lookup (see [`Lookup`]).
    pub fn lookup(self: &Rc<Self>) -> Lookup {
        let began = self.ended.get();
        *self.lookups.borrow_mut().entry(began).or_insert(0) += 1;
        Lookup {
            flights: self.clone(),
            began,
        }
    }

    /// Takes `flight` out of the map; keeps it retired while a lookup that
    /// began before now is in progress.
    fn end(&self, key: &[u8], flight: &Rc<Flight>) {
        let mut map = self.map.borrow_mut();
        if !map.get(key).is_some_and(|f| Rc::ptr_eq(f, flight)) {
            return;
        }
        map.remove(key);
        drop(map);
        let n = self.ended.get() + 1;
        self.ended.set(n);
        self.prune();
        if self.lookups.borrow().is_empty() && self.keep.is_zero() {
            return;
        }
        self.retired
            .borrow_mut()
            .insert(key.to_vec(), (n, flight.clone()));
        let now = Instant::now();
        self.retired_order
            .borrow_mut()
            .push_back((n, now, key.to_vec()));
    }

    /// Forgets retired flights nobody can need: ended more than `keep` ago
    /// and before the oldest lookup in progress began.
    fn prune(&self) {
        let oldest = self.lookups.borrow().keys().next().copied();
        let now = Instant::now();
        let mut order = self.retired_order.borrow_mut();
        let mut retired = self.retired.borrow_mut();
        while let Some((n, at, _)) = order.front() {
            let needed = oldest.is_some_and(|began| *n > began);
            if needed || now.duration_since(*at) < self.keep {
                break;
            }
            let (n, _, key) = order.pop_front().expect("checked");
            if retired.get(&key).is_some_and(|(m, _)| *m == n) {
                retired.remove(&key);
            }
        }
    }

    /// Counts the purges of every worker that shares `epoch` too.
    pub fn share_epoch(&self, epoch: Arc<AtomicU64>) {
        *self.shared_epoch.borrow_mut() = Some(epoch);
    }

    /// The purge epoch: a fetch stores only if it is unchanged.
    pub fn epoch(&self) -> u64 {
        let shared = self.shared_epoch.borrow();
        let others = shared.as_ref().map_or(0, |e| e.load(Ordering::Acquire));
        self.epoch.get().wrapping_add(others)
    }

    /// A purge happened: fetches in flight must not store what they get
    /// (on every worker sharing the epoch).
    pub fn purged(&self) {
        if let Some(e) = &*self.shared_epoch.borrow() {
            e.fetch_add(1, Ordering::AcqRel);
        }
        self.epoch.set(self.epoch.get() + 1);
        // What ended before the purge must not stand in for the store.
        self.retired.borrow_mut().clear();
    }

    /// Flights in the map.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.borrow().len()
    }

    /// Whether no flight is in the map.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.map.borrow().is_empty()
    }
}

/// Owns a flight: completes it (as abandoned if nothing else did) and
/// takes it out of the map when dropped.
pub struct FlightGuard {
    flights: Rc<Flights>,
    key: Vec<u8>,
    flight: Rc<Flight>,
    epoch: u64,
    /// The process-wide claim on the key (several workers), released
    /// with the guard: once the response is stored.
    claim: Option<Claim>,
}

impl FlightGuard {
    /// Holds `claim` until the flight ends.
    pub fn hold(&mut self, claim: Option<Claim>) {
        self.claim = claim;
    }

    /// Publishes the outcome to the waiters.
    pub fn complete(&self, outcome: Rc<Outcome>) {
        self.flight.complete(outcome);
    }

    /// Its store write failed (not just timed out: that one may land) or
    /// was skipped: it must not stand in for the store.
    pub fn unwritten(&self) {
        self.flight.unwritten.set(true);
    }

    /// The purge epoch when the flight began.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        self.flight.complete(Rc::new(Outcome::Abandoned));
        self.flights.end(&self.key, &self.flight);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::Context;

    struct Counter(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counter {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn waiters_get_the_outcome_and_guards_clean_up() {
        let flights = Rc::new(Flights::default());
        let guard = flights.begin(b"k".to_vec(), false);
        let flight = flights.get(b"k", false).expect("registered");
        assert!(flights.get(b"k", true).is_some());
        let woken = std::sync::Arc::new(Counter(Default::default()));
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut wait = pin!(flight.wait());
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert_eq!(flight.wakers.borrow().len(), 1, "one waker per waiter");
        guard.complete(Rc::new(Outcome::Abandoned));
        assert_eq!(woken.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        let done = wait.as_mut().poll(&mut cx);
        assert!(matches!(done, Poll::Ready(o) if matches!(*o, Outcome::Abandoned)));
        assert_eq!(flights.len(), 1, "lingers until the guard goes");
        assert!(
            flights.get(b"k", true).is_none(),
            "a finished flight without a fresh stored answer is not joined"
        );
        drop(guard);
        assert!(flights.is_empty());
    }

    #[test]
    fn background_flights_are_skipped_unless_asked_and_purges_block_stores() {
        let flights = Rc::new(Flights::default());
        let guard = flights.begin(b"k".to_vec(), true);
        assert!(flights.get(b"k", false).is_none());
        assert!(flights.get(b"k", true).is_some());
        assert_eq!(guard.epoch(), flights.epoch());
        flights.purged();
        assert_ne!(guard.epoch(), flights.epoch());
        // A newer flight for the key is not removed by an older guard.
        let newer = flights.begin(b"k".to_vec(), false);
        drop(guard);
        assert!(flights.get(b"k", false).is_some());
        drop(newer);
        assert!(flights.is_empty());
    }

    #[test]
    fn a_lookup_finds_flights_that_ended_since_it_began_and_no_others() {
        let flights = Rc::new(Flights::default());
        let before = flights.begin(b"old".to_vec(), false);
        drop(before);
        assert!(flights.retired.borrow().is_empty(), "no lookup: not kept");
        let lookup = flights.lookup();
        let guard = flights.begin(b"k".to_vec(), false);
        guard.complete(Rc::new(Outcome::Abandoned));
        drop(guard);
        assert!(flights.get(b"k", true).is_none(), "out of the map");
        assert!(lookup.ended_since(b"k").is_some(), "still findable");
        assert!(lookup.ended_since(b"old").is_none());
        let later = flights.lookup();
        assert!(later.ended_since(b"k").is_none(), "ended before it began");
        drop(lookup);
        assert!(flights.retired.borrow().is_empty(), "pruned");
        drop(later);
        assert!(flights.retired_order.borrow().is_empty());
        assert!(flights.lookups.borrow().is_empty());
    }

    fn stored_outcome() -> Outcome {
        let entry = Entry {
            status: 200,
            date_ms: 0,
            life: Default::default(),
            etag: None,
            etag_from_origin: false,
            headers: Vec::new(),
            body: bytes::Bytes::from_static(b"body"),
        };
        Outcome::Fresh(Served {
            entry: Rc::new(entry),
            fwd: Fwd::Miss,
            fwd_status: 200,
            stored: true,
            shareable: true,
            vary: None,
        })
    }

    #[test]
    fn an_unanswered_lookup_finds_flights_that_ended_within_keep() {
        let flights = Rc::new(Flights::new(Duration::from_secs(60)));
        drop(flights.begin(b"unstored".to_vec(), false));
        let guard = flights.begin(b"k".to_vec(), false);
        guard.complete(Rc::new(stored_outcome()));
        drop(guard);
        let lost = flights.begin(b"lost".to_vec(), false);
        lost.complete(Rc::new(stored_outcome()));
        lost.unwritten();
        drop(lost);
        let lookup = flights.lookup();
        assert!(lookup.ended_recently(b"unstored").is_none(), "abandoned");
        assert!(lookup.ended_recently(b"lost").is_none(), "write failed");
        assert!(lookup.ended_since(b"k").is_none(), "ended before it began");
        assert!(lookup.ended_recently(b"k").is_some(), "within keep");
        assert!(lookup.ended_recently(b"other").is_none());
        flights.purged();
        assert!(lookup.ended_recently(b"k").is_none(), "a purge forgets it");
    }

    #[test]
    fn a_purge_on_one_worker_changes_every_sharing_workers_epoch() {
        let shared = Arc::new(AtomicU64::new(0));
        let (a, b) = (Rc::new(Flights::default()), Rc::new(Flights::default()));
        a.share_epoch(shared.clone());
        b.share_epoch(shared);
        let guard = b.begin(b"k".to_vec(), false);
        assert_eq!(guard.epoch(), b.epoch());
        a.purged();
        assert_ne!(guard.epoch(), b.epoch(), "b's fetch must not store");
        let again = b.begin(b"j".to_vec(), false);
        assert_eq!(again.epoch(), b.epoch());
    }
}
