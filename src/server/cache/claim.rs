//! Coalescing across workers (several workers sharing the memory store):
//! the fetch of a cold key is claimed in one table for the process, so a
//! request on another worker waits for that fetch to be stored instead of
//! fetching too.
//!
//! Within a worker, `flight` coalesces with the response itself; across
//! workers a request waits for the claim to be released and then reads
//! the store (a response that was not stored — not cacheable, failed —
//! sends it to the origin itself, as an unusable flight does). The table
//! is locked on a miss only (never on a hit, never per message); a
//! release wakes the waiting workers with a hop (`Hop::CacheReleased`),
//! since a task's waker belongs to its worker's thread.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};

/// The process's table of keys being fetched, and by which worker.
pub type SharedClaims = Arc<Mutex<HashMap<Vec<u8>, usize>>>;

/// Tells the other workers that a key's fetch is over.
pub type Release = Rc<dyn Fn(&[u8])>;

/// One worker's side of the table: its index, the release hop, and its
/// requests waiting for another worker's fetch.
#[derive(Default)]
pub struct Claims {
    shared: RefCell<Option<(SharedClaims, usize, Release)>>,
    waiting: RefCell<HashMap<Vec<u8>, Vec<Waker>>>,
}

/// A claim on a key's fetch: released (and the waiters told) when
/// dropped — after the response was stored.
pub struct Claim {
    claims: Rc<Claims>,
    key: Vec<u8>,
}

impl Claims {
    /// Joins the process's table as worker `me`; `release` reaches the
    /// other workers.
    pub fn share(&self, table: SharedClaims, me: usize, release: Release) {
        *self.shared.borrow_mut() = Some((table, me, release));
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<Vec<u8>, usize>, usize) -> T) -> Option<T> {
        let shared = self.shared.borrow();
        let (table, me, _) = shared.as_ref()?;
        let mut t = table.lock().unwrap_or_else(PoisonError::into_inner);
        Some(f(&mut t, *me))
    }

    /// Claims `key` for this worker: `Ok(None)` without a shared table or
    /// when this worker holds the claim already (its flight coalesces),
    /// `Err(())` while another worker fetches it.
    pub fn claim(self: &Rc<Self>, key: &[u8]) -> Result<Option<Claim>, ()> {
        let claimed = self.with(|t, me| match t.get(key) {
            Some(w) if *w != me => Err(()),
            Some(_) => Ok(false),
            None => {
                t.insert(key.to_vec(), me);
                Ok(true)
            }
        });
        match claimed {
            None | Some(Ok(false)) => Ok(None),
            Some(Err(())) => Err(()),
            Some(Ok(true)) => Ok(Some(Claim {
                claims: self.clone(),
                key: key.to_vec(),
            })),
        }
    }

    /// Ready once no other worker fetches `key` (the caller bounds the
    /// wait). A release on another thread between the check and the
    /// registration still wakes this task: its hop is taken on this
    /// worker's thread, after this poll.
    pub async fn released(&self, key: &[u8]) {
        poll_fn(|cx| {
            let elsewhere = self.with(|t, me| t.get(key).is_some_and(|w| *w != me));
            let mut waiting = self.waiting.borrow_mut();
            if elsewhere != Some(true) {
                if let Some(wakers) = waiting.get_mut(key) {
                    wakers.retain(|w| !w.will_wake(cx.waker()));
                    if wakers.is_empty() {
                        waiting.remove(key);
                    }
                }
                return Poll::Ready(());
            }
            let wakers = waiting.entry(key.to_vec()).or_default();
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }

    /// Another worker released `key`: its waiters here look again.
    pub fn wake(&self, key: &[u8]) {
        let woken = self.waiting.borrow_mut().remove(key);
        for w in woken.into_iter().flatten() {
            w.wake();
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.claims.with(|t, _| t.remove(&self.key));
        let release = self.claims.shared.borrow().as_ref().map(|s| s.2.clone());
        if let Some(release) = release {
            release(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::future::Future;
    use std::pin::pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Wake};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_key_is_claimed_once_per_process_and_its_release_wakes_the_waiters() {
        let table = SharedClaims::default();
        let released = Rc::new(Cell::new(0));
        let (a, b) = (Rc::new(Claims::default()), Rc::new(Claims::default()));
        let told = released.clone();
        a.share(
            table.clone(),
            0,
            Rc::new(move |_: &[u8]| told.set(told.get() + 1)),
        );
        b.share(table.clone(), 1, Rc::new(|_: &[u8]| {}));
        let claim = a.claim(b"k").unwrap().expect("a shared table");
        assert!(b.claim(b"k").is_err(), "the other worker waits");
        assert!(a.claim(b"k").unwrap().is_none(), "held here already");
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = count.clone().into();
        let mut cx = Context::from_waker(&waker);
        let mut wait = pin!(b.released(b"k"));
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        drop(claim);
        assert_eq!(released.get(), 1, "the other workers are told");
        b.wake(b"k");
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(wait.as_mut().poll(&mut cx).is_ready());
        assert!(b.waiting.borrow().is_empty(), "no waker left behind");
        assert!(b.claim(b"k").unwrap().is_some(), "free again");
        assert!(Rc::new(Claims::default()).claim(b"k").unwrap().is_none());
    }
}
