//! Per-channel message history, sans-I/O: what a client that reconnects
//! needs to get the messages it missed.
//!
//! Every message of a channel with history gets an *offset* (1, 2, 3, …
//! per channel, no gaps) and the channel an *epoch*, a string that changes
//! whenever the history was lost (first use, TTL expiry, a restart), so a
//! position `(epoch, offset)` names one message of one incarnation of the
//! channel. A [`History`] keeps, per channel, a ring of the latest
//! messages bounded three ways: `--history-size` messages,
//! `--history-max-bytes` bytes, and the room the worker-wide memory budget
//! (`--max-total-outbound`) leaves; whatever is trimmed moves the ring's
//! first offset up, so a resume from before it is *not* recovered rather
//! than silently incomplete.
//!
//! The same ring serves Redis mode, where offsets come from Redis
//! ([`History::store`]): there it is a cache of the recent messages that
//! arrived, and [`relay::Relay`] decides from it what to deliver, what to
//! hold, and which range the edge must read back from Redis.
//!
//! Pure data and arithmetic: no clock (callers pass milliseconds), no
//! randomness (the caller seeds the epoch generator), no I/O.

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;

use crate::filter::Tags;
use crate::meta::Meta;
use crate::ws::OpCode;

/// Bytes a kept message costs beyond its payload (entry, queue slot).
pub const ENTRY_OVERHEAD: usize = 48;
/// Bytes a channel's ring costs without any message (name, epoch, map
/// slot), so that many empty rings count against the budget too.
pub const RING_OVERHEAD: usize = 160;

/// History settings (`--history-size`, `--history-ttl`,
/// `--history-max-bytes`); the defaults are in `config::OPTIONS`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryLimits {
    /// Messages kept per channel; 0 = history off.
    pub size: usize,
    /// Milliseconds a channel's messages live after its last publish.
    pub ttl_ms: u64,
    /// Bytes kept per channel (payloads plus [`ENTRY_OVERHEAD`] each).
    pub max_bytes: usize,
}

impl HistoryLimits {
    /// Whether history is on.
    pub fn enabled(&self) -> bool {
        self.size > 0
    }
}

/// The history limits of channel namespaces (a channel `chat:x` takes
/// `chat`'s), over the default limits; empty without namespaces. Looked
/// up once per ring (when a channel's history starts), not per message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceLimits(pub Vec<(Box<str>, HistoryLimits)>);

impl NamespaceLimits {
    /// The limits of `channel`: its namespace's, else `default`.
    pub fn of(&self, channel: &str, default: &HistoryLimits) -> HistoryLimits {
        let ns = match channel.split_once(':') {
            Some((ns, _)) if !self.0.is_empty() => ns,
            _ => return *default,
        };
        let found = self.0.iter().find(|(n, _)| **n == *ns);
        found.map_or(*default, |(_, l)| *l)
    }

    /// Whether some namespace keeps history.
    pub fn any_enabled(&self) -> bool {
        self.0.iter().any(|(_, l)| l.enabled())
    }
}

/// One kept message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its offset in the channel.
    pub offset: u64,
    /// Text or binary.
    pub opcode: OpCode,
    /// The message as published.
    pub payload: Bytes,
    /// Its tags and key, if it had any (a filtered resume replays only
    /// what passes).
    pub meta: Option<Arc<Meta>>,
}

/// A message to keep, without its offset: frame type, bytes, tags and key.
pub type Kept = (OpCode, Bytes, Option<Arc<Meta>>);

impl Entry {
    fn cost(&self) -> usize {
        let meta = self.meta.as_ref().map_or(0, |m| m.wire().len());
        self.payload.len() + meta + ENTRY_OVERHEAD
    }

    /// Its tags, if it had any.
    pub fn tags(&self) -> Option<&Tags> {
        self.meta.as_deref().and_then(Meta::tags)
    }
}

/// A position in a channel: its epoch and the offset of its latest
/// message (0 before the first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The channel's current epoch.
    pub epoch: Rc<str>,
    /// The latest offset.
    pub offset: u64,
}

/// What [`History::store`] (Redis mode) made of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// The next offset after the previous one (or the first seen).
    InOrder,
    /// Offsets `from..=to` never arrived: the edge should backfill them.
    Gap {
        /// First missing offset.
        from: u64,
        /// Last missing offset.
        to: u64,
    },
    /// An offset at or below one already seen: a duplicate, not kept.
    Duplicate,
    /// The epoch changed: what was kept belonged to a lost history.
    NewEpoch,
}

#[derive(Debug)]
struct Ring {
    epoch: Rc<str>,
    /// The latest offset (0 before the first message).
    top: u64,
    entries: VecDeque<Entry>,
    /// Payload bytes plus overhead of `entries`.
    bytes: usize,
    /// When the last message was added (or the ring created).
    touched_ms: u64,
    /// Its channel's limits (its namespace's, or the default).
    limits: HistoryLimits,
}

impl Ring {
    fn new(epoch: Rc<str>, (top, now_ms): (u64, u64), limits: HistoryLimits) -> Ring {
        Ring {
            epoch,
            top,
            entries: VecDeque::new(),
            bytes: 0,
            touched_ms: now_ms,
            limits,
        }
    }

    /// The first offset still held (`top + 1` when none is).
    fn first(&self) -> u64 {
        self.top + 1 - self.entries.len() as u64
    }

    fn position(&self) -> Position {
        Position {
            epoch: self.epoch.clone(),
            offset: self.top,
        }
    }

    /// Entries after offset `after`, at most `limit`.
    fn after(&self, after: u64, limit: usize) -> Vec<Entry> {
        let skip = after.saturating_sub(self.first().saturating_sub(1));
        let skip = usize::try_from(skip).unwrap_or(usize::MAX);
        self.entries
            .iter()
            .skip(skip)
            .take(limit)
            .cloned()
            .collect()
    }
}

/// Every channel's ring, with the totals the memory budget and `/stats`
/// read.
#[derive(Debug)]
pub struct History {
    limits: HistoryLimits,
    namespaces: NamespaceLimits,
    rings: HashMap<Rc<str>, Ring>,
    /// Bytes held: entries plus [`RING_OVERHEAD`] per ring.
    bytes: usize,
    /// Messages held.
    messages: usize,
    /// Seed and counter of the epoch generator.
    seed: u64,
    minted: u64,
}

impl History {
    /// Empty history under `limits`; `seed` makes this process's epochs
    /// differ from every other's (pass something random).
    pub fn new(limits: HistoryLimits, seed: u64) -> History {
        History {
            limits,
            namespaces: NamespaceLimits::default(),
            rings: HashMap::new(),
            bytes: 0,
            messages: 0,
            seed,
            minted: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &HistoryLimits {
        &self.limits
    }

    /// Per-namespace limits over the default ones.
    pub fn with_namespaces(self, namespaces: NamespaceLimits) -> History {
        History { namespaces, ..self }
    }

    /// Whether history is on for some channel.
    pub fn enabled(&self) -> bool {
        self.limits.enabled() || self.namespaces.any_enabled()
    }

    /// Whether `channel` keeps history (its namespace's `history-size`).
    pub fn enabled_for(&self, channel: &str) -> bool {
        self.namespaces.of(channel, &self.limits).enabled()
    }

    /// Bytes held (what the memory budget counts).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Messages held.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Channels with a ring.
    pub fn channels(&self) -> usize {
        self.rings.len()
    }

    /// The names of the channels with a ring.
    pub fn channel_names(&self) -> impl Iterator<Item = Rc<str>> + '_ {
        self.rings.keys().cloned()
    }

    /// A fresh epoch: 16 hex digits, different for every ring this
    /// process creates and (through the seed) from other processes'.
    fn mint_epoch(&mut self) -> Rc<str> {
        self.minted += 1;
        Rc::from(format!("{:016x}", mix(self.seed ^ mix(self.minted))))
    }

    fn ring_mut(&mut self, channel: &str, now_ms: u64) -> &mut Ring {
        if !self.rings.contains_key(channel) {
            let epoch = self.mint_epoch();
            self.bytes += RING_OVERHEAD + channel.len();
            let limits = self.namespaces.of(channel, &self.limits);
            let ring = Ring::new(epoch, (0, now_ms), limits);
            self.rings.insert(Rc::from(channel), ring);
        }
        self.rings.get_mut(channel).expect("inserted above")
    }

    /// The channel's position, creating its (empty) history on first use
    /// so that a subscriber has an epoch to resume from.
    pub fn position(&mut self, channel: &str, now_ms: u64) -> Position {
        self.ring_mut(channel, now_ms).position()
    }

    /// Whether the ring holds every message after `offset` (up to its top).
    pub fn holds_after(&self, channel: &str, offset: u64) -> bool {
        self.rings
            .get(channel)
            .is_some_and(|r| offset + 1 >= r.first() && offset <= r.top)
    }

    /// The kept entry at `offset`, if the ring holds it.
    pub fn entry(&self, channel: &str, offset: u64) -> Option<&Entry> {
        let ring = self.rings.get(channel)?;
        let first = ring.first();
        if offset < first || offset > ring.top {
            return None;
        }
        ring.entries.get((offset - first) as usize)
    }

    /// The oldest offset the channel's ring holds, if it holds any.
    pub fn first_held(&self, channel: &str) -> Option<u64> {
        let ring = self.rings.get(channel)?;
        (!ring.entries.is_empty()).then(|| ring.first())
    }

    /// The channel's position if it has a history.
    pub fn peek(&self, channel: &str) -> Option<Position> {
        self.rings.get(channel).map(Ring::position)
    }

    /// Appends a message published here (embedded mode) and returns its
    /// position. `room`: the bytes the worker-wide budget leaves for
    /// history (beyond what it holds now, minus this ring's share).
    pub fn append(&mut self, channel: &str, kept: Kept, now_ms: u64, room: usize) -> Position {
        let ring = self.ring_mut(channel, now_ms);
        ring.top += 1;
        let (opcode, payload, meta) = kept;
        let entry = Entry {
            offset: ring.top,
            opcode,
            payload,
            meta,
        };
        let pos = ring.position();
        self.keep(channel, entry, now_ms, room);
        pos
    }

    /// How a message at `at` (Redis mode: Redis assigned the position)
    /// relates to what the channel's ring holds; changes nothing.
    pub fn classify(&self, channel: &str, at: (&str, u64)) -> Stored {
        let (epoch, offset) = at;
        let Some(ring) = self.rings.get(channel) else {
            return Stored::InOrder;
        };
        if &*ring.epoch != epoch {
            Stored::NewEpoch
        } else if offset <= ring.top {
            Stored::Duplicate
        } else if offset == ring.top + 1 {
            Stored::InOrder
        } else {
            Stored::Gap {
                from: ring.top + 1,
                to: offset - 1,
            }
        }
    }

    /// Records a message whose position Redis assigned (Redis mode) and
    /// says how it related to what was held ([`History::classify`]). Out
    /// of order (a gap, a new epoch), the ring starts over at it: a ring
    /// holds offsets without holes. A duplicate is not kept.
    pub fn store(
        &mut self,
        channel: &str,
        at: (&str, u64),
        entry: Kept,
        now_ms: u64,
        room: usize,
    ) -> Stored {
        let outcome = self.classify(channel, at);
        if outcome == Stored::Duplicate {
            return outcome;
        }
        self.reset(channel, (at.0, at.1.saturating_sub(1)), now_ms);
        let (opcode, payload, meta) = entry;
        let ring = self.rings.get_mut(channel).expect("reset creates it");
        ring.top = at.1;
        let entry = Entry {
            offset: at.1,
            opcode,
            payload,
            meta,
        };
        self.keep(channel, entry, now_ms, room);
        outcome
    }

    /// Sets the channel's position to `at` (Redis mode: what Redis said),
    /// dropping what the ring held unless it already ends there in the
    /// same epoch.
    pub fn reset(&mut self, channel: &str, at: (&str, u64), now_ms: u64) {
        let (epoch, top) = at;
        let ring = self.ring_mut(channel, now_ms);
        if &*ring.epoch == epoch && ring.top == top {
            return;
        }
        if &*ring.epoch != epoch {
            ring.epoch = Rc::from(epoch);
        }
        ring.top = top;
        self.clear(channel);
    }

    /// Adds `entry` (already counted in `top`) and trims the ring to its
    /// bounds, oldest first. An entry that cannot fit at all is not kept,
    /// and neither is anything before it: a ring holds offsets up to its
    /// top without holes.
    fn keep(&mut self, channel: &str, entry: Entry, now_ms: u64, room: usize) {
        let limits = self.rings.get(channel).expect("caller created it").limits;
        let cost = entry.cost();
        if cost > limits.max_bytes || cost > room {
            self.clear(channel);
        }
        let ring = self.rings.get_mut(channel).expect("caller created it");
        ring.touched_ms = now_ms;
        if cost > limits.max_bytes || cost > room {
            return;
        }
        ring.entries.push_back(entry);
        ring.bytes += cost;
        let (mut bytes, mut messages) = (self.bytes + cost, self.messages + 1);
        while ring.entries.len() > limits.size
            || ring.bytes > limits.max_bytes
            || (bytes > room && !ring.entries.is_empty())
        {
            let old = ring.entries.pop_front().expect("non-empty");
            ring.bytes -= old.cost();
            bytes -= old.cost();
            messages -= 1;
        }
        (self.bytes, self.messages) = (bytes, messages);
    }

    /// Forgets `channel`'s history, position and epoch included.
    pub fn remove(&mut self, channel: &str) {
        self.clear(channel);
        if self.rings.remove(channel).is_some() {
            self.bytes -= RING_OVERHEAD + channel.len();
        }
    }

    /// Drops every kept message of `channel` (its position stays).
    fn clear(&mut self, channel: &str) {
        if let Some(ring) = self.rings.get_mut(channel) {
            self.bytes -= ring.bytes;
            self.messages -= ring.entries.len();
            ring.entries.clear();
            ring.bytes = 0;
        }
    }

    /// The messages after `since` when they are all still held: `Ok`
    /// with them (empty when nothing was missed), or `Err` with the
    /// current position when the epoch differs or some were trimmed.
    pub fn recover(
        &self,
        channel: &str,
        since: (&str, u64),
    ) -> Result<Vec<Entry>, Option<Position>> {
        let (epoch, offset) = since;
        let Some(ring) = self.rings.get(channel) else {
            return Err(None);
        };
        if &*ring.epoch != epoch || offset > ring.top || offset + 1 < ring.first() {
            return Err(Some(ring.position()));
        }
        Ok(ring.after(offset, usize::MAX))
    }

    /// At most `limit` held messages after offset `after` (what
    /// `GET /history` answers), with the channel's position.
    pub fn read(&self, channel: &str, after: u64, limit: usize) -> Option<(Position, Vec<Entry>)> {
        let ring = self.rings.get(channel)?;
        Some((ring.position(), ring.after(after, limit)))
    }

    /// Drops the messages of channels without a publish for the TTL, and
    /// the whole history (epoch included) of those that also have no
    /// local subscribers. Returns how many rings were removed.
    pub fn sweep(&mut self, now_ms: u64, has_subscribers: impl Fn(&str) -> bool) -> usize {
        let stale: Vec<Rc<str>> = self
            .rings
            .iter()
            .filter(|(_, r)| now_ms.saturating_sub(r.touched_ms) >= r.limits.ttl_ms)
            .map(|(name, _)| name.clone())
            .collect();
        let mut removed = 0;
        for name in stale {
            self.clear(&name);
            if !has_subscribers(&name) {
                self.rings.remove(&name);
                self.bytes -= RING_OVERHEAD + name.len();
                removed += 1;
            }
        }
        removed
    }
}

/// splitmix64's finaliser: spreads a counter over 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub mod relay;

#[cfg(test)]
mod tests;
