//! Requests of one worker waiting for another worker's answer (a
//! channel's owner: where its history stands, whether a user may join its
//! presence, its members): a bounded table of waits, each with the waker
//! of the task that waits and, once it came, the answer. Sans-I/O.

use std::cell::RefCell;
use std::collections::HashMap;
use std::task::{Context, Poll, Waker};

/// Most requests of one worker waiting for answers at once; more are
/// refused (`unavailable`) rather than queued.
pub const MAX_WAITING: usize = 1024;

/// One worker's waits, by number, answered with a `T`.
pub struct Waits<T> {
    next: u64,
    open: HashMap<u64, (Option<T>, Option<Waker>)>,
}

impl<T> Default for Waits<T> {
    fn default() -> Self {
        Waits {
            next: 0,
            open: HashMap::new(),
        }
    }
}

impl<T> Waits<T> {
    /// A new wait's number; `None` when [`MAX_WAITING`] wait already.
    pub fn open(&mut self) -> Option<u64> {
        if self.open.len() >= MAX_WAITING {
            return None;
        }
        self.next += 1;
        self.open.insert(self.next, (None, None));
        Some(self.next)
    }

    /// The answer to wait `id` came: its task is woken (dropped if the
    /// wait ended already).
    pub fn answer(&mut self, id: u64, answer: T) {
        if let Some((slot, waker)) = self.open.get_mut(&id) {
            *slot = Some(answer);
            if let Some(w) = waker.take() {
                w.wake();
            }
        }
    }

    /// Wait `id`'s answer once it came (the wait ends); `None` inside
    /// `Ready` when the wait is gone.
    pub fn poll(&mut self, id: u64, cx: &mut Context<'_>) -> Poll<Option<T>> {
        match self.open.get_mut(&id) {
            Some((None, waker)) => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
            Some((Some(_), _)) => Poll::Ready(self.open.remove(&id).and_then(|e| e.0)),
            None => Poll::Ready(None),
        }
    }

    /// Wait `id` ended (answered, timed out or dropped).
    pub fn close(&mut self, id: u64) {
        self.open.remove(&id);
    }
}

/// Ends wait `id` of a table however the request that waits ends (its
/// answer taken, a timeout, the task dropped).
pub struct Opened<'a, T>(pub &'a RefCell<Waits<T>>, pub u64);

impl<T> Drop for Opened<'_, T> {
    fn drop(&mut self) {
        self.0.borrow_mut().close(self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_bounded_and_end_once_answered_or_closed() {
        let mut waits = Waits::<u8>::default();
        let ids: Vec<u64> = (0..MAX_WAITING)
            .map(|_| waits.open().expect("room"))
            .collect();
        assert_eq!(waits.open(), None, "past MAX_WAITING");
        let mut cx = Context::from_waker(Waker::noop());
        assert!(waits.poll(ids[0], &mut cx).is_pending());
        waits.answer(ids[0], 7);
        assert_eq!(waits.poll(ids[0], &mut cx), Poll::Ready(Some(7)));
        assert!(waits.poll(ids[1], &mut cx).is_pending());
        waits.close(ids[1]);
        assert_eq!(waits.poll(ids[1], &mut cx), Poll::Ready(None), "closed");
        assert!(waits.open().is_some(), "an ended wait frees room");
    }
}
