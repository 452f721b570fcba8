//! Redis mode's ordering of a channel's messages on one instance, sans-I/O.
//!
//! Messages arrive from the subscriber connection carrying the position
//! Redis gave them. The relay delivers each one exactly once and in offset
//! order: in order → deliver; already seen → drop; offsets skipped (the
//! subscriber connection was down, or a message is missing) → hold what
//! arrives and ask the edge to read the range back from the stream
//! ([`Fetch`]); when the read comes back, deliver what was missing, then
//! what was held. A range Redis no longer has (trimmed, or a new epoch)
//! becomes a [`Action::Gap`] so that subscribers learn they missed
//! something instead of missing it silently.

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use super::{Entry, History, HistoryLimits, NamespaceLimits, Position, Stored};

/// A range to read back from Redis: offsets from `from` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    /// The channel.
    pub channel: Rc<str>,
    /// First offset wanted.
    pub from: u64,
    /// Which read this is: a reply to an older one is stale.
    pub id: u64,
}

/// What a read of a channel's stream returned: the epoch and latest
/// offset, and the entries asked for (oldest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The channel's epoch in Redis.
    pub epoch: String,
    /// Its latest offset.
    pub top: u64,
    /// Entries from the offset asked for (fewer when trimmed).
    pub entries: Vec<Entry>,
}

/// What the edge does for a channel's local subscribers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Fan this message out (at this epoch).
    Deliver(Entry, Rc<str>),
    /// Messages up to this position can no longer be delivered (`lost`):
    /// JSON subscribers are told, path-mode subscribers closed. Not
    /// `lost`: only the epoch changed (nothing of the new one is missing):
    /// JSON subscribers are told their old positions are void.
    Gap {
        /// The position to go on from.
        at: Position,
        /// Whether messages were missed.
        lost: bool,
    },
}

/// What a subscribe answers in Redis mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The position to report.
    pub position: Position,
    /// Whether the subscribe's `since` was recovered (None without one).
    pub recovered: Option<bool>,
    /// The messages after `since`, to queue before anything live.
    pub replay: Vec<Entry>,
}

/// Messages that arrived (with their epoch) while a read was in flight.
type Held = VecDeque<(Rc<str>, Entry)>;

/// The per-instance relay: the rings (a cache of recent messages), what
/// is held while a read is in flight, and counters.
#[derive(Debug)]
pub struct Relay {
    history: History,
    /// Per channel with a read in flight: its id (a reply to another read
    /// is stale) and what arrived meanwhile.
    held: HashMap<Rc<str>, (u64, Held)>,
    max_held: usize,
    /// Ids of reads.
    reads: u64,
    /// Messages delivered from reads (not from the subscriber connection).
    pub backfilled: u64,
    /// Gaps that could not be closed.
    pub gaps: u64,
    /// Reads that found Redis had lost what it acknowledged.
    pub rollbacks: u64,
}

impl Relay {
    /// An empty relay; `seed` as for [`History::new`].
    pub fn new(limits: HistoryLimits, seed: u64) -> Relay {
        Relay {
            history: History::new(limits, seed),
            held: HashMap::new(),
            // Dropping past it is safe: a later read brings them back.
            max_held: limits.size.max(64),
            reads: 0,
            backfilled: 0,
            rollbacks: 0,
            gaps: 0,
        }
    }

    /// Per-namespace limits over the default ones
    /// ([`History::with_namespaces`]).
    pub fn with_namespaces(self, namespaces: NamespaceLimits) -> Relay {
        let most = namespaces.0.iter().map(|(_, l)| l.size).max().unwrap_or(0);
        Relay {
            max_held: self.max_held.max(most),
            history: self.history.with_namespaces(namespaces),
            ..self
        }
    }

    /// The rings.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The periodic sweep: a channel without local subscribers is no
    /// longer received (no Redis subscription), so its ring would only go
    /// stale — it is forgotten (a later subscribe starts from what Redis
    /// says); the others lose messages older than the TTL.
    pub fn sweep(&mut self, now_ms: u64, has_subscribers: impl Fn(&str) -> bool) {
        let idle: Vec<Rc<str>> = self
            .history
            .channel_names()
            .filter(|c| !has_subscribers(c) && !self.held.contains_key(&**c))
            .collect();
        for c in idle {
            self.history.remove(&c);
        }
        self.history.sweep(now_ms, |_| true);
    }

    /// Where a subscribe's read should start for a client at `since`: at
    /// most right after what this instance delivered, so the read
    /// connects to it even when the client is ahead of this instance.
    pub fn read_from(&self, channel: &str, since: u64) -> u64 {
        let top = self.history.peek(channel).map_or(u64::MAX, |p| p.offset);
        since.min(top).saturating_add(1)
    }

    /// Whether a read for `channel` is in flight.
    pub fn fetching(&self, channel: &str) -> bool {
        self.held.contains_key(channel)
    }

    /// A message from the subscriber connection at `epoch`.
    pub fn arrive(
        &mut self,
        channel: &str,
        epoch: &str,
        e: Entry,
        clock: (u64, usize),
        out: &mut Vec<Action>,
    ) -> Option<Fetch> {
        if let Some((_, held)) = self.held.get_mut(channel) {
            if held.len() < self.max_held {
                held.push_back((Rc::from(epoch), e));
            }
            return None;
        }
        let mut outcome = self.history.classify(channel, (epoch, e.offset));
        if outcome == Stored::NewEpoch {
            // The new epoch's first messages may still be in Redis.
            self.note_gap(channel, (epoch, 0), false, clock.0, out);
            outcome = self.history.classify(channel, (epoch, e.offset));
        }
        let from = match outcome {
            Stored::Gap { from, .. } => from,
            _ => {
                self.ingest(channel, epoch, e, clock, out);
                return None;
            }
        };
        let held = VecDeque::from([(Rc::from(epoch), e)]);
        Some(self.start_read(Rc::from(channel), from, held))
    }

    fn start_read(&mut self, channel: Rc<str>, from: u64, held: Held) -> Fetch {
        self.reads += 1;
        let id = self.reads;
        self.held.insert(channel.clone(), (id, held));
        Fetch { channel, from, id }
    }

    /// The read `fetch` came back (`None`: it failed): delivers what was
    /// missing, then what was held; what Redis no longer has is a gap. A
    /// read cut short by its byte bound continues with another read (the
    /// returned one), what is held staying held. A read the channel no
    /// longer waits for (a subscribe restarted it from Redis's position
    /// since) is ignored.
    pub fn fetched(
        &mut self,
        fetch: &Fetch,
        snap: Option<Snapshot>,
        clock: (u64, usize),
        out: &mut Vec<Action>,
    ) -> Option<Fetch> {
        let channel = &*fetch.channel;
        match self.held.get(channel) {
            Some((id, _)) if *id == fetch.id => {}
            _ => return None,
        }
        let (_, held) = self.held.remove(channel).expect("checked above");
        if let Some(s) = snap {
            let complete = s.entries.last().is_none_or(|e| e.offset >= s.top);
            if let Some(from) = self.diverged(channel, &s, complete) {
                // Redis lost what it had acknowledged from `from` on (a
                // failover to a replica that had not received it): its
                // next messages reuse those offsets. Subscribers are told
                // exactly where; the reused offsets are then delivered.
                self.note_gap(channel, (&s.epoch, from - 1), true, clock.0, out);
                self.rollbacks += 1;
            }
            let cut = s.entries.last().map(|e| e.offset).filter(|&l| l < s.top);
            for e in s.entries {
                if self.ingest(channel, &s.epoch, e, clock, out) {
                    self.backfilled += 1;
                }
            }
            if let Some(last) = cut {
                return Some(self.start_read(fetch.channel.clone(), last + 1, held));
            }
        }
        for (epoch, e) in held {
            self.ingest(channel, &epoch, e, clock, out);
        }
        None
    }

    /// After the subscriber connection came back: one read per channel
    /// with local subscribers and a ring, from the first offset the ring
    /// holds: what was delivered must still be in Redis as it was (see
    /// [`Relay::diverged`]); what follows is what was missed.
    pub fn catch_up(&mut self, channels: &[Rc<str>]) -> Vec<Fetch> {
        let mut fetches = Vec::new();
        for c in channels {
            let Some(pos) = self.history.peek(c) else {
                continue;
            };
            if self.held.contains_key(&**c) {
                continue;
            }
            let from = self.history.first_held(c).unwrap_or(pos.offset + 1);
            fetches.push(self.start_read(c.clone(), from, VecDeque::new()));
        }
        fetches
    }

    /// The first offset at which Redis no longer has what this instance
    /// delivered (same epoch): an entry that differs from the one kept,
    /// or (`complete`: the read reached Redis's top) a position below
    /// ours. That is a failover that lost writes: asynchronous
    /// replication let the old master acknowledge (and publish) messages
    /// its replica never received, and the promoted replica hands their
    /// offsets to new messages. A fork before the oldest entry the ring
    /// holds shows as that entry differing: the notice then starts there.
    fn diverged(&self, channel: &str, s: &Snapshot, complete: bool) -> Option<u64> {
        let pos = self.history.peek(channel)?;
        if *pos.epoch != *s.epoch {
            return None;
        }
        for e in s.entries.iter().take_while(|e| e.offset <= pos.offset) {
            match self.history.entry(channel, e.offset) {
                Some(kept) if kept.opcode == e.opcode && kept.payload == e.payload => {}
                Some(_) => return Some(e.offset),
                None => {}
            }
        }
        (complete && s.top < pos.offset).then_some(s.top + 1)
    }

    /// Delivers `e` if it is the next message; a skipped range here is
    /// gone (a read already failed to bring it): a gap, then `e`. Returns
    /// whether `e` was delivered.
    fn ingest(
        &mut self,
        channel: &str,
        epoch: &str,
        e: Entry,
        clock: (u64, usize),
        out: &mut Vec<Action>,
    ) -> bool {
        let mut outcome = self.history.classify(channel, (epoch, e.offset));
        if outcome == Stored::NewEpoch {
            self.note_gap(channel, (epoch, 0), false, clock.0, out);
            outcome = self.history.classify(channel, (epoch, e.offset));
        }
        match outcome {
            Stored::Duplicate => return false,
            Stored::Gap { to, .. } => self.note_gap(channel, (epoch, to), true, clock.0, out),
            Stored::NewEpoch | Stored::InOrder => {}
        }
        let at = (epoch, e.offset);
        self.history.store(
            channel,
            at,
            (e.opcode, e.payload.clone(), e.meta.clone()),
            clock.0,
            clock.1,
        );
        // The ring's own copy of the epoch (no allocation per message).
        let epoch = self
            .history
            .peek(channel)
            .map_or_else(|| Rc::from(epoch), |p| p.epoch);
        out.push(Action::Deliver(e, epoch));
        true
    }

    /// Moves the ring to `at` and tells the subscribers; counts the gap
    /// when messages were `lost`.
    fn note_gap(
        &mut self,
        channel: &str,
        at: (&str, u64),
        lost: bool,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        if lost {
            self.gaps += 1;
        }
        self.history.reset(channel, at, now_ms);
        let at = Position {
            epoch: Rc::from(at.0),
            offset: at.1,
        };
        out.push(Action::Gap { at, lost });
    }

    /// Whether a read for a resume on a channel with local subscribers
    /// should be made again: this instance is behind it (what the read
    /// shows is still on its way here; replaying now would send it twice,
    /// in the replay and then live), or the read is older than what the
    /// ring still holds (the reply was slow), so the two do not meet.
    pub fn behind(&self, channel: &str, warm: bool, s: &Snapshot) -> bool {
        let Some(pos) = self.history.peek(channel) else {
            return false;
        };
        let lagging = pos.offset < s.top && !self.connects(channel, s);
        let stale = pos.offset > s.top && !self.history.holds_after(channel, s.top);
        warm && *pos.epoch == *s.epoch && (lagging || stale)
    }

    /// Whether the read's entries continue the ring without a hole.
    fn connects(&self, channel: &str, s: &Snapshot) -> bool {
        let Some(pos) = self.history.peek(channel) else {
            return false;
        };
        *pos.epoch == *s.epoch
            && s.entries
                .first()
                .is_some_and(|e| e.offset <= pos.offset + 1)
    }

    /// A subscribe's read came back. `warm`: the channel already has local
    /// subscribers, so its ring is what they were sent; then the read's
    /// newer entries are delivered to them first (`out`). Cold, the ring
    /// starts at what Redis said.
    pub fn resume(
        &mut self,
        channel: &str,
        since: Option<(&str, u64)>,
        s: Snapshot,
        warm: bool,
        clock: (u64, usize),
        out: &mut Vec<Action>,
    ) -> Resume {
        let warm = warm && self.history.peek(channel).is_some();
        if !warm {
            // Nobody here got anything from the ring: start where Redis
            // is (even behind the ring: what follows is read back).
            self.held.remove(channel);
            self.history.reset(channel, (&s.epoch, s.top), clock.0);
        } else if self.connects(channel, &s) {
            // The read overlaps or continues what local subscribers got:
            // they get the rest first, so the ring covers the read (a read
            // in flight for a gap then finds them delivered; what it holds
            // is delivered after them).
            for e in &s.entries {
                if self.ingest(channel, &s.epoch, e.clone(), clock, out) {
                    self.backfilled += 1;
                }
            }
        }
        let position = self.history.peek(channel).expect("reset or warm");
        let Some((epoch, offset)) = since else {
            return Resume {
                position,
                recovered: None,
                replay: Vec::new(),
            };
        };
        let replay = (epoch == s.epoch && epoch == &*position.epoch)
            .then(|| replay_after(&self.history, channel, offset, &s))
            .flatten();
        Resume {
            position,
            recovered: Some(replay.is_some()),
            replay: replay.unwrap_or_default(),
        }
    }
}

/// The messages after `offset`: the read's entries (which must start
/// right after it), then what the ring holds beyond them.
fn replay_after(history: &History, channel: &str, offset: u64, s: &Snapshot) -> Option<Vec<Entry>> {
    if offset > s.top {
        return None;
    }
    let mut out: Vec<Entry> = Vec::new();
    let mut last = offset;
    for e in s.entries.iter().filter(|e| e.offset > offset) {
        if e.offset != last + 1 {
            return None;
        }
        last = e.offset;
        out.push(e.clone());
    }
    if last < s.top {
        return None;
    }
    let pos = history.peek(channel)?;
    if pos.offset < last {
        // This instance is behind the read: what it has yet to receive
        // would reach the subscriber a second time.
        return None;
    }
    if pos.offset > last {
        out.extend(history.recover(channel, (&pos.epoch, last)).ok()?);
    }
    Some(out)
}

#[cfg(test)]
mod tests;
