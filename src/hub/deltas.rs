//! Deltas (a namespace's `delta = "fossil"`): a publication that asks for
//! it goes to a subscriber as a Fossil delta (`crate::delta`) of the
//! channel's previous publication — computed once per publication here —
//! when, and only when, that previous publication is the last one this
//! subscriber was given on the channel. Everyone else gets the full
//! payload.
//!
//! The rule needs no copy of anything per subscriber: the channel numbers
//! what its fan-out handles (`seq`) and keeps the last payload (`prev`);
//! each delta subscriber keeps the number of the last publication queued
//! for it (`bases`, beside the subscriber list). A subscribe, a resume
//! (whatever it replayed), a message filtered out or not queued, a binary
//! or non-UTF-8 publication: each leaves the subscriber's number behind
//! the channel's, so its next message is full. A worker's or instance's
//! `prev` is what its own subscribers were given, so no other worker's or
//! instance's state (or the Redis message) needs to carry a base.

use bytes::Bytes;

/// A subscriber that did not ask for deltas.
const OFF: u64 = 0;
/// A delta subscriber with no base: its next message is full.
const NO_BASE: u64 = 1;

/// A channel's delta subscribers and last publication; exists while the
/// channel has a delta subscriber.
#[derive(Debug)]
pub(super) struct Deltas {
    /// Per subscriber (the positions of the channel's subscriber list):
    /// [`OFF`], [`NO_BASE`], or the `seq` of the last publication queued
    /// for it.
    bases: Vec<u64>,
    /// Subscribers with deltas on (`Deltas` is dropped at 0).
    wanting: u32,
    /// The number of the last publication the fan-out handled (≥ 1).
    seq: u64,
    /// That publication's payload, if it was text in UTF-8 (what the next
    /// delta is made from).
    prev: Option<Bytes>,
}

impl Deltas {
    /// For a channel of `subscribers` subscribers, none of them wanting
    /// deltas yet.
    pub(super) fn new(subscribers: usize) -> Self {
        Deltas {
            bases: vec![OFF; subscribers],
            wanting: 0,
            seq: NO_BASE,
            prev: None,
        }
    }

    /// Turns deltas on (with no base: the next message is full) or off
    /// for the subscriber at `pos`; whether any subscriber still wants
    /// them.
    pub(super) fn set(&mut self, pos: usize, on: bool) -> bool {
        let slot = &mut self.bases[pos];
        match (*slot != OFF, on) {
            (false, true) => self.wanting += 1,
            (true, false) => self.wanting -= 1,
            _ => {}
        }
        *slot = if on { NO_BASE } else { OFF };
        self.wanting > 0
    }

    /// Whether the subscriber at `pos` gets deltas.
    pub(super) fn wants(&self, pos: usize) -> bool {
        self.bases.get(pos).is_some_and(|&b| b != OFF)
    }

    /// A subscriber joined (at the end of the list), without deltas.
    pub(super) fn push(&mut self) {
        self.bases.push(OFF);
    }

    /// The subscriber at `pos` left (swap-removed as the list is);
    /// whether any subscriber still wants deltas.
    pub(super) fn swap_remove(&mut self, pos: usize) -> bool {
        if self.bases.swap_remove(pos) != OFF {
            self.wanting -= 1;
        }
        self.wanting > 0
    }

    /// Whether some subscriber could take a delta of the next
    /// publication: it was given the previous one, which was text.
    pub(super) fn any_based(&self) -> bool {
        self.prev.is_some() && self.bases.contains(&self.seq)
    }

    /// The previous publication's payload (a delta's source).
    pub(super) fn prev(&self) -> Option<&[u8]> {
        self.prev.as_deref()
    }

    /// Whether the subscriber at `pos` has the previous publication: a
    /// delta of the next one is for it.
    pub(super) fn based(&self, pos: usize) -> bool {
        self.bases.get(pos) == Some(&self.seq) && self.prev.is_some()
    }

    /// The subscriber at `pos` was handed the publication being fanned
    /// out (`queued`: its queue took it).
    pub(super) fn handed(&mut self, pos: usize, queued: bool) {
        let next = self.seq + 1;
        if let Some(b) = self.bases.get_mut(pos).filter(|b| **b != OFF) {
            *b = if queued { next } else { NO_BASE };
        }
    }

    /// The fan-out of a publication is over: it is now the previous one
    /// (`text`: its payload, if text in UTF-8).
    pub(super) fn advance(&mut self, text: Option<&[u8]>) {
        self.seq += 1;
        self.prev = text.map(Bytes::copy_from_slice);
    }
}
