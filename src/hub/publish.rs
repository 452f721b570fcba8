//! A publish's fan-out: the frame encoded at most once per wire format
//! among the subscribers (or taken from another worker's encodings) and
//! shared by reference count, a queue push per subscriber.

use slab::Slab;

use super::conn::{Conn, ConnKind};
use super::deltas::Deltas;
use super::format::{Delivery, FrameCache, Frames, Message};
use super::latest::{slot as latest_slot, Latest, Slot};
use super::outbox::Queueing;
use super::registry::Audience;
use super::{Hub, EXCLUDE_ALWAYS};
use crate::filter::Tags;
use crate::ws::OpCode;

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
        let (skip, t0) = self.skip_and_start(sender);
        let delivery = Delivery {
            channel,
            opcode,
            payload,
            offset,
            epoch,
            meta: meta.map(|m| &**m),
            patch: None,
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
        let (audience, mut deltas) = registry.audience_mut(cid);
        let asked = || meta.is_some_and(|m| m.delta()) || limits.always_delta(channel);
        let (text, patch) = match deltas.as_deref() {
            Some(d) => delta_parts(d, (opcode, payload), asked),
            None => (None, None),
        };
        let tags = meta.and_then(|m| m.tags()).unwrap_or(Tags::none());
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
        let n = match (audience, slot, deltas.as_deref_mut()) {
            ((all, []), None, None) => q.fan_out(conns, all, &mut frames, skip, t0),
            (audience, None, Some(d)) => {
                let how = (audience, tags, d, patch.as_deref());
                fan_deltas(&mut q, conns, how, &mut frames, (skip, t0))
            }
            (audience, slot, _) => {
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
        if let Some(d) = deltas {
            d.advance(text);
        }
        // One compare per publish: the peak of what the queues held.
        stats.outbound_bytes_peak = stats.outbound_bytes_peak.max(totals.all as u64);
        (n, keep.then(|| frames.into_frames()))
    }
}

impl Hub {
    /// The serial of the connection a publish skips (its sender, with
    /// `--exclude-sender` or when the publish says so), and the publish
    /// time for the fan-out delay histogram: one clock read per publish
    /// (not per subscriber), none when the histogram is off.
    fn skip_and_start(&self, sender: Option<u64>) -> (Option<u64>, u64) {
        let skip = sender
            .filter(|s| self.limits.exclude_sender || s & EXCLUDE_ALWAYS != 0)
            .map(|s| s & !EXCLUDE_ALWAYS);
        let t0 = if self.limits.histograms {
            self.clock_ns()
        } else {
            0
        };
        (skip, t0)
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
type Selection<'a, 'l> = (Audience<'a>, &'a Tags, Option<(&'l mut Latest, Slot)>);

/// A publication on a channel with delta subscribers: its payload if it
/// is text in UTF-8 (the next delta's source), and, if it was `asked` to
/// go as a delta and some subscriber has the previous publication, the
/// Fossil delta made once for them all — when it is UTF-8 (the JSON
/// protocol sends it as a string), shorter than the payload, and made
/// within its work budget.
fn delta_parts<'p>(
    d: &Deltas,
    (opcode, payload): (OpCode, &'p [u8]),
    asked: impl FnOnce() -> bool,
) -> (Option<&'p [u8]>, Option<String>) {
    let text = (opcode == OpCode::Text && std::str::from_utf8(payload).is_ok()).then_some(payload);
    let (Some(prev), Some(p)) = (d.prev(), text) else {
        return (text, None);
    };
    if !d.any_based() || !asked() {
        return (text, None);
    }
    let mut out = Vec::with_capacity(p.len() / 8);
    // Bounded work: a publication that makes the search slow (periodic
    // data) goes whole instead of stalling the worker.
    let budget = crate::delta::WORK_PER_BYTE * (prev.len() + p.len());
    if !crate::delta::create_within(prev, p, &mut out, budget) {
        return (text, None);
    }
    let patch = String::from_utf8(out).ok().filter(|d| d.len() < p.len());
    (text, patch)
}

/// The fan-out of a channel with delta subscribers: each subscriber whose
/// filters pass gets the delta (`patch`) if it has the previous
/// publication, else the full payload, and its base follows.
fn fan_deltas<'p>(
    q: &mut Queueing<'_>,
    conns: &mut Slab<Conn>,
    ((all, filters), tags, d, patch): (Audience<'_>, &Tags, &mut Deltas, Option<&'p str>),
    frames: &mut FrameCache<'p>,
    (skip, t0): (Option<u64>, u64),
) -> usize {
    let mut queued = 0;
    for (i, &id) in all.iter().enumerate() {
        let pass = filters.get(i).and_then(|f| f.as_deref());
        if !pass.is_none_or(|f| f.iter().all(|f| f.matches(tags))) {
            continue;
        }
        let conn = &mut conns[id];
        let ConnKind::Ws(format) = conn.kind else {
            continue;
        };
        if Some(conn.serial) == skip {
            continue;
        }
        let patched = patch.filter(|_| d.based(i));
        let frame = match patched {
            Some(p) => frames.patched_for(format, p),
            None => frames.frame_for(format),
        };
        let ok = q.enqueue_data(id, conn, frame);
        d.handed(i, ok);
        if ok {
            q.stats.delta_deliveries += patched.is_some() as u64;
            if conn.queued_since_ns == 0 {
                conn.queued_since_ns = t0;
            }
            q.stats.deliveries += 1;
            queued += 1;
        }
    }
    queued
}
