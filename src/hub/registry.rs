//! The channel registry: channels with local subscribers, each with a dense
//! subscriber list (the fan-out loop's input) and back-pointers from the
//! connections, so leaving is O(1) per channel; plus the interest log an
//! upstream (Redis) follows to subscribe only to what has local
//! subscribers.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use slab::Slab;

use super::conn::{ChannelId, Conn, ConnId};
use super::deltas::Deltas;
use crate::channel::valid_channel_name;
use crate::filter::Filter;
use crate::stats::Stats;

/// Why a subscription was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscribeError {
    /// The name is empty, too long, or has characters outside the charset.
    InvalidChannel,
    /// The connection is at `max_subscriptions`.
    TooManySubscriptions,
    /// A new channel while the upstream (the other workers) is behind by
    /// [`MAX_INTEREST_BACKLOG`] interest changes: retry later.
    Backlogged,
}

/// Most interest changes a worker of several holds for the other workers
/// (not yet taken, or sent for channels it no longer has and not yet
/// answered): past it, subscribes to channels new to the worker are
/// refused until the owners catch up, so a subscribe/unsubscribe flood
/// against a starved worker costs bounded memory.
pub const MAX_INTEREST_BACKLOG: usize = 65_536;

/// A channel's subscribers and their filters (empty: none has any).
pub(super) type Audience<'a> = (&'a [ConnId], &'a [Option<Filters>]);

/// A subscription's tag filters (the server's, then its own): a
/// publication reaches it only if it passes every one.
pub type Filters = Rc<[Filter]>;

/// What a subscribe does with the subscription's tag filters (and
/// deltas).
#[derive(Debug, Clone)]
pub enum Filtering {
    /// The client's own subscribe: these filters (the server's and its
    /// own; `None`: none) replace any it had there, and deltas are on
    /// (`true`, with no base: the next message is full) or off.
    Replace(Option<Filters>, bool),
    /// A server-side subscribe (the connect hook's channels, the server
    /// API's): these for a new subscription; one the connection already
    /// has keeps its filters (a backend's subscribe must not widen a
    /// client's filtered one).
    IfNew(Option<Filters>),
}

#[derive(Debug)]
struct Channel {
    name: Rc<str>,
    subscribers: Vec<ConnId>,
    /// Each subscriber's filters, beside `subscribers` (same positions);
    /// empty while no subscriber has any, so unfiltered channels pay
    /// nothing, not even a check per subscriber.
    filters: Vec<Option<Filters>>,
    /// Subscribers with filters (`filters` is dropped at 0).
    filtered: u32,
    /// Its delta subscribers' bases and last publication, while it has
    /// a delta subscriber (`super::deltas`).
    deltas: Option<Box<Deltas>>,
    /// Subscribe acknowledgements held until the upstream confirms the
    /// channel (at most one per subscriber: only a new subscription parks
    /// one, and a subscriber's entry leaves with it).
    waiting: Vec<(ConnId, Bytes)>,
    /// Messages published to it since the console last looked (a
    /// per-second rate; saturates rather than wraps).
    recent: u32,
}

/// Channels gained and lost, for an upstream (Redis) that subscribes only
/// to what has local subscribers.
///
/// Coalesced per channel, last state wins: a channel is in `changes` only
/// while its state differs from what the upstream last took (a change
/// that undoes a pending one removes it). So while nobody takes the log
/// (the upstream connection is down) it holds at most one entry per
/// channel gained since (each has subscribers) or lost since (each was
/// known to the upstream), however much subscribers churn.
///
/// `upstream` follows what was sent: per channel the last state taken
/// (`wanted`) and how many of the commands sent for it Redis has not
/// answered yet. Replies come in command order on one connection, so a
/// channel is confirmed exactly when its last command was a subscribe and
/// every command for it was answered. Entries of unwanted, answered
/// channels are removed: the map is bounded by the channels with
/// subscribers plus those whose unsubscribe is in flight.
///
/// While no upstream connection is up (`connected` false), every channel
/// counts as confirmed: the upstream holds this instance's publishes until
/// a new connection has restored every subscription, so nothing published
/// after an acknowledgement can overtake its subscription.
#[derive(Debug, Default)]
struct Interest {
    changes: HashMap<Rc<str>, bool>,
    upstream: HashMap<Rc<str>, Upstream>,
    connected: bool,
    waker: Option<Waker>,
    /// One change in flight per channel (the other workers): a change of
    /// a channel whose last one is unanswered waits in `held` (coalesced
    /// the same way) and moves to `changes` with the answer.
    one_at_a_time: bool,
    held: HashMap<Rc<str>, bool>,
}

#[derive(Debug, Clone, Copy)]
struct Upstream {
    wanted: bool,
    unanswered: u32,
}

impl Interest {
    fn confirmed(&self, name: &str) -> bool {
        !self.connected
            || self
                .upstream
                .get(name)
                .is_some_and(|u| u.wanted && u.unanswered == 0)
    }

    /// Whether `name`'s next change may be taken now.
    fn takes(&self, name: &str) -> bool {
        !self.one_at_a_time || self.upstream.get(name).is_none_or(|u| u.unanswered == 0)
    }

    fn sent(&mut self, name: &Rc<str>, wanted: bool) {
        let u = self.upstream.entry(name.clone()).or_insert(Upstream {
            wanted,
            unanswered: 0,
        });
        u.wanted = wanted;
        u.unanswered += 1;
    }
}

/// Channels by id and by name, and the interest log.
#[derive(Debug, Default)]
pub(super) struct Registry {
    channels: Slab<Channel>,
    by_name: HashMap<Rc<str>, ChannelId>,
    interest: Option<Interest>,
}

impl Registry {
    /// Number of channels with at least one subscriber.
    pub(super) fn with_prefix(&self, prefix: &str) -> Vec<(Rc<str>, usize)> {
        self.by_name
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, &cid)| (name.clone(), self.channels[cid].subscribers.len()))
            .collect()
    }

    /// Counts a message published to `cid` (the console's rates).
    pub(super) fn count_message(&mut self, cid: ChannelId) {
        let c = &mut self.channels[cid];
        c.recent = c.recent.saturating_add(1);
    }

    /// Visits every channel with its subscribers and messages since the
    /// last visit, and starts the next count.
    pub(super) fn take_activity(&mut self, mut f: impl FnMut(&Rc<str>, usize, u32)) {
        for (_, c) in self.channels.iter_mut() {
            f(&c.name, c.subscribers.len(), std::mem::take(&mut c.recent));
        }
    }

    pub(super) fn len(&self) -> usize {
        self.channels.len()
    }

    /// The channel called `name`, if it has subscribers.
    pub(super) fn lookup(&self, name: &str) -> Option<ChannelId> {
        self.by_name.get(name).copied()
    }

    /// The name of channel `cid`.
    pub(super) fn name(&self, cid: ChannelId) -> &Rc<str> {
        &self.channels[cid].name
    }

    /// The subscribers of channel `cid`.
    pub(super) fn subscribers(&self, cid: ChannelId) -> &[ConnId] {
        &self.channels[cid].subscribers
    }

    /// The subscribers of channel `cid` and their filters (empty: none
    /// has any; else one per subscriber), and its deltas to update.
    pub(super) fn audience_mut(&mut self, cid: ChannelId) -> (Audience<'_>, Option<&mut Deltas>) {
        let ch = &mut self.channels[cid];
        ((&ch.subscribers, &ch.filters), ch.deltas.as_deref_mut())
    }

    /// The position of connection `id` among `name`'s subscribers.
    fn position(&self, conns: &Slab<Conn>, id: ConnId, name: &str) -> Option<(ChannelId, u32)> {
        let cid = self.lookup(name)?;
        let &(_, pos) = conns.get(id)?.subs.iter().find(|s| s.0 == cid)?;
        Some((cid, pos))
    }

    /// Whether connection `id` gets deltas on `name`.
    pub(super) fn delta_of(&self, conns: &Slab<Conn>, id: ConnId, name: &str) -> bool {
        let Some((cid, pos)) = self.position(conns, id, name) else {
            return false;
        };
        let d = self.channels[cid].deltas.as_deref();
        d.is_some_and(|d| d.wants(pos as usize))
    }

    /// Turns deltas on (with no base) or off for connection `id` on
    /// `name`; whether it is subscribed there.
    pub(super) fn set_delta(
        &mut self,
        conns: &Slab<Conn>,
        id: ConnId,
        name: &str,
        on: bool,
    ) -> bool {
        let Some((cid, pos)) = self.position(conns, id, name) else {
            return false;
        };
        let ch = &mut self.channels[cid];
        if ch.deltas.is_none() && !on {
            return true;
        }
        let len = ch.subscribers.len();
        let d = ch.deltas.get_or_insert_with(|| Box::new(Deltas::new(len)));
        if !d.set(pos as usize, on) {
            ch.deltas = None;
        }
        true
    }

    /// Connection `id`'s filters on `name`, if it is subscribed and has any.
    pub(super) fn filters_of(&self, conns: &Slab<Conn>, id: ConnId, name: &str) -> Option<Filters> {
        let cid = self.lookup(name)?;
        let &(_, pos) = conns.get(id)?.subs.iter().find(|s| s.0 == cid)?;
        self.channels[cid].filters.get(pos as usize)?.clone()
    }

    /// Sets (or, with `None`, clears) connection `id`'s filters on `name`;
    /// whether it is subscribed there.
    pub(super) fn set_filters(
        &mut self,
        conns: &Slab<Conn>,
        id: ConnId,
        name: &str,
        filters: Option<Filters>,
    ) -> bool {
        let Some(cid) = self.lookup(name) else {
            return false;
        };
        let Some(&(_, pos)) = conns
            .get(id)
            .and_then(|c| c.subs.iter().find(|s| s.0 == cid))
        else {
            return false;
        };
        let ch = &mut self.channels[cid];
        if ch.filters.is_empty() {
            if filters.is_none() {
                return true;
            }
            ch.filters.resize(ch.subscribers.len(), None);
        }
        let slot = &mut ch.filters[pos as usize];
        match (slot.is_some(), filters.is_some()) {
            (false, true) => ch.filtered += 1,
            (true, false) => ch.filtered -= 1,
            _ => {}
        }
        *slot = filters;
        if ch.filtered == 0 {
            ch.filters = Vec::new();
        }
        true
    }

    /// Subscribers of `name`.
    pub(super) fn subscriber_count(&self, name: &str) -> usize {
        self.lookup(name)
            .map_or(0, |c| self.channels[c].subscribers.len())
    }

    /// Subscribes `id` to `name` within `max_subscriptions`; subscribing
    /// twice is a no-op. `Ok(true)`: a new subscription. `internal`: the
    /// name is the edge's own (outside the client charset), not checked.
    pub(super) fn subscribe(
        &mut self,
        conns: &mut Slab<Conn>,
        stats: &mut Stats,
        (id, name, internal): (ConnId, &str, bool),
        max_subscriptions: usize,
    ) -> Result<bool, SubscribeError> {
        if !internal && !valid_channel_name(name) {
            return Err(SubscribeError::InvalidChannel);
        }
        let Some(conn) = conns.get(id) else {
            return Ok(false);
        };
        let existing = self.lookup(name);
        if let Some(cid) = existing {
            if conn.subs.iter().any(|&(c, _)| c == cid) {
                return Ok(false);
            }
        }
        if conn.subs.len() >= max_subscriptions {
            return Err(SubscribeError::TooManySubscriptions);
        }
        if existing.is_none() && self.interest_backlog_full() {
            return Err(SubscribeError::Backlogged);
        }
        let cid = existing.unwrap_or_else(|| self.add_channel(name));
        self.attach(conns, stats, id, cid);
        Ok(true)
    }

    /// Subscribes `id` to an internal channel (name outside the client
    /// charset), skipping name validation and the subscription bound.
    pub(super) fn subscribe_internal(
        &mut self,
        conns: &mut Slab<Conn>,
        stats: &mut Stats,
        id: ConnId,
        name: &str,
    ) {
        if conns.contains(id) {
            let cid = self.lookup(name).unwrap_or_else(|| self.add_channel(name));
            self.attach(conns, stats, id, cid);
        }
    }

    fn attach(&mut self, conns: &mut Slab<Conn>, stats: &mut Stats, id: ConnId, cid: ChannelId) {
        let ch = &mut self.channels[cid];
        let pos = ch.subscribers.len() as u32;
        ch.subscribers.push(id);
        if !ch.filters.is_empty() {
            ch.filters.push(None);
        }
        if let Some(d) = &mut ch.deltas {
            d.push();
        }
        let subs = &mut conns[id].subs;
        if subs.capacity() == 0 {
            // Most connections hold one subscription: 16 bytes, not the
            // 64 a first push reserves.
            subs.reserve_exact(1);
        }
        subs.push((cid, pos));
        stats.subscriptions += 1;
    }

    fn add_channel(&mut self, name: &str) -> ChannelId {
        let name: Rc<str> = Rc::from(name);
        let cid = self.channels.insert(Channel {
            name: name.clone(),
            subscribers: Vec::new(),
            filters: Vec::new(),
            filtered: 0,
            deltas: None,
            waiting: Vec::new(),
            recent: 0,
        });
        self.by_name.insert(name.clone(), cid);
        self.note_interest(name, true);
        cid
    }

    /// Unsubscribes `id` from `name`; returns whether it was subscribed.
    pub(super) fn unsubscribe(
        &mut self,
        conns: &mut Slab<Conn>,
        stats: &mut Stats,
        id: ConnId,
        name: &str,
    ) -> bool {
        let Some(cid) = self.lookup(name) else {
            return false;
        };
        let Some(conn) = conns.get_mut(id) else {
            return false;
        };
        let Some(i) = conn.subs.iter().position(|&(c, _)| c == cid) else {
            return false;
        };
        let (_, pos) = conn.subs.swap_remove(i);
        self.detach(conns, stats, cid, pos);
        true
    }

    /// Removes slot `pos` of channel `cid`, fixing the back-pointer of the
    /// subscriber moved into it; drops the channel when it empties. O(the
    /// moved connection's subscriptions), bounded by `max_subscriptions`.
    pub(super) fn detach(
        &mut self,
        conns: &mut Slab<Conn>,
        stats: &mut Stats,
        cid: ChannelId,
        pos: u32,
    ) {
        let ch = &mut self.channels[cid];
        let leaving = ch.subscribers.swap_remove(pos as usize);
        if !ch.filters.is_empty() && ch.filters.swap_remove(pos as usize).is_some() {
            ch.filtered -= 1;
            if ch.filtered == 0 {
                ch.filters = Vec::new();
            }
        }
        if ch
            .deltas
            .as_mut()
            .is_some_and(|d| !d.swap_remove(pos as usize))
        {
            ch.deltas = None;
        }
        if !ch.waiting.is_empty() {
            ch.waiting.retain(|w| w.0 != leaving);
        }
        if let Some(&moved) = ch.subscribers.get(pos as usize) {
            if let Some(slot) = conns[moved].subs.iter_mut().find(|s| s.0 == cid) {
                slot.1 = pos;
            }
        }
        if ch.subscribers.is_empty() {
            let ch = self.channels.remove(cid);
            self.by_name.remove(&ch.name);
            self.note_interest(ch.name, false);
        }
        stats.subscriptions -= 1;
    }

    fn note_interest(&mut self, name: Rc<str>, gained: bool) {
        let Some(i) = &mut self.interest else {
            return;
        };
        let held = !i.takes(&name);
        let map = if held { &mut i.held } else { &mut i.changes };
        match map.entry(name) {
            // States alternate, so a pending entry is the opposite
            // change: together they are no change for the upstream.
            Entry::Occupied(e) => {
                debug_assert_ne!(*e.get(), gained);
                e.remove();
            }
            Entry::Vacant(e) => {
                e.insert(gained);
                if let Some(w) = i.waker.take().filter(|_| !held) {
                    w.wake();
                }
            }
        }
    }

    /// Interest changes not yet taken by the upstream.
    #[cfg(test)]
    pub(super) fn interest_backlog(&self) -> usize {
        self.interest.as_ref().map_or(0, |i| i.changes.len())
    }

    /// See `Hub::wake_interest`.
    pub(super) fn wake_interest(&mut self) {
        if let Some(w) = self.interest.as_mut().and_then(|i| i.waker.take()) {
            w.wake();
        }
    }

    /// See `Hub::track_interest`.
    pub(super) fn track_interest(&mut self, one_at_a_time: bool) {
        let i = self.interest.get_or_insert_with(Interest::default);
        i.one_at_a_time = one_at_a_time;
    }

    /// Whether the changes held for the other workers reached
    /// [`MAX_INTEREST_BACKLOG`]: those not taken, and those taken for
    /// channels gone since (each channel here has at most one entry).
    fn interest_backlog_full(&self) -> bool {
        self.interest.as_ref().is_some_and(|i| {
            let gone = i.upstream.len().saturating_sub(self.channels.len());
            let waiting = gone + i.changes.len() + i.held.len();
            i.one_at_a_time && i.connected && waiting >= MAX_INTEREST_BACKLOG
        })
    }

    /// See `Hub::interest_snapshot`.
    pub(super) fn interest_snapshot(&mut self) -> Vec<Rc<str>> {
        let names: Vec<Rc<str>> = self.channels.iter().map(|(_, c)| c.name.clone()).collect();
        if let Some(i) = &mut self.interest {
            i.changes.clear();
            i.held.clear();
            // A new connection: what the old one sent is moot, and every
            // channel is subscribed afresh.
            i.connected = true;
            i.upstream.clear();
            for name in &names {
                i.sent(name, true);
            }
        }
        names
    }

    /// See `Hub::interest_resend`.
    pub(super) fn interest_resend(&mut self, keep: &dyn Fn(&str) -> bool) -> Vec<Rc<str>> {
        let names: Vec<Rc<str>> = self
            .channels
            .iter()
            .map(|(_, c)| c.name.clone())
            .filter(|n| keep(n))
            .collect();
        if let Some(i) = &mut self.interest {
            i.connected = true;
            for name in &names {
                // One answer owed: the resubscribe about to be sent.
                i.upstream.insert(
                    name.clone(),
                    Upstream {
                        wanted: true,
                        unanswered: 1,
                    },
                );
            }
        }
        names
    }

    /// See `Hub::interest_reset`.
    pub(super) fn interest_reset(&mut self, names: &[Rc<str>]) -> Vec<(ConnId, Bytes)> {
        let Some(i) = &mut self.interest else {
            return Vec::new();
        };
        // Unsubscribes owed by a lost connection are never answered.
        i.upstream.retain(|_, u| u.wanted);
        let mut due = Vec::new();
        for name in names {
            i.upstream.insert(
                name.clone(),
                Upstream {
                    wanted: true,
                    unanswered: 0,
                },
            );
            if let Some(&cid) = self.by_name.get(name) {
                due.append(&mut self.channels[cid].waiting);
            }
        }
        due
    }

    /// Whether the upstream confirmed it delivers `name` (always, without
    /// one).
    pub(super) fn confirmed(&self, name: &str) -> bool {
        self.interest.as_ref().is_none_or(|i| i.confirmed(name))
    }

    /// Holds `ack` for `id`, just subscribed to `name`, until the channel
    /// is confirmed upstream; gives it back when it already is.
    pub(super) fn park_ack(&mut self, id: ConnId, name: &str, ack: Bytes) -> Option<Bytes> {
        if self.confirmed(name) {
            return Some(ack);
        }
        let Some(cid) = self.lookup(name) else {
            return Some(ack);
        };
        self.channels[cid].waiting.push((id, ack));
        None
    }

    /// The upstream connection is gone: every waiting acknowledgement is
    /// due (see [`Interest`]).
    pub(super) fn interest_lost(&mut self) -> Vec<(ConnId, Bytes)> {
        let Some(i) = &mut self.interest else {
            return Vec::new();
        };
        i.connected = false;
        i.upstream.clear();
        // Nothing is in flight any more: what was held is pending.
        for (name, wanted) in std::mem::take(&mut i.held) {
            if i.changes.remove(&name).is_none() {
                i.changes.insert(name, wanted);
            }
        }
        self.channels
            .iter_mut()
            .flat_map(|(_, c)| std::mem::take(&mut c.waiting))
            .collect()
    }

    /// Redis answered a subscribe or unsubscribe for `name`: the
    /// acknowledgements it makes due.
    pub(super) fn interest_answered(&mut self, name: &str) -> Vec<(ConnId, Bytes)> {
        let Some(i) = &mut self.interest else {
            return Vec::new();
        };
        if let Some(u) = i.upstream.get_mut(name) {
            u.unanswered = u.unanswered.saturating_sub(1);
            if !u.wanted && u.unanswered == 0 {
                i.upstream.remove(name);
            }
        }
        if i.takes(name) {
            // A change held for this answer may go now.
            if let Some((name, wanted)) = i.held.remove_entry(name) {
                i.changes.insert(name, wanted);
                if let Some(w) = i.waker.take() {
                    w.wake();
                }
            }
        }
        if !i.confirmed(name) {
            return Vec::new();
        }
        match self.by_name.get(name) {
            Some(&cid) => std::mem::take(&mut self.channels[cid].waiting),
            None => Vec::new(),
        }
    }

    /// See `Hub::poll_interest`.
    pub(super) fn poll_interest(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Vec<(Rc<str>, bool)>,
    ) -> Poll<()> {
        let Some(i) = &mut self.interest else {
            return Poll::Pending;
        };
        if i.changes.is_empty() {
            i.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let first = out.len();
        out.extend(i.changes.drain());
        for (name, wanted) in &out[first..] {
            i.sent(name, *wanted);
        }
        // Order between channels does not matter; a stable one helps logs
        // and tests.
        out[first..].sort_unstable();
        Poll::Ready(())
    }
}
