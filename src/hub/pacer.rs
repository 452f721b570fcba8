//! Fan-out write pacing: how many subscriber writers a fan-out may have
//! writing at once, who waits for a place, and how places held by writes
//! to peers that do not read are handed on. Part of the hub (it reads and
//! sets connections' pacing state); sans-I/O like the rest of it.

use std::collections::VecDeque;
use std::task::Waker;

use slab::Slab;

use super::conn::{wake, Conn, ConnId, Pace};
use crate::stats::Stats;

/// Fan-out write pacing.
///
/// A fan-out queues a frame for every subscriber at once, but waking every
/// sleeping writer at once would make the worker issue all their writes
/// before it looks at any other socket again: on one core, a message to
/// 20,000 subscribers is ~100 ms of kernel send work, and a request that
/// arrives meanwhile — an API call, another publish, a pong — would wait
/// for all of it (the event-loop blocking the reference measured in
/// Node.js). So at most `window` subscriber writes are in progress at any
/// time: a writer woken by data (or a keepalive ping) and a writer that
/// finds more queued after a write both need a place ([`Pacer::schedule`],
/// [`Pacer::admit`]); the rest wait in FIFO order and are woken as earlier
/// writes complete. Between two windows the runtime polls for I/O, so
/// other work waits for at most about one window of writes. Frames queued
/// for a waiting connection join its next write — under load each write
/// carries a whole turn's frames, so pacing batches better than letting
/// every writer loop on its own — and nothing is dropped: pacing only
/// orders writes.
///
/// A write to a peer that does not read never completes, and must not
/// hold its place. Places are written off, oldest first, when they have
/// been held through a whole watchdog interval (the edge's watchdog ticks
/// every millisecond while writers wait for a place), or when
/// [`HELD_LIMIT`] windows of later writers were started meanwhile. A
/// write that takes that long waits for its peer, not for this core.
#[derive(Debug, Default)]
pub(super) struct Pacer {
    /// Most writers in the window; 0 = no pacing (wake at once).
    pub(super) window: usize,
    /// Places held (connections `Active`).
    pub(super) active: usize,
    /// Activations so far (wrapping; a place is written off long before
    /// its number comes round again).
    activations: u32,
    /// Watchdog ticks so far.
    tick: u64,
    /// Places in the order they were taken: (connection, activation,
    /// tick). Entries whose place was given back are dropped from the front
    /// as they come up; at most `HELD_LIMIT * window` entries.
    pub(super) held: VecDeque<(ConnId, u32, u64)>,
    /// The watchdog, waiting for the window to fill up.
    pub(super) watchdog: Option<Waker>,
    /// Connections waiting for a place, with their serial (slab keys are
    /// reused). Each connection is in it at most once while `Waiting`;
    /// entries of connections removed or written meanwhile are skipped.
    pub(super) waiting: VecDeque<(ConnId, u64)>,
}

/// A place is written off when this many windows of writers were started
/// after it and it is still held (bounds `Pacer::held` without a clock).
pub(super) const HELD_LIMIT: usize = 4;

impl Pacer {
    /// A pacer with `window` places (0 = no pacing).
    pub(super) fn new(window: usize) -> Self {
        Pacer {
            window,
            ..Pacer::default()
        }
    }

    /// Something was queued for `conn`: wake its writer now, or queue it
    /// for the window.
    pub(super) fn schedule(&mut self, id: ConnId, conn: &mut Conn, stats: &mut Stats) {
        // A running writer finds the frame on its next loop (and asks for a
        // place then); a scheduled one is already on its way.
        if conn.writer.is_none() || conn.pace != Pace::Idle {
            return;
        }
        if self.window == 0 {
            wake(conn);
        } else if self.active < self.window {
            self.activate(id, conn);
        } else {
            self.queue(id, conn, stats);
        }
    }

    fn activate(&mut self, id: ConnId, conn: &mut Conn) {
        self.take_place(id, conn);
        wake(conn);
    }

    fn take_place(&mut self, id: ConnId, conn: &mut Conn) {
        self.activations = self.activations.wrapping_add(1);
        conn.pace = Pace::Active(self.activations);
        self.active += 1;
        self.held.push_back((id, self.activations, self.tick));
    }

    /// A writer with something to write asks for a place: true when it may
    /// write now (it holds a place, takes a free one, or pacing is off);
    /// false when it was queued for one (its waker is woken on its turn).
    /// Every write, not only a wake-up, goes through the window: writers
    /// that keep finding data queued take turns in FIFO order instead of
    /// each looping on its own, so under load every write carries what
    /// accumulated during a whole turn.
    pub(super) fn admit(&mut self, id: ConnId, conn: &mut Conn, stats: &mut Stats) -> bool {
        match conn.pace {
            _ if self.window == 0 => true,
            Pace::Active(_) => true,
            Pace::Waiting => false,
            Pace::Idle | Pace::Released if self.active < self.window => {
                self.take_place(id, conn);
                true
            }
            Pace::Idle | Pace::Released => {
                self.queue(id, conn, stats);
                false
            }
        }
    }

    fn queue(&mut self, id: ConnId, conn: &mut Conn, stats: &mut Stats) {
        conn.pace = Pace::Waiting;
        self.waiting.push_back((id, conn.serial));
        stats.fanout_paced += 1;
        if let Some(w) = self.watchdog.take() {
            w.wake();
        }
    }

    /// `conn`'s place in the window is free (its write completed, or it is
    /// gone).
    pub(super) fn done(&mut self, conn: &mut Conn) {
        match conn.pace {
            Pace::Active(_) => {
                conn.pace = Pace::Idle;
                self.active -= 1;
            }
            Pace::Released => conn.pace = Pace::Idle,
            Pace::Idle | Pace::Waiting => {}
        }
    }

    /// Whether the window is full with writers waiting for a place (after
    /// dropping waiting entries that no longer wait).
    pub(super) fn backlogged(&mut self, conns: &Slab<Conn>) -> bool {
        while let Some(&(id, serial)) = self.waiting.front() {
            let waits = conns
                .get(id)
                .is_some_and(|c| c.serial == serial && c.pace == Pace::Waiting);
            if waits {
                break;
            }
            self.waiting.pop_front();
        }
        self.window > 0 && self.active >= self.window && !self.waiting.is_empty()
    }

    /// Drops given-back places from the front of `held`, and writes off
    /// the oldest ones still held when `held` is over its bound.
    fn trim(&mut self, conns: &mut Slab<Conn>, stats: &mut Stats) {
        while let Some(&(id, n, _)) = self.held.front() {
            match conns.get_mut(id) {
                Some(c) if c.pace == Pace::Active(n) => {
                    if self.held.len() <= HELD_LIMIT * self.window {
                        return;
                    }
                    self.write_off(c, stats);
                }
                _ => {}
            }
            self.held.pop_front();
        }
    }

    fn write_off(&mut self, conn: &mut Conn, stats: &mut Stats) {
        conn.pace = Pace::Released;
        self.active -= 1;
        stats.fanout_window_stalls += 1;
    }

    /// The watchdog's tick: writes off every place held since before the
    /// previous tick (its write has waited a whole interval for its peer),
    /// then refills the window. Returns how many were written off.
    pub(super) fn write_off_stalled(&mut self, conns: &mut Slab<Conn>, stats: &mut Stats) -> usize {
        self.tick += 1;
        let mut n = 0;
        while let Some(&(id, activation, tick)) = self.held.front() {
            match conns.get_mut(id) {
                Some(c) if c.pace == Pace::Active(activation) => {
                    // Taken during the last interval: give it one.
                    if tick + 1 >= self.tick {
                        break;
                    }
                    self.write_off(c, stats);
                    n += 1;
                }
                _ => {}
            }
            self.held.pop_front();
        }
        self.release(conns, stats);
        n
    }

    /// Wakes waiting writers while the window has room.
    pub(super) fn release(&mut self, conns: &mut Slab<Conn>, stats: &mut Stats) {
        while self.active < self.window {
            let Some((id, serial)) = self.waiting.pop_front() else {
                break;
            };
            let Some(conn) = conns.get_mut(id) else {
                continue;
            };
            if conn.serial != serial || conn.pace != Pace::Waiting {
                continue;
            }
            // Written meanwhile by a wake-up of its own (a pong, a close),
            // or running now: nothing for the window to do.
            if conn.writer.is_none() || (conn.queue.is_empty() && conn.ctrl.is_empty()) {
                conn.pace = Pace::Idle;
                continue;
            }
            self.activate(id, conn);
        }
        self.trim(conns, stats);
    }
}
