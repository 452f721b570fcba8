//! Parking as the hub sees it: whether a connection is quiet enough, and
//! the hand-over between its writer and the edge's park waker (the edge
//! keeps the socket; see `server::conn::park`).

use std::marker::PhantomData;
use std::task::Waker;

use super::conn::{self, Conn, ConnKind, ConnState, Pace};

/// The waker that stands in for a parked connection's writer. It names
/// the connection by id only and wakes through the *calling* thread's
/// list of woken connections (`server::conn::park`): woken on another thread,
/// the wake-up would land in that thread's list and be lost. So it is
/// `!Send` and `!Sync` (the raw-pointer marker): the compiler keeps it on
/// the worker thread that made it, and the hub that stores it is `!Send`
/// as well (its channel names are `Rc<str>`).
///
/// ```compile_fail
/// fn to_another_thread<T: Send>(_: T) {}
/// let w = corecast::hub::LocalWaker::new(std::task::Waker::noop().clone());
/// to_another_thread(w);
/// ```
pub struct LocalWaker {
    waker: Waker,
    _this_thread: PhantomData<*const ()>,
}

impl LocalWaker {
    /// Wraps a waker that must only be woken on this thread.
    pub fn new(waker: Waker) -> Self {
        LocalWaker {
            waker,
            _this_thread: PhantomData,
        }
    }
}

/// Compile-time proof that [`LocalWaker`] is not `Send` (the
/// `static_assertions::assert_not_impl_any` construction): were it
/// `Send`, both impls would apply and the call below would be ambiguous.
const _: fn() = || {
    trait AmbiguousIfSend<A> {
        fn check() {}
    }
    impl<T: ?Sized> AmbiguousIfSend<()> for T {}
    impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}
    <LocalWaker as AmbiguousIfSend<_>>::check();
};

/// One connection's parking state ([`super::Hub::parking`]).
pub struct Parking<'a> {
    pub(super) conn: &'a mut Conn,
    pub(super) now_ms: u64,
}

impl Parking<'_> {
    /// Milliseconds since it last received or wrote anything.
    pub fn quiet_ms(&self) -> u64 {
        let (c, now) = (&*self.conn, self.now_ms);
        let sent_ago = u64::from((now as u32).wrapping_sub(c.last_sent_ms));
        now.saturating_sub(c.last_recv_ms).min(sent_ago)
    }

    /// Whether it could be parked now: an open WebSocket with nothing
    /// queued or being written, its writer asleep, and nothing received
    /// or written for `quiet_ms`.
    pub fn parkable(&self, quiet_ms: u64) -> bool {
        let c = &*self.conn;
        idle(c) && c.writer.is_some() && self.quiet_ms() >= quiet_ms
    }

    /// Starts parking it (see [`Parking::parkable`]): its writer is woken
    /// to stop with `WriterWork::Park` (unless something is queued first,
    /// which it writes before). Returns false if it is not parkable.
    pub fn park(self, quiet_ms: u64) -> bool {
        if !self.parkable(quiet_ms) {
            return false;
        }
        self.conn.parked = true;
        conn::wake(self.conn);
        true
    }

    /// Completes parking once its writer stopped: `waker` stands in for
    /// the writer (woken by whatever would have woken it). False — and it
    /// is not parked — if it has something to write or is ending; the
    /// edge then runs it on.
    pub fn parked(self, waker: LocalWaker) -> bool {
        let c = self.conn;
        let idle = c.queue.is_empty() && c.ctrl.is_empty() && c.state == ConnState::Open;
        let parkable = c.parked && idle && !c.finished && !c.expired;
        if !parkable {
            c.parked = false;
            return false;
        }
        c.writer = Some(waker.waker);
        // Empty queues keep their buffers (128 B after the first frame):
        // a parked connection gives them back too.
        c.queue.shrink_to_fit();
        c.ctrl.shrink_to_fit();
        true
    }

    /// Parks a WebSocket that has just been upgraded and has nothing to
    /// do (no writer task yet, nothing queued): `waker` stands in for its
    /// writer from the start. False if something is queued already (a
    /// Pusher greeting, a close): it then runs.
    pub fn park_fresh(self, waker: LocalWaker) -> bool {
        let c = self.conn;
        let fresh = idle(c) && c.writer.is_none();
        if fresh {
            c.parked = true;
            c.writer = Some(waker.waker);
        }
        fresh
    }

    /// An open WebSocket with nothing queued or being written (what a
    /// parked one is until something concerns it).
    pub fn is_idle(&self) -> bool {
        idle(self.conn)
    }

    /// It runs again (its tasks are being spawned): the park waker goes.
    pub fn unpark(self) {
        self.conn.parked = false;
        self.conn.writer = None;
    }
}

/// An open WebSocket, not parked, with nothing queued or being written.
fn idle(c: &Conn) -> bool {
    matches!(c.kind, ConnKind::Ws(_))
        && c.state == ConnState::Open
        && !c.finished
        && !c.expired
        && !c.parked
        && c.queue.is_empty()
        && c.ctrl.is_empty()
        && c.pending_bytes == 0
        && c.pace == Pace::Idle
}
