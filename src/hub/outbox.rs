//! Outbound queues: queueing data under the per-connection bound, the
//! worker-wide budget and the slow-consumer policy; control frames; and
//! the writer's side (batches, completed writes, the byte accounting both
//! keep in step).

use bytes::Bytes;
use slab::Slab;

use super::conn::{wake, Conn, ConnId, ConnKind, ConnState};
use super::format::FrameCache;
use super::limits::{HubLimits, SlowConsumerPolicy};
use super::pacer::Pacer;
use crate::stats::Stats;
use crate::ws::frame::encode_close_frame;

/// Most frames handed to one vectored write (the kernel's `IOV_MAX`).
pub const MAX_BATCH: usize = 1024;

/// Most bytes of data frames a connection subscribed to a latest-value
/// channel hands its writer at once (at least one frame): a frame taken
/// for writing can no longer be replaced by a newer value.
pub const LATEST_BATCH_BYTES: usize = 16 * 1024;

/// Most control frames (pongs) waiting to be written for one connection.
pub const MAX_PENDING_CONTROL: usize = 16;

/// Close code sent to a slow consumer (RFC 6455 "policy violation").
pub const CLOSE_SLOW_CONSUMER: u16 = 1008;

/// Per-connection share of `Hub::backlog`.
pub const BACKLOG_CAP: usize = 64 * 1024;

/// What a connection's writer should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterWork {
    /// Frames are queued: take a batch and write it.
    Write,
    /// Nothing more will ever be written: stop.
    Finish,
    /// The connection is being parked (`Hub::park`): stop and hand the
    /// socket back; a park waker stands in for the writer.
    Park,
}

/// A connection's queue may grow to this many times
/// `--max-outbound-queue` before it is cut (or trimmed) at once, progress
/// or not: the memory guard. Between one and this many times the bound, a
/// connection is cut only when its writes stop progressing (see
/// `timers::sweep`), and publishers are paused until it is back under the
/// bound (`Totals::pressing`).
pub const HARD_CAP_FACTOR: usize = 4;

/// Worker-wide outbound byte counts, kept in step with every connection's
/// `pending_bytes` (every change goes through `add`/`sub`), and the
/// publisher backpressure they drive.
#[derive(Debug, Default)]
pub(super) struct Totals {
    /// Everything queued or in flight.
    pub(super) all: usize,
    /// The same with each open connection counted up to [`BACKLOG_CAP`]
    /// (a closing one is on its way out, however stuck its last write:
    /// it must not hold the publishers).
    pub(super) capped: usize,
    /// `--max-outbound-queue`: an open connection with more pending is
    /// behind, and publishers wait for it (or for its cut).
    pub(super) soft: usize,
    /// Open connections over `soft` (those with `Conn::pressing`).
    pub(super) pressing: usize,
    /// Publishers' readers waiting for `pressing` to reach 0.
    pub(super) waiters: Vec<std::task::Waker>,
    /// Memory the queued and in-flight frames really hold: each frame
    /// counted once however many connections share it (charged when the
    /// first queue takes it, released when the last holder lets go; see
    /// `charge`/`release`). What `--max-total-outbound` bounds.
    pub(super) unique: usize,
}

impl Totals {
    pub(super) fn new(soft: usize) -> Totals {
        Totals {
            soft,
            ..Totals::default()
        }
    }

    pub(super) fn add(&mut self, conn: &mut Conn, n: usize) {
        let old = conn.pending_bytes;
        conn.pending_bytes += n;
        self.all += n;
        if conn.state == ConnState::Open {
            self.capped += conn.pending_bytes.min(BACKLOG_CAP) - old.min(BACKLOG_CAP);
        }
        self.track(conn);
    }

    pub(super) fn sub(&mut self, conn: &mut Conn, n: usize) {
        let old = conn.pending_bytes;
        conn.pending_bytes -= n;
        self.all -= n;
        if conn.state == ConnState::Open {
            self.capped -= old.min(BACKLOG_CAP) - conn.pending_bytes.min(BACKLOG_CAP);
        }
        self.track(conn);
    }

    /// Whether `frame`, about to be queued, is new to the queues (only
    /// its creator holds it); if so its bytes are charged. Shared frames
    /// cost nothing more: one publish to N subscribers costs one frame.
    pub(super) fn charge(&mut self, frame: &Bytes) -> bool {
        let fresh = frame.is_unique();
        if fresh {
            self.unique += frame.len();
        }
        fresh
    }

    /// A holder lets go of `frame` (call before dropping it): the last
    /// one releases its bytes.
    pub(super) fn release(&mut self, frame: &Bytes) {
        if frame.is_unique() {
            // Saturating: a frame sliced from a buffer someone else held
            // when it was queued was never charged.
            self.unique = self.unique.saturating_sub(frame.len());
        }
    }

    /// Releases every frame of `frames` (see `release`).
    pub(super) fn release_all<'a>(&mut self, frames: impl IntoIterator<Item = &'a Bytes>) {
        for f in frames {
            self.release(f);
        }
    }

    /// Moves `conn` to `Closing` (once): from now on it counts in neither
    /// the backlog nor the connections publishers wait for.
    pub(super) fn set_closing(&mut self, conn: &mut Conn) {
        if conn.state == ConnState::Open {
            self.capped -= conn.pending_bytes.min(BACKLOG_CAP);
            conn.state = ConnState::Closing;
        }
        self.track(conn);
    }

    /// Keeps `pressing` in step with `conn` (after its pending bytes or
    /// its state changed); wakes the waiting publishers when it reaches 0.
    pub(super) fn track(&mut self, conn: &mut Conn) {
        let now = conn.state == ConnState::Open && conn.pending_bytes > self.soft;
        if now == conn.pressing {
            return;
        }
        conn.pressing = now;
        if now {
            self.pressing += 1;
            return;
        }
        self.pressing -= 1;
        if self.pressing == 0 {
            for w in self.waiters.drain(..) {
                w.wake();
            }
        }
    }
}

/// What queueing a data frame touches besides the connection itself.
pub(super) struct Queueing<'a> {
    pub(super) limits: &'a HubLimits,
    pub(super) stats: &'a mut Stats,
    pub(super) now_ms: u64,
    pub(super) totals: &'a mut Totals,
    pub(super) pacer: &'a mut Pacer,
}

impl Queueing<'_> {
    /// Queues one publish for every subscriber in `subscribers` (skipping
    /// the connection with serial `skip`), each in its own format from
    /// `frames`; `t0` is the publish time for the fan-out delay histogram
    /// (0 when off). Returns how many it was queued for.
    ///
    /// The hot path: per subscriber one queue push of a shared frame and,
    /// if its writer sleeps, one wake-up.
    pub(super) fn fan_out(
        &mut self,
        conns: &mut Slab<Conn>,
        subscribers: &[ConnId],
        frames: &mut FrameCache<'_>,
        skip: Option<u64>,
        t0: u64,
    ) -> usize {
        self.fan_out_some(conns, subscribers.iter().copied(), frames, skip, t0)
    }

    /// [`Queueing::fan_out`] to the subscribers `chosen` (those a
    /// channel's filters let through).
    #[inline]
    pub(super) fn fan_out_some(
        &mut self,
        conns: &mut Slab<Conn>,
        chosen: impl Iterator<Item = ConnId>,
        frames: &mut FrameCache<'_>,
        skip: Option<u64>,
        t0: u64,
    ) -> usize {
        let mut queued = 0;
        for id in chosen {
            let conn = &mut conns[id];
            // Plain HTTP connections are never subscribed.
            let ConnKind::Ws(format) = conn.kind else {
                continue;
            };
            if Some(conn.serial) == skip {
                continue;
            }
            let frame = frames.frame_for(format);
            if self.enqueue_data(id, conn, frame) {
                if conn.queued_since_ns == 0 {
                    conn.queued_since_ns = t0;
                }
                self.stats.deliveries += 1;
                queued += 1;
            }
        }
        queued
    }

    /// Queues one data frame for connection `id` under the slow-consumer
    /// policy and schedules its writer; returns whether it was queued.
    pub(super) fn enqueue_data(&mut self, id: ConnId, conn: &mut Conn, frame: &Bytes) -> bool {
        let (limits, stats, totals) = (self.limits, &mut *self.stats, &mut *self.totals);
        if conn.state != ConnState::Open {
            stats.messages_not_delivered += 1;
            return false;
        }
        let len = frame.len();
        if conn.pending_bytes == 0 {
            // Stall time counts from when there is something to write.
            conn.stalled_ms = 0;
        }
        // A frame larger than the whole bound still goes to an idle connection:
        // the message-size limit, not the queue bound, governs single messages.
        // Only a frame new to the queues adds memory.
        let new_bytes = if frame.is_unique() { len } else { 0 };
        if over_limits(conn, len, totals.unique + new_bytes, limits) {
            if totals.unique.saturating_add(new_bytes) > limits.max_total_outbound {
                stats.outbound_budget_exceeded += 1;
            }
            let room = Room { len, new_bytes };
            if !make_room(conn, room, limits, stats, self.now_ms, totals) {
                return false;
            }
        }
        totals.add(conn, len);
        // `charge` without a second look at the reference count.
        totals.unique += new_bytes;
        conn.queue.push_back(frame.clone());
        self.pacer.schedule(id, conn, stats);
        true
    }
}

/// Whether queueing `len` more bytes to `conn` would cross its hard cap
/// ([`HARD_CAP_FACTOR`] times its bound) or the worker's total budget
/// (`memory`: the unique frame bytes held, this frame included). A
/// frame larger than the bound still goes to an idle connection: the
/// message-size limit governs single messages. Crossing the bound itself
/// only pauses the publishers (`Totals::pressing`); the sweep cuts a
/// connection over it whose writes do not progress.
fn over_limits(conn: &Conn, len: usize, memory: usize, limits: &HubLimits) -> bool {
    let hard = limits.max_outbound_queue.saturating_mul(HARD_CAP_FACTOR);
    conn.pending_bytes > 0
        && (conn.pending_bytes.saturating_add(len) > hard || memory > limits.max_total_outbound)
}

/// The frame make_room makes room for: its length, and how much memory it
/// adds (its length if no queue holds it yet, else 0).
#[derive(Debug, Clone, Copy)]
struct Room {
    len: usize,
    new_bytes: usize,
}

/// Applies the slow-consumer policy; returns whether the new frame may be queued.
fn make_room(
    conn: &mut Conn,
    room: Room,
    limits: &HubLimits,
    stats: &mut Stats,
    now_ms: u64,
    totals: &mut Totals,
) -> bool {
    match limits.slow_consumer {
        SlowConsumerPolicy::Disconnect => {
            cut_slow(conn, 1, stats, now_ms, totals);
            false
        }
        SlowConsumerPolicy::DropOldest => {
            let Room { len, new_bytes } = room;
            while over_limits(conn, len, totals.unique + new_bytes, limits) {
                let Some(old) = conn.queue.pop_front() else {
                    // Everything left is in flight: drop the new frame instead.
                    stats.slow_consumer_drops += 1;
                    stats.messages_not_delivered += 1;
                    return false;
                };
                conn.dequeued = conn.dequeued.wrapping_add(1);
                totals.sub(conn, old.len());
                totals.release(&old);
                stats.slow_consumer_drops += 1;
                stats.messages_not_delivered += 1;
            }
            true
        }
    }
}

/// Cuts a slow consumer: drops its queue (counting `extra` more messages
/// not delivered, e.g. the one being queued), queues close 1008 and
/// counts the cut.
pub(super) fn cut_slow(
    conn: &mut Conn,
    extra: u64,
    stats: &mut Stats,
    now_ms: u64,
    totals: &mut Totals,
) {
    let dropped = conn.queue.len() as u64 + extra;
    let freed: usize = conn.queue.iter().map(Bytes::len).sum();
    totals.release_all(&conn.queue);
    conn.dequeued = conn.dequeued.wrapping_add(conn.queue.len() as u32);
    conn.queue.clear();
    totals.set_closing(conn);
    totals.sub(conn, freed);
    stats.slow_consumer_disconnects += 1;
    stats.messages_not_delivered += dropped;
    crate::log!(
        Info,
        "slow consumer disconnected",
        fd = conn.fd,
        dropped = dropped
    );
    // The close deadline runs from now, as for every other close
    // (`Hub::close`), not from when the connection was opened.
    conn.since_ms = now_ms;
    let close = encode_close_frame(CLOSE_SLOW_CONSUMER, "slow consumer");
    totals.add(conn, close.len());
    totals.charge(&close);
    conn.queue.push_back(close);
    wake(conn);
}

/// Drops `conn`'s oldest queued data frames until at most `keep` bytes
/// are pending (or nothing is queued), counting each drop.
pub(super) fn drop_oldest(conn: &mut Conn, keep: usize, stats: &mut Stats, totals: &mut Totals) {
    while conn.pending_bytes > keep {
        let Some(old) = conn.queue.pop_front() else {
            return;
        };
        conn.dequeued = conn.dequeued.wrapping_add(1);
        totals.sub(conn, old.len());
        totals.release(&old);
        stats.slow_consumer_drops += 1;
        stats.messages_not_delivered += 1;
    }
}

/// Queues a control frame for an open connection; past
/// [`MAX_PENDING_CONTROL`] the newest replaces the last unsent one.
pub(super) fn queue_ctrl(conn: &mut Conn, totals: &mut Totals, frame: Bytes) {
    if conn.state != ConnState::Open {
        return;
    }
    if conn.ctrl.len() >= MAX_PENDING_CONTROL {
        if let Some(old) = conn.ctrl.pop_back() {
            totals.release(&old);
        }
    }
    totals.charge(&frame);
    conn.ctrl.push_back(frame);
    wake(conn);
}

/// Queues the close frame last and refuses further data (the closing
/// handshake's start; see `Hub::close`). A second call is a no-op.
pub(super) fn queue_close(conn: &mut Conn, totals: &mut Totals, frame: Bytes, now_ms: u64) {
    if conn.state == ConnState::Closing {
        return;
    }
    totals.set_closing(conn);
    conn.since_ms = now_ms;
    totals.add(conn, frame.len());
    totals.charge(&frame);
    conn.queue.push_back(frame);
    wake(conn);
}

/// Moves up to [`MAX_BATCH`] frames (control frames first) into `out`;
/// returns whether the batch holds the close frame. See `Hub::take_batch`.
pub(super) fn take_batch(conn: &mut Conn, totals: &mut Totals, out: &mut Vec<Bytes>) -> bool {
    let ctrl_bytes: usize = conn.ctrl.iter().map(Bytes::len).sum();
    out.extend(conn.ctrl.drain(..));
    totals.add(conn, ctrl_bytes);
    let mut n = conn.queue.len().min(MAX_BATCH.saturating_sub(out.len()));
    if conn.latest {
        n = latest_batch(&conn.queue, n);
    }
    out.extend(conn.queue.drain(..n));
    conn.dequeued = conn.dequeued.wrapping_add(n as u32);
    if conn.batch_since_ns == 0 {
        conn.batch_since_ns = conn.queued_since_ns;
    }
    if conn.queue.is_empty() {
        conn.queued_since_ns = 0;
    }
    let last = conn.state == ConnState::Closing && conn.queue.is_empty();
    if last {
        conn.finished = true;
    }
    last
}

/// How many of the first `n` frames of `queue` fit in
/// [`LATEST_BATCH_BYTES`] (at least one, when there is one).
fn latest_batch(queue: &std::collections::VecDeque<Bytes>, n: usize) -> usize {
    let mut bytes = 0;
    let fit = queue.iter().take(n).take_while(|f| {
        bytes += f.len();
        bytes <= LATEST_BATCH_BYTES
    });
    fit.count().max(n.min(1))
}
