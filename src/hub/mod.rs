//! The per-worker connection table, channel registry and fan-out.
//!
//! Sans-I/O: the hub never touches a socket. It owns every connection's
//! outbound queue and wakes that connection's writer task through a plain
//! [`Waker`](std::task::Waker); the network edge (`server`) drains the
//! queues with vectored writes. That keeps the broadcast hot path a loop
//! over a dense `Vec` of slab keys pushing reference-counted clones of one
//! encoded frame — no per-subscriber allocation, copy or syscall — and
//! makes it benchable and testable without a runtime.
//!
//! The hub is `!Send` on purpose: one lives inside each worker thread, and
//! workers share nothing.
//!
//! This file is the facade: [`Hub`] and its public methods, each a thin
//! call into the module that does the job. The modules import only each
//! other's leaves (never this file):
//! - `conn`: one connection's entry ([`Conn`], [`ConnKind`], [`ConnState`]);
//! - `registry`: channels, subscriber lists (with their tag filters) and
//!   the Redis interest log;
//! - `outbox`: queues, slow-consumer policy, worker-wide budget, batches;
//! - `pressure`: publishers waiting while a connection is over its bound;
//! - `timers`: close reasons, deadlines and the keepalive sweep;
//! - `pacer`: the fan-out write window;
//! - `format`: wire-format ids and the edge's encoders ([`Encoders`]);
//! - `limits`: [`HubLimits`], built by the configuration;
//! - `recall`: history as the hub sees it (offsets, resume replays);
//! - `latest`: latest-value channels (a newer message replaces a queued
//!   one of the same channel and key);
//! - `deltas`: who may be sent a delta of a channel's next publication.
//!
//! `upstream` is the facade's second file: the `impl Hub` methods an
//! upstream (Redis) uses — the interest log and subscribe acknowledgements
//! that wait for its confirmation; `subs` a third (a connection's channels:
//! a subscribe with its filters and resume, the listings).

use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use slab::Slab;

use crate::history::{Entry, History, Position};
use crate::stats::Stats;
use crate::ws::frame::{encode_close_frame, encode_server_frame, OpCode};

mod conn;
mod deltas;
mod format;
mod latest;
mod limits;
mod outbox;
mod pacer;
mod parking;
mod pressure;
mod publish;
mod recall;
mod registry;
mod subs;
mod timers;
mod upstream;

#[cfg(test)]
mod delivery_tests;
#[cfg(test)]
mod delta_tests;
#[cfg(test)]
mod filter_tests;
#[cfg(test)]
mod history_tests;
#[cfg(test)]
mod interest_tests;
#[cfg(test)]
mod latest_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod timer_tests;

pub use conn::{ChannelId, Conn, ConnId, ConnKind, ConnState};
pub use format::{copy_frames, Delivery, Encoder, Encoders, Format, Frames, Message, MAX_FORMATS};
pub use limits::{HubLimits, SlowConsumerPolicy};
pub use outbox::{
    WriterWork, BACKLOG_CAP, CLOSE_SLOW_CONSUMER, HARD_CAP_FACTOR, LATEST_BATCH_BYTES, MAX_BATCH,
    MAX_PENDING_CONTROL,
};
pub use parking::{LocalWaker, Parking};
pub use recall::Resumed;
pub use registry::{Filtering, Filters, SubscribeError, MAX_INTEREST_BACKLOG};
pub use timers::{CloseReason, Expired, CLOSE_GOING_AWAY, CLOSE_TOKEN_EXPIRED};

use outbox::{Queueing, Totals};
use pacer::Pacer;
use registry::Registry;

/// Set in a publish's sender serial: skip that connection whatever
/// `--exclude-sender` says (Pusher client events, which are never echoed,
/// and the HTTP API's `socket_id`). Serials never reach this bit, and the
/// sender travels through Redis unchanged, so it holds across the hop.
pub const EXCLUDE_ALWAYS: u64 = 1 << 63;

/// The connection table and channel registry of one worker.
pub struct Hub {
    conns: Slab<Conn>,
    registry: Registry,
    limits: HubLimits,
    /// One encoder per wire format, supplied by the edge.
    encoders: Encoders,
    now_ms: u64,
    epoch: std::time::Instant,
    /// Bytes queued or in flight across every connection (the process-wide
    /// outbound budget).
    totals: Totals,
    next_serial: u64,
    pacer: Pacer,
    /// The clock at the previous sweep (write stalls are counted in
    /// sweep steps).
    last_sweep_ms: u64,
    /// Per-channel message history (`--history-size`).
    history: History,
    /// Where latest-value channels' newest frames sit in the queues.
    latest: latest::Latest,
    /// Several workers: the connections of all of them together, which
    /// `max_connections` bounds (one relaxed add per connection opened,
    /// one subtract per connection removed).
    process_conns: Option<Arc<AtomicUsize>>,
    /// Counters, read by `/stats`.
    pub stats: Stats,
}

impl Hub {
    /// An empty hub enforcing `limits`, encoding what is published with
    /// `encoders` (one per wire format its connections use).
    pub fn new(limits: HubLimits, encoders: Encoders) -> Self {
        let window = limits.fanout_window;
        let soft = limits.max_outbound_queue;
        // Epochs must differ between processes (a restart loses history).
        let seed =
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u8);
        Hub {
            history: History::new(limits.history, seed).with_namespaces(limits.ns_history.clone()),
            latest: latest::Latest::default(),
            // Reserved up front: untouched pages cost no RSS, and the table
            // never doubles (no 2x slack, no copy of every entry mid-run).
            conns: Slab::with_capacity(limits.max_connections),
            registry: Registry::default(),
            limits,
            encoders,
            now_ms: 0,
            epoch: std::time::Instant::now(),
            totals: Totals::new(soft),
            next_serial: 0,
            pacer: Pacer::new(window),
            last_sweep_ms: 0,
            process_conns: None,
            stats: Stats::default(),
        }
    }

    /// Counts this hub's connections in `all` too, the process's count
    /// that `max_connections` bounds (several workers).
    pub fn count_connections_in(&mut self, all: Arc<AtomicUsize>) {
        all.fetch_add(self.conns.len(), Ordering::Relaxed);
        self.process_conns = Some(all);
    }

    /// The limits in force.
    pub fn limits(&self) -> &HubLimits {
        &self.limits
    }

    /// Advances the hub's coarse clock (milliseconds since the worker started).
    pub fn set_now(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    /// The coarse clock.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Number of connections in the table.
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// Number of channels with at least one subscriber.
    pub fn channel_count(&self) -> usize {
        self.registry.len()
    }

    /// Channels whose name starts with `prefix`, with their subscriber
    /// counts (O(all channels): for admin APIs, not hot paths).
    pub fn channels_with_prefix(&self, prefix: &str) -> Vec<(Rc<str>, usize)> {
        self.registry.with_prefix(prefix)
    }

    /// Every channel with its subscribers and the messages published to
    /// it since the last call (O(channels): once a second, for the
    /// console, only while someone watches).
    pub fn take_channel_activity(&mut self, f: impl FnMut(&Rc<str>, usize, u32)) {
        self.registry.take_activity(f);
    }

    /// Visits every connection's kind (O(connections): once a second,
    /// for the console, only while someone watches).
    pub fn each_kind(&self, mut f: impl FnMut(ConnKind)) {
        for (_, c) in self.conns.iter() {
            f(c.kind());
        }
    }

    /// Subscribers of `name` on this worker.
    pub fn subscriber_count(&self, name: &str) -> usize {
        self.registry.subscriber_count(name)
    }

    /// A connection, if it is still in the table.
    pub fn conn(&self, id: ConnId) -> Option<&Conn> {
        self.conns.get(id)
    }

    /// Adds an accepted socket as an HTTP connection; `None` at `max_connections`.
    pub fn register(&mut self, fd: i32) -> Option<ConnId> {
        if self.conns.len() >= self.limits.max_connections {
            return None;
        }
        if let Some(all) = &self.process_conns {
            if all.fetch_add(1, Ordering::Relaxed) >= self.limits.max_connections {
                all.fetch_sub(1, Ordering::Relaxed);
                return None;
            }
        }
        self.next_serial += 1;
        let id = self
            .conns
            .insert(Conn::new(fd, self.next_serial, self.now_ms));
        self.stats.connections_opened += 1;
        Some(id)
    }

    /// Marks the start of a new request head (its deadline starts now).
    pub fn request_started(&mut self, id: ConnId) {
        let now = self.now_ms;
        if let Some(c) = self.conns.get_mut(id) {
            c.since_ms = now;
        }
    }

    /// Turns an HTTP connection into a WebSocket of `kind`.
    ///
    /// Panics if `kind` names a wire format without an encoder: format ids
    /// are the edge's constants, so that is a programming error, caught
    /// here rather than on the fan-out path.
    pub fn upgrade(&mut self, id: ConnId, kind: ConnKind) {
        if let ConnKind::Ws(format) = kind {
            assert!(self.encoders.serves(format), "no encoder for {format:?}");
        }
        let now = self.now_ms;
        let one_way = self.encoders.is_one_way(kind.format());
        if let Some(c) = self.conns.get_mut(id) {
            c.kind = kind;
            c.last_recv_ms = now;
            self.stats.count_opened(one_way);
        }
    }

    /// Sets (or, after a refresh, moves) when `id`'s token expires, in the
    /// hub's coarse milliseconds; 0 = never.
    pub fn set_token_expiry(&mut self, id: ConnId, at_ms: u64) {
        if let Some(c) = self.conns.get_mut(id) {
            // Rounded up to whole seconds: never closes before `exp`.
            c.token_expires_s = u32::try_from(at_ms.div_ceil(1000)).unwrap_or(u32::MAX);
        }
    }

    /// Records that bytes arrived from `id` (resets ping and idle timers).
    pub fn received(&mut self, id: ConnId) {
        let now = self.now_ms;
        if let Some(c) = self.conns.get_mut(id) {
            c.last_recv_ms = now;
            c.ping_outstanding = false;
        }
    }

    /// Subscribes `id` to `name`; subscribing twice is a no-op.
    pub fn subscribe(&mut self, id: ConnId, name: &str) -> Result<(), SubscribeError> {
        self.subscribe_new(id, name).map(drop)
    }

    /// [`Hub::subscribe`]: whether the subscription is new.
    fn subscribe_new(&mut self, id: ConnId, name: &str) -> Result<bool, SubscribeError> {
        let max = self.limits.max_subscriptions;
        let new =
            self.registry
                .subscribe(&mut self.conns, &mut self.stats, (id, name, false), max)?;
        if new && self.limits.conflates(name) {
            let conn = self.conns.get_mut(id).expect("just subscribed");
            conn.latest = true;
            self.latest.subscribed(conn.fd);
        }
        Ok(new)
    }

    /// Calls `f` with the socket of every connection that subscribes to a
    /// latest-value channel (the edge sizes its send buffer: the hub
    /// touches no socket).
    pub fn on_latest_subscription(&mut self, f: impl Fn(i32) + 'static) {
        self.latest.on_subscribe = Some(Box::new(f));
    }

    /// Subscribes to an internal channel (name outside the client charset,
    /// e.g. the status feed's `!status`), skipping name validation.
    pub fn subscribe_internal(&mut self, id: ConnId, name: &str) {
        self.registry
            .subscribe_internal(&mut self.conns, &mut self.stats, id, name);
    }

    /// At most `limit` messages of `channel`'s history after offset
    /// `after`, with its position; `None` without history for it.
    pub fn history(
        &self,
        channel: &str,
        after: u64,
        limit: usize,
    ) -> Option<(Position, Vec<Entry>)> {
        self.history.read(channel, after, limit)
    }

    /// The subscribers of `channel` and their kinds (for notices that
    /// depend on the wire format, such as a history gap).
    pub fn subscribers(&self, channel: &str) -> Vec<(ConnId, ConnKind)> {
        let Some(cid) = self.registry.lookup(channel) else {
            return Vec::new();
        };
        let ids = self.registry.subscribers(cid).iter();
        ids.filter_map(|&id| Some((id, self.conns.get(id)?.kind)))
            .collect()
    }

    /// What the memory budget leaves for history (also Redis mode's ring
    /// cache, kept by the edge).
    pub fn history_budget(&self) -> usize {
        self.history_room()
    }

    /// Whether `channel` keeps history (its namespace's `history-size`).
    pub fn history_enabled(&self, channel: &str) -> bool {
        self.history.enabled_for(channel)
    }

    /// Messages and bytes the histories hold.
    pub fn history_usage(&self) -> (usize, usize) {
        (self.history.messages(), self.history.bytes())
    }

    /// What the memory budget leaves for history: outbound frames come
    /// first, history uses the rest.
    fn history_room(&self) -> usize {
        self.limits
            .max_total_outbound
            .saturating_sub(self.totals.unique)
    }

    /// Unsubscribes `id` from `name`; returns whether it was subscribed.
    pub fn unsubscribe(&mut self, id: ConnId, name: &str) -> bool {
        self.registry
            .unsubscribe(&mut self.conns, &mut self.stats, id, name)
    }

    /// Removes a connection and its subscriptions, O(its subscriptions), and
    /// wakes its writer so it sees [`WriterWork::Finish`].
    pub fn remove(&mut self, id: ConnId) {
        let Some(mut conn) = self.conns.try_remove(id) else {
            return;
        };
        if let Some(all) = &self.process_conns {
            all.fetch_sub(1, Ordering::Relaxed);
        }
        let n = conn.pending_bytes;
        self.totals.sub(&mut conn, n);
        self.totals.release_all(conn.queue.iter().chain(&conn.ctrl));
        self.pacer.done(&mut conn);
        self.pacer.release(&mut self.conns, &mut self.stats);
        self.latest.forget(id);
        for (cid, pos) in std::mem::take(&mut conn.subs) {
            self.registry
                .detach(&mut self.conns, &mut self.stats, cid, pos);
        }
        if conn.kind != ConnKind::Http {
            self.stats
                .count_closed(self.encoders.is_one_way(conn.kind.format()));
        }
        self.stats.connections_closed += 1;
        conn::wake(&mut conn);
    }

    /// Fans a message out to every subscriber of `channel`; returns how many
    /// local subscribers it was queued for.
    ///
    /// The frame is encoded at most once per wire format among the
    /// subscribers (by the edge's encoder) and shared by reference count;
    /// each subscriber costs one queue push and, if its writer sleeps, one
    /// wake-up.
    pub fn publish(
        &mut self,
        channel: &str,
        opcode: OpCode,
        payload: &[u8],
        sender: Option<u64>,
    ) -> usize {
        self.publish_tagged((channel, opcode, payload, None), sender)
    }

    /// [`Hub::publish`] of a message that may carry tags: a subscriber
    /// with filters gets it only if they pass.
    pub fn publish_tagged(&mut self, msg: Message<'_>, sender: Option<u64>) -> usize {
        let at = self.record(msg);
        let at = at.as_ref().map_or(("", 0), |p| (&*p.epoch, p.offset));
        self.publish_in(msg, sender, at)
    }

    /// Keeps a message in its channel's history, if it has one: its
    /// position.
    fn record(&mut self, (channel, opcode, payload, meta): Message<'_>) -> Option<Position> {
        let room = self.history_room();
        let entry = (opcode, payload, meta.cloned());
        recall::record(&mut self.history, channel, entry, self.now_ms, room)
    }

    /// Queues a data frame addressed to one connection (a control-protocol
    /// reply), under the same bound and policy as broadcasts.
    pub fn send_to(&mut self, id: ConnId, frame: Bytes) -> bool {
        let Hub {
            conns,
            limits,
            stats,
            now_ms,
            totals,
            pacer,
            ..
        } = self;
        let mut q = Queueing {
            limits,
            stats,
            now_ms: *now_ms,
            totals,
            pacer,
        };
        match conns.get_mut(id) {
            Some(conn) => q.enqueue_data(id, conn, &frame),
            None => false,
        }
    }

    /// Queues a pong (replacing an unsent pong or ping: only the latest
    /// ping needs an answer).
    pub fn queue_pong(&mut self, id: ConnId, payload: &[u8]) {
        if let Some(conn) = self.conns.get_mut(id) {
            let pong = encode_server_frame(OpCode::Pong, payload);
            outbox::queue_ctrl(conn, &mut self.totals, pong);
        }
    }

    /// Starts the closing handshake: drops nothing already queued (so a
    /// graceful close flushes), queues the close frame last, and refuses
    /// further data. A second call is a no-op.
    pub fn close(&mut self, id: ConnId, code: u16, reason: &str, why: CloseReason) {
        self.close_with(id, encode_close_frame(code, reason), why);
    }

    fn close_with(&mut self, id: ConnId, frame: Bytes, why: CloseReason) {
        let Some(conn) = self.conns.get_mut(id) else {
            return;
        };
        conn.peer_closed |= why == CloseReason::Echo;
        outbox::queue_close(conn, &mut self.totals, frame, self.now_ms);
    }

    /// The peer's close frame arrived: echo its code (an empty close for an
    /// empty one), unless we sent our close already.
    pub fn peer_closed(&mut self, id: ConnId, code: Option<u16>) {
        let frame = match code {
            Some(code) => encode_close_frame(code, ""),
            None => encode_server_frame(OpCode::Close, b""),
        };
        self.close_with(id, frame, CloseReason::Echo);
    }

    /// Whether the peer's close frame has arrived.
    pub fn is_peer_closed(&self, id: ConnId) -> bool {
        self.conns.get(id).is_none_or(|c| c.peer_closed)
    }

    /// Tears the writer down without a close frame (the socket is gone).
    pub fn abort(&mut self, id: ConnId) {
        if let Some(conn) = self.conns.get_mut(id) {
            self.totals.set_closing(conn);
            conn.finished = true;
            self.totals.release_all(conn.queue.iter().chain(&conn.ctrl));
            conn.dequeued = conn.dequeued.wrapping_add(conn.queue.len() as u32);
            conn.queue.clear();
            conn.ctrl.clear();
            conn::wake(conn);
        }
    }

    /// The writer's wait: ready when there is something to write and a
    /// place in the fan-out window, or when nothing ever will be written.
    pub fn poll_writer(&mut self, id: ConnId, cx: &mut Context<'_>) -> Poll<WriterWork> {
        let Some(conn) = self.conns.get_mut(id) else {
            return Poll::Ready(WriterWork::Finish);
        };
        let work = !conn.ctrl.is_empty() || !conn.queue.is_empty();
        // Every write needs a place in the fan-out window.
        if work && self.pacer.admit(id, conn, &mut self.stats) {
            return Poll::Ready(WriterWork::Write);
        }
        if !work && conn.finished {
            return Poll::Ready(WriterWork::Finish);
        }
        if !work && conn.parked {
            return Poll::Ready(WriterWork::Park);
        }
        match &mut conn.writer {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Connection `id`'s parking (`server::conn::park`), if it exists.
    pub fn parking(&mut self, id: ConnId) -> Option<Parking<'_>> {
        let now_ms = self.now_ms;
        let conn = self.conns.get_mut(id)?;
        Some(Parking { conn, now_ms })
    }

    /// The pacer watchdog's wait: ready once the fan-out window is full
    /// and writers wait for a place.
    pub fn poll_pacer_backlog(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.pacer.backlogged(&self.conns) {
            return Poll::Ready(());
        }
        match &mut self.pacer.watchdog {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// The watchdog's tick (every millisecond while the window is
    /// backlogged): places held since before the previous tick belong to
    /// writes waiting for their peers and are given to waiting writers.
    /// Returns how many were written off.
    pub fn pacer_tick(&mut self) -> usize {
        self.pacer
            .write_off_stalled(&mut self.conns, &mut self.stats)
    }

    /// Moves up to [`MAX_BATCH`] frames (control frame first) into `out`.
    /// Returns whether this batch holds the close frame — the last bytes
    /// this connection will ever send.
    pub fn take_batch(&mut self, id: ConnId, out: &mut Vec<Bytes>) -> bool {
        match self.conns.get_mut(id) {
            Some(conn) => outbox::take_batch(conn, &mut self.totals, out),
            None => false,
        }
    }

    /// The writer wrote `n` bytes.
    pub fn wrote(&mut self, id: ConnId, n: usize) {
        self.stats.bytes_out += n as u64;
        let timed = self.limits.histograms;
        let now = if timed {
            self.epoch.elapsed().as_nanos() as u64
        } else {
            0
        };
        if let Some(conn) = self.conns.get_mut(id) {
            if n > 0 {
                conn.stalled_ms = 0;
            }
            conn.last_sent_ms = self.now_ms as u32;
            let n = n.min(conn.pending_bytes);
            self.totals.sub(conn, n);
            if timed && conn.batch_since_ns != 0 {
                let delay = now.saturating_sub(conn.batch_since_ns);
                self.stats.fanout_delay.observe_ns(delay);
                conn.batch_since_ns = 0;
            }
            self.pacer.done(conn);
            self.pacer.release(&mut self.conns, &mut self.stats);
        }
    }

    /// The writer is done with `frames` (written or not): empties it, and
    /// the memory budget releases the ones nobody else holds.
    pub fn release(&mut self, frames: &mut Vec<Bytes>) {
        self.totals.release_all(frames.iter());
        frames.clear();
    }

    /// Memory the outbound frames really hold (each shared frame counted
    /// once): what `--max-total-outbound` bounds.
    pub fn outbound_memory(&self) -> usize {
        self.totals.unique
    }

    /// A write to `id` accepted some bytes (a part of a batch, before
    /// [`Hub::wrote`] accounts for the whole): its writes progress.
    pub fn progressed(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(id) {
            c.stalled_ms = 0;
        }
    }

    /// Nanoseconds since the hub was created (never 0, so 0 can mean "none").
    fn clock_ns(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }

    /// Bytes queued or in flight across every connection.
    pub fn total_pending(&self) -> usize {
        self.totals.all
    }

    /// The worker's write backlog: bytes waiting for subscribers, counting
    /// at most [`BACKLOG_CAP`] per connection, so a few stalled readers
    /// cannot make it look busy — only many connections behind at once,
    /// i.e. the server falling behind its own writes.
    pub fn backlog(&self) -> usize {
        self.totals.capped
    }

    /// Starts graceful shutdown: every WebSocket gets close 1001 after what
    /// is already queued; returns the fds of plain HTTP connections, which
    /// the edge shuts down.
    pub fn begin_shutdown(&mut self) -> Vec<i32> {
        let ids: Vec<ConnId> = self.conns.iter().map(|(id, _)| id).collect();
        let mut http = Vec::new();
        for id in ids {
            if self.conns[id].kind == ConnKind::Http {
                http.push(self.conns[id].fd);
            } else {
                let code = match self.conns[id].kind {
                    ConnKind::Ws(f) => self.encoders.going_away(f),
                    ConnKind::Http => None,
                }
                .unwrap_or(CLOSE_GOING_AWAY);
                self.close(id, code, "server shutting down", CloseReason::Shutdown);
            }
        }
        http
    }

    /// The periodic sweep: queues keepalive pings and returns the sockets
    /// whose deadline passed, for the edge to shut down.
    pub fn sweep(&mut self, expired: &mut Vec<(i32, Expired)>) {
        self.sweep_with(expired, |_| false);
    }

    /// [`Hub::sweep`]; a channel whose TTL passed keeps its history's
    /// position (epoch, offset) while it has subscribers here or
    /// `elsewhere` says it has some on another worker.
    pub fn sweep_with(
        &mut self,
        expired: &mut Vec<(i32, Expired)>,
        elsewhere: impl Fn(&str) -> bool,
    ) {
        let Hub {
            conns,
            limits,
            now_ms,
            pacer,
            stats,
            totals,
            last_sweep_ms,
            encoders,
            ..
        } = self;
        let step = now_ms.saturating_sub(*last_sweep_ms);
        *last_sweep_ms = *now_ms;
        let clock = timers::Clock { now: *now_ms, step };
        let mut due = timers::Due {
            expired,
            closes: Vec::new(),
        };
        let pt = (pacer, totals);
        timers::sweep(conns, limits, clock, pt, stats, encoders, &mut due);
        let registry = &self.registry;
        self.history.sweep(*now_ms, |name| {
            registry.lookup(name).is_some() || elsewhere(name)
        });
        for c in due.closes {
            self.close(c.id, c.code, c.reason, c.why);
        }
    }
}
