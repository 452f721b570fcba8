//! The facade's side facing an upstream (Redis, or the channels' owners
//! among several workers): the interest log it follows, subscribe
//! acknowledgements that wait for the upstream to confirm a channel (see
//! `registry`), and messages sequenced upstream.

use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;

use super::conn::ConnId;
use super::format::Frames;
use super::format::Message;
use super::recall;
use super::registry::SubscribeError;
use super::Hub;
use crate::history::Position;
use crate::meta::Meta;
use crate::ws::OpCode;

impl Hub {
    /// [`Hub::publish`] of a message whose history offset was assigned
    /// elsewhere (Redis mode; 0 = none): not recorded here.
    pub fn publish_at(
        &mut self,
        channel: &str,
        opcode: OpCode,
        payload: &[u8],
        sender: Option<u64>,
        offset: u64,
    ) -> usize {
        self.publish_in((channel, opcode, payload, None), sender, ("", offset))
    }

    /// [`Hub::publish_at`] of a message with tags at `(epoch, offset)`
    /// (SSE ids name the epoch).
    pub fn publish_in(&mut self, msg: Message<'_>, sender: Option<u64>, at: (&str, u64)) -> usize {
        self.stats.messages_in += 1;
        self.fan_sharing(msg, sender, at, (None, false)).0
    }

    /// Another worker's message, sequenced by its channel's owner, to
    /// this worker's subscribers: as [`Hub::publish_in`] but not counted
    /// in `messages_in` again (the owner counted it), and starting from
    /// the frames the owner encoded (`seed`), so a format the owner's
    /// subscribers use is not encoded again here. `at`: the position the
    /// owner's history gave it, kept in this worker's copy of the ring.
    pub fn publish_relayed(
        &mut self,
        (channel, opcode, payload, meta): (&str, OpCode, &Bytes, Option<&Arc<Meta>>),
        sender: Option<u64>,
        (seed, at): (Option<Frames>, Option<(&str, u64)>),
    ) -> usize {
        if let Some(at) = at {
            let room = self.history_budget();
            let entry = (opcode, payload.clone(), meta.cloned());
            recall::store(&mut self.history, channel, at, entry, (self.now_ms, room));
        }
        let msg = (channel, opcode, &payload[..], meta);
        let at = at.unwrap_or(("", 0));
        self.fan_sharing(msg, sender, at, (seed, false)).0
    }

    /// [`Hub::publish`] by a channel's owner worker: also the frames it
    /// encoded, for the other workers ([`Hub::publish_relayed`]) — each
    /// gets copies (`copy_frames`): a frame still referenced by another
    /// worker would never look released to this hub's memory budget.
    pub fn publish_shared(
        &mut self,
        channel: &str,
        opcode: OpCode,
        payload: &[u8],
        sender: Option<u64>,
    ) -> (usize, Frames) {
        let msg = (channel, opcode, payload, None);
        let (n, frames, _) = self.publish_owned(msg, sender, (true, true));
        (n, frames.unwrap_or_default())
    }

    /// [`Hub::publish`] by a channel's owner worker, with what the other
    /// workers need: with `share` the frames it encoded (see
    /// [`Hub::publish_shared`]), and, with `record`, the position its
    /// history gave the message, if the channel keeps history.
    pub fn publish_owned(
        &mut self,
        msg: Message<'_>,
        sender: Option<u64>,
        (share, record): (bool, bool),
    ) -> (usize, Option<Frames>, Option<Position>) {
        let pos = match record {
            true => self.record(msg),
            false => None,
        };
        let at = pos.as_ref().map_or(("", 0), |p| (&*p.epoch, p.offset));
        self.stats.messages_in += 1;
        let (n, frames) = self.fan_sharing(msg, sender, at, (None, share));
        (n, frames, pos)
    }

    /// Subscribes `id` to `name` and sends it `ack` once the upstream
    /// (Redis) confirmed it delivers the channel, so a message published
    /// right after the acknowledgement cannot overtake the subscription.
    /// Without an upstream, or for a channel already confirmed or a
    /// subscription that already existed, `ack` goes at once.
    pub fn subscribe_acked(
        &mut self,
        id: ConnId,
        name: &str,
        ack: Bytes,
    ) -> Result<(), SubscribeError> {
        self.subscribe_acked_as(id, (name, false), ack)
    }

    /// [`Hub::subscribe_acked`] to an internal channel of another
    /// protocol (the Pusher edge's `pusher/{app}/{channel}`): the name is
    /// not checked against the client charset, the subscription bound
    /// holds.
    pub fn subscribe_internal_acked(
        &mut self,
        id: ConnId,
        name: &str,
        ack: Bytes,
    ) -> Result<(), SubscribeError> {
        self.subscribe_acked_as(id, (name, true), ack)
    }

    fn subscribe_acked_as(
        &mut self,
        id: ConnId,
        (name, internal): (&str, bool),
        ack: Bytes,
    ) -> Result<(), SubscribeError> {
        let max = self.limits.max_subscriptions;
        let new =
            self.registry
                .subscribe(&mut self.conns, &mut self.stats, (id, name, internal), max)?;
        self.ack_when_confirmed(id, name, ack, new);
        Ok(())
    }

    /// Sends `ack` to `id`, just subscribed to `name`, once the upstream
    /// confirmed the channel (at once without an upstream, for a confirmed
    /// channel, or when the subscription is not `new`: a repeated
    /// subscribe parks nothing, so parked acks stay one per subscriber).
    pub fn ack_when_confirmed(&mut self, id: ConnId, name: &str, ack: Bytes, new: bool) {
        let due = match new {
            true => self.registry.park_ack(id, name, ack),
            false => Some(ack),
        };
        if let Some(ack) = due {
            self.send_to(id, ack);
        }
    }

    /// Whether `id` is subscribed to `name`: O(its subscriptions).
    pub fn is_subscribed(&self, id: ConnId, name: &str) -> bool {
        let (Some(cid), Some(c)) = (self.registry.lookup(name), self.conns.get(id)) else {
            return false;
        };
        c.subs.iter().any(|&(x, _)| x == cid)
    }

    /// Whether `id` may take `n` more subscriptions within
    /// `--max-subscriptions` (checked before a subscribe's side effects,
    /// such as joining presence, so a refusal leaves nothing behind).
    pub fn has_room(&self, id: ConnId, n: usize) -> bool {
        self.conns
            .get(id)
            .is_some_and(|c| c.subs.len().saturating_add(n) <= self.limits.max_subscriptions)
    }

    /// The upstream (Redis subscriber) connection is gone; sends every
    /// waiting acknowledgement (the upstream holds our publishes until a
    /// new connection restored every subscription).
    pub fn interest_lost(&mut self) {
        for (id, ack) in self.registry.interest_lost() {
            self.send_to(id, ack);
        }
    }

    /// Redis answered a subscribe or unsubscribe command for `name`; sends
    /// the acknowledgements that were waiting for it.
    pub fn interest_answered(&mut self, name: &str) {
        for (id, ack) in self.registry.interest_answered(name) {
            self.send_to(id, ack);
        }
    }

    /// Wakes whoever waits in [`Hub::poll_interest`] (to make it notice it
    /// should stop).
    pub fn wake_interest(&mut self) {
        self.registry.wake_interest();
    }

    /// Starts recording channels gained and lost (Redis mode).
    pub fn track_interest(&mut self) {
        self.registry.track_interest(false);
    }

    /// Starts recording channels gained and lost for the other workers:
    /// one change in flight per channel, at most
    /// [`super::MAX_INTEREST_BACKLOG`] held.
    pub fn track_interest_for_workers(&mut self) {
        self.registry.track_interest(true);
    }

    /// Every channel with local subscribers now; clears the change log, as
    /// the snapshot supersedes it (used when an upstream connection is
    /// (re)established).
    pub fn interest_snapshot(&mut self) -> Vec<Rc<str>> {
        self.registry.interest_snapshot()
    }

    /// The channels with local subscribers that `keep` selects (one
    /// Redis Cluster shard's), each now owing one answer from the
    /// upstream: unlike [`Hub::interest_snapshot`] the change log is kept,
    /// as it holds other shards' changes.
    pub fn interest_resend(&mut self, keep: &dyn Fn(&str) -> bool) -> Vec<Rc<str>> {
        self.registry.interest_resend(keep)
    }

    /// One Redis Cluster shard's subscriber connection is gone: its
    /// channels count as confirmed (the shard holds our publishes until
    /// they are resubscribed) and their waiting acknowledgements are sent.
    pub fn interest_reset(&mut self, names: &[Rc<str>]) {
        for (id, ack) in self.registry.interest_reset(names) {
            self.send_to(id, ack);
        }
    }

    /// Interest changes not yet taken by the upstream.
    #[cfg(test)]
    pub(crate) fn interest_backlog(&self) -> usize {
        self.registry.interest_backlog()
    }

    /// Moves pending interest changes into `out`, in order; pending when
    /// there are none (the waker is woken on the next change).
    pub fn poll_interest(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Vec<(Rc<str>, bool)>,
    ) -> Poll<()> {
        self.registry.poll_interest(cx, out)
    }
}

impl Hub {
    /// Whether this worker holds a ring (a position) for `channel`.
    pub fn history_held(&self, channel: &str) -> bool {
        self.history.peek(channel).is_some()
    }

    /// `channel`'s position, for another worker without a copy of its
    /// ring; with `create`, a channel with history that has no ring yet
    /// gets one (a subscribe needs an epoch). `None`: no history.
    pub fn history_locate(&mut self, channel: &str, create: bool) -> Option<Position> {
        let keeps = self.history.enabled_for(channel) && crate::channel::keeps_history(channel);
        match self.history.peek(channel) {
            Some(p) => Some(p),
            None if create && keeps => Some(self.history.position(channel, self.now_ms)),
            None => None,
        }
    }

    /// Takes `channel`'s position from its owner: a ring starts there,
    /// unless one is held already (what arrived since is newer).
    pub fn history_adopt(&mut self, channel: &str, at: (&str, u64)) {
        if !self.history_held(channel) {
            self.history.reset(channel, at, self.now_ms);
        }
    }
}
