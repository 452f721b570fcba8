//! Subscribes of one worker waiting for a channel's owner worker to say
//! where the channel's history stands (`server::history::owner`): a
//! bounded table of waits, each with the waker of its subscribe.

use std::collections::HashMap;
use std::task::{Context, Poll, Waker};

/// Most subscribes of one worker waiting for an owner at once; more are
/// refused (`unavailable`) rather than queued.
pub const MAX_LOCATING: usize = 1024;

/// This worker's subscribes waiting for an owner's answer, by number.
#[derive(Default)]
pub struct Locating {
    next: u64,
    open: HashMap<u64, (bool, Option<Waker>)>,
}

impl Locating {
    /// A new wait's number; `None` when [`MAX_LOCATING`] wait already.
    pub fn open(&mut self) -> Option<u64> {
        if self.open.len() >= MAX_LOCATING {
            return None;
        }
        self.next += 1;
        self.open.insert(self.next, (false, None));
        Some(self.next)
    }

    /// The owner answered wait `id`: its subscribe is woken.
    pub fn answer(&mut self, id: u64) {
        if let Some((done, waker)) = self.open.get_mut(&id) {
            *done = true;
            if let Some(w) = waker.take() {
                w.wake();
            }
        }
    }

    /// Ready once wait `id` was answered (or is gone).
    pub fn poll(&mut self, id: u64, cx: &mut Context<'_>) -> Poll<()> {
        match self.open.get_mut(&id) {
            Some((false, waker)) => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    }

    /// Wait `id` ended (answered, timed out or dropped).
    pub fn close(&mut self, id: u64) {
        self.open.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_bounded_and_end_once_answered_or_closed() {
        let mut waits = Locating::default();
        let ids: Vec<u64> = (0..MAX_LOCATING)
            .map(|_| waits.open().expect("room"))
            .collect();
        assert_eq!(waits.open(), None, "past MAX_LOCATING");
        let mut cx = Context::from_waker(Waker::noop());
        assert!(waits.poll(ids[0], &mut cx).is_pending());
        waits.answer(ids[0]);
        assert!(waits.poll(ids[0], &mut cx).is_ready());
        assert!(waits.poll(ids[1], &mut cx).is_pending());
        waits.close(ids[1]);
        assert!(
            waits.poll(ids[1], &mut cx).is_ready(),
            "closed: nothing to wait for"
        );
        assert!(waits.open().is_some(), "a closed wait frees room");
    }
}
