//! Request coalescing: at most one origin fetch per key and worker is in
//! flight; concurrent requests for the key wait for its outcome.
//!
//! A flight stays in the map after it completes until its entry has been
//! written to the store: a request whose Redis `GET` missed just before
//! the `SET` landed finds the finished flight instead of fetching again.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::cache::entry::Entry;
use crate::cache::now_ms;
use crate::cache::policy::Freshness;
use crate::cache::response::Fwd;

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

/// The flights of one worker, by base key.
#[derive(Default)]
pub struct Flights {
    map: RefCell<HashMap<Vec<u8>, Rc<Flight>>>,
    /// Bumped by every purge: fetches started before it do not store.
    epoch: Cell<u64>,
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
            epoch: self.epoch.get(),
        }
    }

    /// The purge epoch: a fetch stores only if it is unchanged.
    pub fn epoch(&self) -> u64 {
        self.epoch.get()
    }

    /// A purge happened: fetches in flight must not store what they get.
    pub fn purged(&self) {
        self.epoch.set(self.epoch.get() + 1);
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
}

impl FlightGuard {
    /// Publishes the outcome to the waiters.
    pub fn complete(&self, outcome: Rc<Outcome>) {
        self.flight.complete(outcome);
    }

    /// The purge epoch when the flight began.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        self.flight.complete(Rc::new(Outcome::Abandoned));
        let mut map = self.flights.map.borrow_mut();
        if map
            .get(&self.key)
            .is_some_and(|f| Rc::ptr_eq(f, &self.flight))
        {
            map.remove(&self.key);
        }
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
}
