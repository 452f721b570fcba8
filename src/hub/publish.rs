//! A publish's fan-out: the frame encoded at most once per wire format
//! among the subscribers (or taken from another worker's encodings) and
//! shared by reference count, a queue push per subscriber.

use super::format::{Delivery, FrameCache, Frames, Message};
use super::outbox::Queueing;
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
            ..
        } = self;
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
        let n = match registry.audience(cid) {
            (all, []) => q.fan_out(conns, all, &mut frames, skip, t0),
            (all, filters) => {
                // Once per publication: what a publication without tags
                // looks like to a filter.
                let tags = meta.and_then(|m| m.tags()).unwrap_or(Tags::none());
                let pass = |i: usize| {
                    filters[i]
                        .as_deref()
                        .is_none_or(|f| f.iter().all(|f| f.matches(tags)))
                };
                let chosen = all
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| pass(i))
                    .map(|(_, &id)| id);
                q.fan_out_some(conns, chosen, &mut frames, skip, t0)
            }
        };
        // One compare per publish: the peak of what the queues held.
        stats.outbound_bytes_peak = stats.outbound_bytes_peak.max(totals.all as u64);
        (n, keep.then(|| frames.into_frames()))
    }
}
