//! Publishers' back-pressure: while a connection holds more than
//! `--max-outbound-queue` unwritten, publishers wait (bounded: the
//! connection drains or the sweep cuts it).

use std::task::{Context, Poll, Waker};

use super::Hub;

impl Hub {
    /// Whether publishers should pause: an open connection has more than
    /// `--max-outbound-queue` unwritten. It either drains (its writes
    /// progress) or is cut by the sweep once they stall for the grace
    /// period, so the pause is bounded; a publisher's burst slows the
    /// publisher (TCP flow control) instead of cutting its subscribers.
    pub fn pressed(&self) -> bool {
        self.totals.pressing > 0
    }

    /// A publisher's wait: ready once no connection is over its bound.
    pub fn poll_unpressed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.totals.pressing == 0 {
            return Poll::Ready(());
        }
        let waiters = &mut self.totals.waiters;
        if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
            // Wakers of readers that ended stay until the pause ends;
            // bound them through a long pause by waking everyone (the
            // live ones wait again) when they outnumber the connections.
            if waiters.len() >= 2 * self.conns.len().max(16) {
                waiters.drain(..).for_each(Waker::wake);
            }
            waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
