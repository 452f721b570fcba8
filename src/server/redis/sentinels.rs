//! A Sentinel link's state: the Sentinels' URL, why no master is known,
//! and the requests for a read that the `sentinel` tasks serve (a
//! connection error, a `ROLE` that is not `master`, a `+switch-master`).

use std::cell::{Cell, RefCell};
use std::task::{Context, Poll, Waker};

use crate::redis::sentinel::SentinelUrl;

/// A link's Sentinel state.
pub(super) struct Sentinels {
    pub(super) url: SentinelUrl,
    /// Why no master is known (or the last read failed), for `/readyz`.
    pub(super) error: RefCell<Option<String>>,
    due: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Sentinels {
    pub(super) fn new(url: SentinelUrl) -> Sentinels {
        Sentinels {
            url,
            error: RefCell::new(None),
            due: Cell::new(true),
            waker: RefCell::new(None),
        }
    }

    /// Asks `run` for a read now.
    pub(super) fn refresh(&self) {
        self.due.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    pub(super) fn poll_due(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.due.replace(false) {
            return Poll::Ready(());
        }
        *self.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The `/readyz` reason while no master is known.
    pub(super) fn unknown_reason(&self) -> String {
        let e = self.error.borrow();
        let e = e.as_deref().unwrap_or("asking the Sentinels");
        format!(
            "redis sentinel: no master known for {}: {e}",
            self.url.master
        )
    }
}
