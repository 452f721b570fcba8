//! Latest-value channels (a namespace's `conflate = true`): a message
//! replaces its channel's (and key's) newest not-yet-written frame in a
//! subscriber's queue instead of queuing behind it (the old one leaves,
//! the new one goes last: publish order holds), so a subscriber that
//! reads slower than the channel publishes gets the newest value, not a
//! backlog and not a cut.
//!
//! Where that frame sits is kept per connection ([`Latest`]): its
//! channel, its key's hash and its sequence number among the frames ever
//! queued to the connection. A connection counts the frames taken off
//! its queue's front (`Conn::dequeued`, wrapping), so a frame's index is
//! its sequence minus that count, and an entry whose frame was taken (or
//! dropped) is recognised and pruned without touching every site that
//! takes frames. Only publishes on latest-value channels look here.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use bytes::Bytes;

use slab::Slab;

use super::conn::{Conn, ConnId, ConnKind, ConnState};
use super::format::FrameCache;
use super::outbox::{Queueing, Totals};

/// A latest-value message's identity: its channel's name hash (not its
/// slab id, which a new channel may reuse) and its key's hash (0 without
/// a key: one value per channel).
pub(super) type Slot = (u64, u64);

/// The [`Slot`] of a message on `channel` with `key`. SipHash with fixed
/// keys: a publisher able to make two keys collide only merges two values
/// of a channel it may publish on anyway.
pub(super) fn slot(channel: &str, key: Option<&str>) -> Slot {
    let hash = |s: &str| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        s.hash(&mut h);
        h.finish() | 1
    };
    (hash(channel), key.map_or(0, hash))
}

#[derive(Debug, Clone, Copy)]
struct Held {
    slot: Slot,
    seq: u32,
    /// The noted frame's address: checked before it is replaced, so a
    /// note that outlived its frame (its channel unsubscribed, then the
    /// wrapping count came round again) never touches another frame.
    frame: usize,
}

/// Per connection, where each latest-value slot's newest queued frame is.
#[derive(Default)]
pub(super) struct Latest {
    held: HashMap<ConnId, Vec<Held>>,
    /// The edge's call for a connection (its socket) that subscribes to
    /// a latest-value channel.
    pub(super) on_subscribe: Option<Box<dyn Fn(i32)>>,
}

impl std::fmt::Debug for Latest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latest")
            .field("held", &self.held.len())
            .finish()
    }
}

impl Latest {
    /// A connection (socket `fd`) subscribed to a latest-value channel.
    pub(super) fn subscribed(&self, fd: i32) {
        if let Some(f) = &self.on_subscribe {
            f(fd);
        }
    }

    /// Replaces `slot`'s newest unwritten frame in `conn`'s queue with
    /// `frame`; `false` when it has none there (the caller queues it).
    pub(super) fn replace(
        &mut self,
        (id, conn): (ConnId, &mut Conn),
        slot: Slot,
        frame: &Bytes,
        totals: &mut Totals,
    ) -> bool {
        if conn.state != ConnState::Open {
            return false;
        }
        let Some(list) = self.held.get_mut(&id) else {
            return false;
        };
        let len = conn.queue.len() as u32;
        let base = conn.dequeued;
        list.retain(|h| h.seq.wrapping_sub(base) < len);
        let Some(at) = list.iter().position(|h| h.slot == slot) else {
            return false;
        };
        let i = list[at].seq.wrapping_sub(base);
        if conn.queue[i as usize].as_ptr() as usize != list[at].frame {
            list.swap_remove(at);
            return false;
        }
        // The old frame leaves its place and the new one goes last, so the
        // queue stays in publish order (offsets only grow; the subscriber
        // sees a jump, never an older offset after a newer one). The
        // frames behind the old one move up a place, their notes too.
        let old = conn
            .queue
            .remove(i as usize)
            .expect("a noted frame is queued");
        for h in list.iter_mut() {
            if h.seq.wrapping_sub(base) > i {
                h.seq = h.seq.wrapping_sub(1);
            }
        }
        // Charged as any first queueing of a frame (`Totals::charge`):
        // looked at before the queue takes its reference.
        totals.charge(frame);
        conn.queue.push_back(frame.clone());
        list[at].seq = base.wrapping_add(len - 1);
        list[at].frame = frame.as_ptr() as usize;
        totals.sub(conn, old.len());
        totals.release(&old);
        drop(old);
        totals.add(conn, frame.len());
        true
    }

    /// Notes that `slot`'s newest frame was just queued last in `conn`'s
    /// queue.
    pub(super) fn queued(&mut self, (id, conn): (ConnId, &Conn), slot: Slot) {
        let seq = conn.dequeued.wrapping_add(conn.queue.len() as u32 - 1);
        let list = self.held.entry(id).or_default();
        let len = conn.queue.len() as u32;
        let base = conn.dequeued;
        list.retain(|h| h.slot != slot && h.seq.wrapping_sub(base) < len);
        let frame = conn.queue.back().map_or(0, |f| f.as_ptr() as usize);
        list.push(Held { slot, seq, frame });
    }

    /// Forgets connection `id` (removed: its slab key will be reused).
    pub(super) fn forget(&mut self, id: ConnId) {
        self.held.remove(&id);
    }

    /// Connections with latest-value frames noted (a gauge for tests).
    #[cfg(test)]
    pub(super) fn tracked(&self) -> usize {
        self.held.len()
    }
}

impl Queueing<'_> {
    /// [`Queueing::fan_out_some`] on a latest-value channel: a subscriber
    /// whose queue holds `slot`'s newest unwritten frame has it replaced
    /// (counted in `messages_conflated`), the others get it queued (and
    /// noted in `latest`).
    pub(super) fn fan_out_latest(
        &mut self,
        conns: &mut Slab<Conn>,
        (chosen, (latest, slot)): (impl Iterator<Item = ConnId>, (&mut Latest, Slot)),
        frames: &mut FrameCache<'_>,
        skip: Option<u64>,
        t0: u64,
    ) -> usize {
        let mut queued = 0;
        for id in chosen {
            let conn = &mut conns[id];
            let ConnKind::Ws(format) = conn.kind else {
                continue;
            };
            if Some(conn.serial) == skip {
                continue;
            }
            let frame = frames.frame_for(format);
            if latest.replace((id, conn), slot, frame, self.totals) {
                self.stats.messages_conflated += 1;
            } else if self.enqueue_data(id, conn, frame) {
                latest.queued((id, conn), slot);
                if conn.queued_since_ns == 0 {
                    conn.queued_since_ns = t0;
                }
            } else {
                continue;
            }
            self.stats.deliveries += 1;
            queued += 1;
        }
        queued
    }
}
