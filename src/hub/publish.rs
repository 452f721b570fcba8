//! A publish's fan-out: the frame encoded at most once per wire format
//! among the subscribers (or taken from another worker's encodings) and
//! shared by reference count, a queue push per subscriber.

use slab::Slab;

use super::conn::{Conn, ConnId};
use super::format::{Delivery, FrameCache, Frames, Message};
use super::latest::{slot as latest_slot, Latest, Slot};
use super::outbox::Queueing;
use super::registry::Filters;
use super::{Hub, EXCLUDE_ALWAYS};
use crate::filter::Tags;

impl Hub {
    /// The fan-out itself, without counting the message in: starting from
    /// `seed`'s frames (another worker's) and, with `keep`, giving back the
    /// frames it encoded or reused.
    #[inline]
    pub(super) fn fan_sharing(
        &mut self,
        (channel, opcode, payload, meta): Message<'_>,
        sender: Option<u64>,
        (epoch, offset): (&str, u64),
        (seed, keep): (Option<Frames>, bool),
    ) -> (usize, Option<Frames>) {
        let Some(cid) = self.registry.lookup(channel) else {
            return (0, seed.filter(|_| keep));
        };
        self.registry.count_message(cid);
        let skip = sender
            .filter(|s| self.limits.exclude_sender || s & EXCLUDE_ALWAYS != 0)
            .map(|s| s & !EXCLUDE_ALWAYS);
        // One clock read per publish (not per subscriber); none when the
        // histogram is off.
        let t0 = if self.limits.histograms {
            self.clock_ns()
        } else {
            0
        };
        let delivery = Delivery {
            channel,
            opcode,
            payload,
            offset,
            epoch,
            tags: meta.and_then(|m| m.tags()),
        };
        let Hub {
            registry,
            conns,
            limits,
            encoders,
            stats,
            now_ms,
            totals,
            pacer,
            latest,
            ..
        } = self;
        // Latest-value channels: the slot this message replaces in.
        let slot = limits
            .conflates(channel)
            .then(|| latest_slot(channel, meta.and_then(|m| m.key())));
        let mut frames = match seed {
            Some(seed) => FrameCache::seeded(delivery, encoders, seed),
            None => FrameCache::new(delivery, encoders),
        };
        let mut q = Queueing {
            limits,
            stats,
            now_ms: *now_ms,
            totals,
            pacer,
        };
        let n = match (registry.audience(cid), slot) {
            ((all, []), None) => q.fan_out(conns, all, &mut frames, skip, t0),
            (audience, slot) => {
                let tags = meta.and_then(|m| m.tags()).unwrap_or(Tags::none());
                let slot = slot.map(|s| (latest, s));
                fan_selected(
                    &mut q,
                    conns,
                    (audience, tags, slot),
                    &mut frames,
                    (skip, t0),
                )
            }
        };
        // One compare per publish: the peak of what the queues held.
        stats.outbound_bytes_peak = stats.outbound_bytes_peak.max(totals.all as u64);
        (n, keep.then(|| frames.into_frames()))
    }
}

/// The fan-out of a channel with filtered subscribers or of a latest-value
/// channel: each subscriber whose filters `tags` pass (a publication
/// without tags is seen with none), through the latest-value queueing
/// when `slot` says so.
fn fan_selected(
    q: &mut Queueing<'_>,
    conns: &mut Slab<Conn>,
    ((all, filters), tags, slot): Selection<'_, '_>,
    frames: &mut FrameCache<'_>,
    (skip, t0): (Option<u64>, u64),
) -> usize {
    let pass = |i: usize| {
        filters
            .get(i)
            .and_then(|f| f.as_deref())
            .is_none_or(|f| f.iter().all(|f| f.matches(tags)))
    };
    let chosen = all
        .iter()
        .enumerate()
        .filter(|&(i, _)| pass(i))
        .map(|(_, &id)| id);
    match slot {
        None => q.fan_out_some(conns, chosen, frames, skip, t0),
        Some(latest) => q.fan_out_latest(conns, (chosen, latest), frames, skip, t0),
    }
}

/// What [`fan_selected`] chooses from: the subscribers and their filters,
/// the publication's tags, and its latest-value slot.
type Selection<'a, 'l> = (
    (&'a [ConnId], &'a [Option<Filters>]),
    &'a Tags,
    Option<(&'l mut Latest, Slot)>,
);
