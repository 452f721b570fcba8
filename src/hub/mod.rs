//! The per-worker connection table, channel registry and fan-out.
//!
//! Sans-I/O: the hub never touches a socket. It owns every connection's
//! outbound queue and wakes that connection's writer task through a plain
//! [`Waker`]; the network edge (`server`) drains the queues with vectored
//! writes. That keeps the broadcast hot path a loop over a dense `Vec` of
//! slab keys pushing reference-counted clones of one encoded frame — no
//! per-subscriber allocation, copy or syscall — and makes it benchable and
//! testable without a runtime.
//!
//! The hub is `!Send` on purpose: one lives inside each worker thread, and
//! workers share nothing.

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use slab::Slab;

use crate::config::Config;
use crate::stats::Stats;
use crate::ws::frame::{encode_close_frame, encode_server_frame, OpCode};

mod pacer;

#[cfg(test)]
use pacer::HELD_LIMIT;
use pacer::{Pace, Pacer};

/// Index of a connection in the table.
pub type ConnId = usize;
/// Index of a channel in the registry.
pub type ChannelId = usize;

/// Longest channel name accepted.
pub const MAX_CHANNEL_NAME: usize = 128;

/// Most frames handed to one vectored write (the kernel's `IOV_MAX`).
pub const MAX_BATCH: usize = 1024;

/// Most control frames (pongs) waiting to be written for one connection.
pub const MAX_PENDING_CONTROL: usize = 16;

/// Close code sent to a slow consumer (RFC 6455 "policy violation").
pub const CLOSE_SLOW_CONSUMER: u16 = 1008;
/// Close code sent on server shutdown ("going away").
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// Channel names: 1–128 bytes of `A-Z a-z 0-9 - _ . : @`.
///
/// The charset keeps names safe in URLs, log lines, JSON and (later) Redis
/// keys without escaping.
pub fn valid_channel_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_CHANNEL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'@'))
}

/// How a connection receives what is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnKind {
    /// A plain HTTP connection (never subscribed).
    Http,
    /// `GET /ws/{channel}`: gets the published frames as they were sent.
    Simple,
    /// `GET /ws`: gets JSON envelopes naming the channel.
    Multi,
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// Data flows both ways.
    Open,
    /// A close frame is queued or sent: no more data is queued for it.
    Closing,
}

/// Why a connection is being closed by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer sent a close frame and this is our echo.
    Echo,
    /// The peer broke the protocol.
    Protocol,
    /// Outbound queue over its bound.
    SlowConsumer,
    /// The server is shutting down.
    Shutdown,
    /// The server cannot take the peer's messages now (publish buffer full).
    Overloaded,
    /// The connection's token expired (close 4001).
    TokenExpired,
}

/// Close code sent when a connection's token expires without a refresh
/// (the 4000-4999 range is for applications, RFC 6455 7.4.2).
pub const CLOSE_TOKEN_EXPIRED: u16 = 4001;

/// What a connection's writer should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterWork {
    /// Frames are queued: take a batch and write it.
    Write,
    /// Nothing more will ever be written: stop.
    Finish,
}

/// One connection in the table.
#[derive(Debug)]
pub struct Conn {
    /// The socket, for `shutdown(2)` by the sweeper; never read or written here.
    pub fd: i32,
    kind: ConnKind,
    state: ConnState,
    /// Set when the final batch (containing the close frame) was taken, or
    /// when the connection is being torn down without one.
    finished: bool,
    /// The peer's close frame arrived.
    peer_closed: bool,
    /// Subscriptions: (channel, index of this connection in its subscriber list).
    subs: Vec<(ChannelId, u32)>,
    /// Pending control frames (pongs, our ping), written before data. At
    /// most [`MAX_PENDING_CONTROL`]: past that the newest replaces the last
    /// (RFC 6455 5.5.3 lets us answer only the latest ping), so a ping
    /// flood cannot grow memory.
    ctrl: VecDeque<Bytes>,
    queue: VecDeque<Bytes>,
    /// Bytes in `queue` plus bytes taken by the writer and not yet written.
    pending_bytes: usize,
    writer: Option<Waker>,
    /// Coarse time (ms) of the last byte received, for ping/idle checks.
    last_recv_ms: u64,
    /// Coarse time (ms) the current deadline started (request head, close).
    since_ms: u64,
    ping_outstanding: bool,
    /// Coarse time (ms) the connection's token expires (0 = no token):
    /// the sweep closes it with [`CLOSE_TOKEN_EXPIRED`] then, so expiry
    /// costs no timer per connection.
    token_expires_ms: u64,
    /// A deadline already fired; the edge is tearing it down.
    expired: bool,
    /// When the oldest frame now in `queue` was published (ns since the
    /// hub's epoch; 0 = none), and the same for the batch being written:
    /// the fan-out delay histogram's raw data.
    queued_since_ns: u64,
    batch_since_ns: u64,
    /// Unique for the hub's life (slab keys are reused): identifies the
    /// publisher for `--exclude-sender`, also across the Redis hop.
    serial: u64,
    /// Where the writer is in the fan-out window ([`Pacer`]).
    pace: Pace,
}

impl Conn {
    /// The connection's kind.
    pub fn kind(&self) -> ConnKind {
        self.kind
    }
    /// The connection's state.
    pub fn state(&self) -> ConnState {
        self.state
    }
    /// Number of channels it is subscribed to.
    pub fn subscription_count(&self) -> usize {
        self.subs.len()
    }
    /// Bytes queued or in flight.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }
    /// The connection's serial number (never reused, never 0).
    pub fn serial(&self) -> u64 {
        self.serial
    }
}

/// Channels gained and lost, for an upstream (Redis) that subscribes only
/// to what has local subscribers.
#[derive(Debug, Default)]
struct Interest {
    changes: Vec<(Rc<str>, bool)>,
    waker: Option<Waker>,
}

#[derive(Debug)]
struct Channel {
    name: Rc<str>,
    subscribers: Vec<ConnId>,
}

/// Why a subscription was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscribeError {
    /// The name is empty, too long, or has characters outside the charset.
    InvalidChannel,
    /// The connection is at `max_subscriptions`.
    TooManySubscriptions,
}

/// A timed action the sweeper asks the edge to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// The handshake / request head / keep-alive deadline passed.
    Handshake,
    /// Nothing received for `idle_timeout`.
    Idle,
    /// The peer did not answer our close frame in time.
    Close,
}

/// What to do with a subscriber whose outbound queue is over its byte bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowConsumerPolicy {
    /// Send close 1008 ("slow consumer") and disconnect it. The default:
    /// a client that silently misses messages is worse than one that knows
    /// it was cut off and can resubscribe.
    Disconnect,
    /// Drop its oldest queued data messages (never control frames) to make
    /// room, counting every drop.
    DropOldest,
}

/// The limits the hub enforces, copied from [`Config`].
#[derive(Debug, Clone)]
pub struct HubLimits {
    /// Per-connection outbound bound in bytes.
    pub max_outbound_queue: usize,
    /// What to do over the bound.
    pub slow_consumer: SlowConsumerPolicy,
    /// Channels per connection.
    pub max_subscriptions: usize,
    /// Connections in the table.
    pub max_connections: usize,
    /// Outbound bytes across all connections.
    pub max_total_outbound: usize,
    /// Time deliveries for the fan-out delay histogram.
    pub histograms: bool,
    /// Skip the publisher when fanning out its own message.
    pub exclude_sender: bool,
    /// Most writers woken by fan-outs writing at once (0 = no pacing).
    pub fanout_window: usize,
    /// Milliseconds; 0 disables.
    pub ping_interval_ms: u64,
    /// Milliseconds; 0 disables.
    pub idle_timeout_ms: u64,
    /// Milliseconds.
    pub handshake_timeout_ms: u64,
    /// Milliseconds.
    pub close_timeout_ms: u64,
}

impl From<&Config> for HubLimits {
    fn from(c: &Config) -> Self {
        HubLimits {
            max_outbound_queue: c.max_outbound_queue,
            slow_consumer: c.slow_consumer,
            max_subscriptions: c.max_subscriptions,
            max_connections: c.max_connections,
            max_total_outbound: c.max_total_outbound,
            histograms: c.latency_histograms,
            exclude_sender: c.exclude_sender,
            fanout_window: c.fanout_window,
            ping_interval_ms: c.ping_interval.as_millis() as u64,
            idle_timeout_ms: c.idle_timeout.as_millis() as u64,
            handshake_timeout_ms: c.handshake_timeout.as_millis() as u64,
            close_timeout_ms: c.close_timeout.as_millis() as u64,
        }
    }
}

/// A message to fan out: encoded at most once per subscriber kind.
struct Outgoing<'a> {
    channel: &'a str,
    opcode: OpCode,
    payload: &'a [u8],
    raw: Option<Bytes>,
    envelope: Option<Bytes>,
}

impl Outgoing<'_> {
    fn frame_for(&mut self, kind: ConnKind) -> &Bytes {
        if kind == ConnKind::Multi {
            let (ch, op, p) = (self.channel, self.opcode, self.payload);
            self.envelope
                .get_or_insert_with(|| crate::control::encode_delivery(ch, op, p))
        } else {
            let (op, p) = (self.opcode, self.payload);
            self.raw.get_or_insert_with(|| encode_server_frame(op, p))
        }
    }
}

/// The connection table and channel registry of one worker.
pub struct Hub {
    conns: Slab<Conn>,
    channels: Slab<Channel>,
    by_name: HashMap<Rc<str>, ChannelId>,
    limits: HubLimits,
    now_ms: u64,
    epoch: std::time::Instant,
    /// Bytes queued or in flight across every connection (the process-wide
    /// outbound budget).
    totals: Totals,
    next_serial: u64,
    interest: Option<Interest>,
    pacer: Pacer,
    /// Counters, read by `/stats`.
    pub stats: Stats,
}

impl Hub {
    /// An empty hub enforcing `limits`.
    pub fn new(limits: HubLimits) -> Self {
        let window = limits.fanout_window;
        Hub {
            conns: Slab::new(),
            channels: Slab::new(),
            by_name: HashMap::new(),
            limits,
            now_ms: 0,
            epoch: std::time::Instant::now(),
            totals: Totals::default(),
            next_serial: 0,
            interest: None,
            pacer: Pacer::new(window),
            stats: Stats::default(),
        }
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
        self.channels.len()
    }

    /// Subscribers of `name` on this worker.
    pub fn subscriber_count(&self, name: &str) -> usize {
        self.by_name
            .get(name)
            .map_or(0, |&c| self.channels[c].subscribers.len())
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
        let now = self.now_ms;
        self.next_serial += 1;
        let serial = self.next_serial;
        let id = self.conns.insert(Conn {
            fd,
            kind: ConnKind::Http,
            state: ConnState::Open,
            finished: false,
            peer_closed: false,
            subs: Vec::new(),
            ctrl: VecDeque::new(),
            queue: VecDeque::new(),
            pending_bytes: 0,
            writer: None,
            last_recv_ms: now,
            since_ms: now,
            ping_outstanding: false,
            token_expires_ms: 0,
            expired: false,
            queued_since_ns: 0,
            batch_since_ns: 0,
            serial,
            pace: Pace::Idle,
        });
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
    pub fn upgrade(&mut self, id: ConnId, kind: ConnKind) {
        let now = self.now_ms;
        if let Some(c) = self.conns.get_mut(id) {
            c.kind = kind;
            c.last_recv_ms = now;
            self.stats.websockets_opened += 1;
        }
    }

    /// Sets (or, after a refresh, moves) when `id`'s token expires, in the
    /// hub's coarse milliseconds; 0 = never.
    pub fn set_token_expiry(&mut self, id: ConnId, at_ms: u64) {
        if let Some(c) = self.conns.get_mut(id) {
            c.token_expires_ms = at_ms;
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
        if !valid_channel_name(name) {
            return Err(SubscribeError::InvalidChannel);
        }
        let Some(conn) = self.conns.get(id) else {
            return Ok(());
        };
        let existing = self.by_name.get(name).copied();
        if let Some(cid) = existing {
            if conn.subs.iter().any(|&(c, _)| c == cid) {
                return Ok(());
            }
        }
        if conn.subs.len() >= self.limits.max_subscriptions {
            return Err(SubscribeError::TooManySubscriptions);
        }
        let cid = existing.unwrap_or_else(|| self.add_channel(name));
        let ch = &mut self.channels[cid];
        let pos = ch.subscribers.len() as u32;
        ch.subscribers.push(id);
        self.conns[id].subs.push((cid, pos));
        self.stats.subscriptions += 1;
        Ok(())
    }

    fn add_channel(&mut self, name: &str) -> ChannelId {
        let name: Rc<str> = Rc::from(name);
        let cid = self.channels.insert(Channel {
            name: name.clone(),
            subscribers: Vec::new(),
        });
        self.by_name.insert(name.clone(), cid);
        self.note_interest(name, true);
        cid
    }

    fn note_interest(&mut self, name: Rc<str>, gained: bool) {
        if let Some(i) = &mut self.interest {
            i.changes.push((name, gained));
            if let Some(w) = i.waker.take() {
                w.wake();
            }
        }
    }

    /// Wakes whoever waits in [`Hub::poll_interest`] (to make it notice it
    /// should stop).
    pub fn wake_interest(&mut self) {
        if let Some(w) = self.interest.as_mut().and_then(|i| i.waker.take()) {
            w.wake();
        }
    }

    /// Starts recording channels gained and lost (Redis mode).
    pub fn track_interest(&mut self) {
        self.interest.get_or_insert_with(Interest::default);
    }

    /// Every channel with local subscribers now; clears the change log, as
    /// the snapshot supersedes it (used when an upstream connection is
    /// (re)established).
    pub fn interest_snapshot(&mut self) -> Vec<Rc<str>> {
        if let Some(i) = &mut self.interest {
            i.changes.clear();
        }
        self.channels.iter().map(|(_, c)| c.name.clone()).collect()
    }

    /// Moves pending interest changes into `out`, in order; pending when
    /// there are none (the waker is woken on the next change).
    pub fn poll_interest(
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
        out.append(&mut i.changes);
        Poll::Ready(())
    }

    /// Subscribes to an internal channel (name outside the client charset,
    /// e.g. the status feed's `!status`), skipping name validation.
    pub fn subscribe_internal(&mut self, id: ConnId, name: &str) {
        if self.conns.contains(id) {
            let cid = self
                .by_name
                .get(name)
                .copied()
                .unwrap_or_else(|| self.add_channel(name));
            let ch = &mut self.channels[cid];
            let pos = ch.subscribers.len() as u32;
            ch.subscribers.push(id);
            self.conns[id].subs.push((cid, pos));
            self.stats.subscriptions += 1;
        }
    }

    /// Unsubscribes `id` from `name`; returns whether it was subscribed.
    pub fn unsubscribe(&mut self, id: ConnId, name: &str) -> bool {
        let Some(&cid) = self.by_name.get(name) else {
            return false;
        };
        let Some(conn) = self.conns.get_mut(id) else {
            return false;
        };
        let Some(i) = conn.subs.iter().position(|&(c, _)| c == cid) else {
            return false;
        };
        let (_, pos) = conn.subs.swap_remove(i);
        self.detach(cid, pos);
        true
    }

    /// Removes slot `pos` of channel `cid`, fixing the back-pointer of the
    /// subscriber moved into it; drops the channel when it empties. O(the
    /// moved connection's subscriptions), bounded by `max_subscriptions`.
    fn detach(&mut self, cid: ChannelId, pos: u32) {
        let ch = &mut self.channels[cid];
        ch.subscribers.swap_remove(pos as usize);
        if let Some(&moved) = ch.subscribers.get(pos as usize) {
            if let Some(slot) = self.conns[moved].subs.iter_mut().find(|s| s.0 == cid) {
                slot.1 = pos;
            }
        }
        if ch.subscribers.is_empty() {
            let ch = self.channels.remove(cid);
            self.by_name.remove(&ch.name);
            self.note_interest(ch.name, false);
        }
        self.stats.subscriptions -= 1;
    }

    /// Removes a connection and its subscriptions, O(its subscriptions), and
    /// wakes its writer so it sees [`WriterWork::Finish`].
    pub fn remove(&mut self, id: ConnId) {
        let Some(mut conn) = self.conns.try_remove(id) else {
            return;
        };
        let n = conn.pending_bytes;
        self.totals.sub(&mut conn, n);
        self.pacer.done(&mut conn);
        self.pacer.release(&mut self.conns, &mut self.stats);
        for (cid, pos) in std::mem::take(&mut conn.subs) {
            self.detach(cid, pos);
        }
        if conn.kind != ConnKind::Http {
            self.stats.websockets_closed += 1;
        }
        self.stats.connections_closed += 1;
        if let Some(w) = conn.writer.take() {
            w.wake();
        }
    }

    /// Fans a message out to every subscriber of `channel`; returns how many
    /// local subscribers it was queued for.
    ///
    /// The frame is encoded once per subscriber kind and shared by reference
    /// count; each subscriber costs one queue push and, if its writer sleeps,
    /// one wake-up.
    pub fn publish(
        &mut self,
        channel: &str,
        opcode: OpCode,
        payload: &[u8],
        sender: Option<u64>,
    ) -> usize {
        self.stats.messages_in += 1;
        let Some(&cid) = self.by_name.get(channel) else {
            return 0;
        };
        let mut out = Outgoing {
            channel,
            opcode,
            payload,
            raw: None,
            envelope: None,
        };
        let skip = sender.filter(|_| self.limits.exclude_sender);
        // One clock read per publish (not per subscriber); none when the
        // histogram is off.
        let t0 = if self.limits.histograms {
            self.clock_ns()
        } else {
            0
        };
        let mut queued = 0;
        let Hub {
            channels,
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
        for &id in &channels[cid].subscribers {
            let conn = &mut conns[id];
            if Some(conn.serial) == skip {
                continue;
            }
            let frame = out.frame_for(conn.kind);
            if q.enqueue_data(id, conn, frame) {
                if conn.queued_since_ns == 0 {
                    conn.queued_since_ns = t0;
                }
                q.stats.deliveries += 1;
                queued += 1;
            }
        }
        queued
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
        self.queue_ctrl(id, encode_server_frame(OpCode::Pong, payload));
    }

    fn queue_ctrl(&mut self, id: ConnId, frame: Bytes) {
        let Some(conn) = self.conns.get_mut(id) else {
            return;
        };
        if conn.state != ConnState::Open {
            return;
        }
        if conn.ctrl.len() >= MAX_PENDING_CONTROL {
            conn.ctrl.pop_back();
        }
        conn.ctrl.push_back(frame);
        wake(conn);
    }

    /// Starts the closing handshake: drops nothing already queued (so a
    /// graceful close flushes), queues the close frame last, and refuses
    /// further data. A second call is a no-op.
    pub fn close(&mut self, id: ConnId, code: u16, reason: &str, why: CloseReason) {
        self.close_with(id, encode_close_frame(code, reason), why);
    }

    fn close_with(&mut self, id: ConnId, frame: Bytes, why: CloseReason) {
        let now = self.now_ms;
        let Some(conn) = self.conns.get_mut(id) else {
            return;
        };
        conn.peer_closed |= why == CloseReason::Echo;
        if conn.state == ConnState::Closing {
            return;
        }
        conn.state = ConnState::Closing;
        conn.since_ms = now;
        self.totals.add(conn, frame.len());
        conn.queue.push_back(frame);
        wake(conn);
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
            conn.state = ConnState::Closing;
            conn.finished = true;
            conn.queue.clear();
            conn.ctrl.clear();
            wake(conn);
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
        match &mut conn.writer {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
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
        let Some(conn) = self.conns.get_mut(id) else {
            return false;
        };
        let ctrl_bytes: usize = conn.ctrl.iter().map(Bytes::len).sum();
        out.extend(conn.ctrl.drain(..));
        self.totals.add(conn, ctrl_bytes);
        let n = conn.queue.len().min(MAX_BATCH.saturating_sub(out.len()));
        out.extend(conn.queue.drain(..n));
        if conn.batch_since_ns == 0 {
            conn.batch_since_ns = conn.queued_since_ns;
        }
        if conn.queue.is_empty() {
            conn.queued_since_ns = 0;
        }
        let last = conn.state == ConnState::Closing && conn.queue.is_empty();
        if last {
            conn.finished = true;
        }
        last
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
                self.close(
                    id,
                    CLOSE_GOING_AWAY,
                    "server shutting down",
                    CloseReason::Shutdown,
                );
            }
        }
        http
    }

    /// The periodic sweep: queues keepalive pings and returns the sockets
    /// whose deadline passed, for the edge to shut down.
    pub fn sweep(&mut self, expired: &mut Vec<(i32, Expired)>) {
        let Hub {
            conns,
            limits: l,
            now_ms,
            pacer,
            stats,
            ..
        } = self;
        let now = *now_ms;
        let first = expired.len();
        // One ping frame shared by every connection pinged in this sweep.
        let ping = encode_server_frame(OpCode::Ping, b"");
        // Connections whose token expired (allocates only when one did).
        let mut token_expired = Vec::new();
        for (id, conn) in conns.iter_mut() {
            if conn.expired {
                continue;
            }
            let token_due = conn.token_expires_ms != 0 && now >= conn.token_expires_ms;
            if token_due && conn.state == ConnState::Open && conn.kind != ConnKind::Http {
                conn.token_expires_ms = 0;
                token_expired.push(id);
            }
            if let Some(why) = deadline_passed(conn, l, now) {
                conn.expired = true;
                expired.push((conn.fd, why));
                continue;
            }
            let quiet = now.saturating_sub(conn.last_recv_ms);
            let wants_ping = conn.kind != ConnKind::Http
                && conn.state == ConnState::Open
                && l.ping_interval_ms > 0
                && quiet >= l.ping_interval_ms
                && !conn.ping_outstanding
                && conn.ctrl.is_empty();
            if wants_ping {
                conn.ping_outstanding = true;
                conn.ctrl.push_back(ping.clone());
                // Paced like a fan-out: thousands of connections that
                // connected together fall due together.
                pacer.schedule(id, conn, stats);
            }
        }
        for (_, why) in &expired[first..] {
            match why {
                Expired::Handshake => stats.handshake_timeouts += 1,
                Expired::Idle => stats.idle_timeouts += 1,
                Expired::Close => stats.close_timeouts += 1,
            }
        }
        stats.token_expirations += token_expired.len() as u64;
        for id in token_expired {
            self.close(
                id,
                CLOSE_TOKEN_EXPIRED,
                "token expired",
                CloseReason::TokenExpired,
            );
        }
    }
}

fn deadline_passed(conn: &Conn, l: &HubLimits, now: u64) -> Option<Expired> {
    let since = now.saturating_sub(conn.since_ms);
    match (conn.kind, conn.state) {
        (ConnKind::Http, _) if since >= l.handshake_timeout_ms => Some(Expired::Handshake),
        (ConnKind::Http, _) => None,
        (_, ConnState::Closing) if since >= l.close_timeout_ms => Some(Expired::Close),
        (_, ConnState::Closing) => None,
        (_, ConnState::Open) => {
            let quiet = now.saturating_sub(conn.last_recv_ms);
            (l.idle_timeout_ms > 0 && quiet >= l.idle_timeout_ms).then_some(Expired::Idle)
        }
    }
}

/// Per-connection share of [`Hub::backlog`].
pub const BACKLOG_CAP: usize = 64 * 1024;

/// Worker-wide outbound byte counts, kept in step with every connection's
/// `pending_bytes` (every change goes through `add`/`sub`).
#[derive(Debug, Default)]
struct Totals {
    /// Everything queued or in flight.
    all: usize,
    /// The same with each connection counted up to [`BACKLOG_CAP`].
    capped: usize,
}

impl Totals {
    fn add(&mut self, conn: &mut Conn, n: usize) {
        let old = conn.pending_bytes;
        conn.pending_bytes += n;
        self.all += n;
        self.capped += conn.pending_bytes.min(BACKLOG_CAP) - old.min(BACKLOG_CAP);
    }

    fn sub(&mut self, conn: &mut Conn, n: usize) {
        let old = conn.pending_bytes;
        conn.pending_bytes -= n;
        self.all -= n;
        self.capped -= old.min(BACKLOG_CAP) - conn.pending_bytes.min(BACKLOG_CAP);
    }
}

fn wake(conn: &mut Conn) {
    if let Some(w) = conn.writer.take() {
        w.wake();
    }
}

/// What queueing a data frame touches besides the connection itself.
struct Queueing<'a> {
    limits: &'a HubLimits,
    stats: &'a mut Stats,
    now_ms: u64,
    totals: &'a mut Totals,
    pacer: &'a mut Pacer,
}

impl Queueing<'_> {
    /// Queues one data frame for connection `id` under the slow-consumer
    /// policy and schedules its writer; returns whether it was queued.
    fn enqueue_data(&mut self, id: ConnId, conn: &mut Conn, frame: &Bytes) -> bool {
        let (limits, stats, totals) = (self.limits, &mut *self.stats, &mut *self.totals);
        if conn.state != ConnState::Open {
            stats.messages_not_delivered += 1;
            return false;
        }
        let len = frame.len();
        // A frame larger than the whole bound still goes to an idle connection:
        // the message-size limit, not the queue bound, governs single messages.
        if over_limits(conn, len, totals.all, limits) {
            if totals.all.saturating_add(len) > limits.max_total_outbound {
                stats.outbound_budget_exceeded += 1;
            }
            if !make_room(conn, len, limits, stats, self.now_ms, totals) {
                return false;
            }
        }
        totals.add(conn, len);
        conn.queue.push_back(frame.clone());
        self.pacer.schedule(id, conn, stats);
        true
    }
}

/// Whether queueing `len` more bytes to `conn` would cross its own bound or
/// the worker's total budget. A frame larger than the bound still goes to
/// an idle connection: the message-size limit governs single messages.
fn over_limits(conn: &Conn, len: usize, total: usize, limits: &HubLimits) -> bool {
    conn.pending_bytes > 0
        && (conn.pending_bytes.saturating_add(len) > limits.max_outbound_queue
            || total.saturating_add(len) > limits.max_total_outbound)
}

/// Applies the slow-consumer policy; returns whether the new frame may be queued.
fn make_room(
    conn: &mut Conn,
    len: usize,
    limits: &HubLimits,
    stats: &mut Stats,
    now_ms: u64,
    totals: &mut Totals,
) -> bool {
    match limits.slow_consumer {
        SlowConsumerPolicy::Disconnect => {
            let dropped = conn.queue.len() as u64 + 1;
            let freed: usize = conn.queue.iter().map(Bytes::len).sum();
            conn.queue.clear();
            totals.sub(conn, freed);
            stats.slow_consumer_disconnects += 1;
            stats.messages_not_delivered += dropped;
            crate::log!(
                Info,
                "slow consumer disconnected",
                fd = conn.fd,
                dropped = dropped
            );
            conn.state = ConnState::Closing;
            // The close deadline runs from now, as for every other close
            // (`close_with`), not from when the connection was opened.
            conn.since_ms = now_ms;
            let close = encode_close_frame(CLOSE_SLOW_CONSUMER, "slow consumer");
            totals.add(conn, close.len());
            conn.queue.push_back(close);
            wake(conn);
            false
        }
        SlowConsumerPolicy::DropOldest => {
            while over_limits(conn, len, totals.all, limits) {
                let Some(old) = conn.queue.pop_front() else {
                    // Everything left is in flight: drop the new frame instead.
                    stats.slow_consumer_drops += 1;
                    stats.messages_not_delivered += 1;
                    return false;
                };
                totals.sub(conn, old.len());
                stats.slow_consumer_drops += 1;
                stats.messages_not_delivered += 1;
            }
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    fn limits() -> HubLimits {
        HubLimits::from(&Config::default())
    }

    struct Counter(AtomicUsize);
    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn drain(hub: &mut Hub, id: ConnId) -> Vec<Bytes> {
        let mut out = Vec::new();
        hub.take_batch(id, &mut out);
        let n = out.iter().map(Bytes::len).sum();
        hub.wrote(id, n);
        out
    }

    fn ws(hub: &mut Hub, kind: ConnKind) -> ConnId {
        let id = hub.register(-1).unwrap();
        hub.upgrade(id, kind);
        id
    }

    fn paced_hub(window: usize) -> Hub {
        Hub::new(HubLimits {
            fanout_window: window,
            ..limits()
        })
    }

    /// `n` subscribers of "c" whose writers sleep, each with its own wake
    /// counter.
    fn sleeping_subscribers(hub: &mut Hub, n: usize) -> Vec<(ConnId, Arc<Counter>)> {
        (0..n)
            .map(|_| {
                let id = ws(hub, ConnKind::Simple);
                hub.subscribe(id, "c").unwrap();
                let counter = Arc::new(Counter(AtomicUsize::new(0)));
                let waker = Waker::from(counter.clone());
                assert!(hub
                    .poll_writer(id, &mut Context::from_waker(&waker))
                    .is_pending());
                (id, counter)
            })
            .collect()
    }

    fn woken(subs: &[(ConnId, Arc<Counter>)]) -> Vec<usize> {
        subs.iter()
            .map(|(_, c)| c.0.load(Ordering::SeqCst))
            .collect()
    }

    /// What a woken writer does: poll, write its batch, go back to sleep.
    fn run_writer(hub: &mut Hub, sub: &(ConnId, Arc<Counter>)) -> usize {
        let waker = Waker::from(sub.1.clone());
        let mut cx = Context::from_waker(&waker);
        assert_eq!(
            hub.poll_writer(sub.0, &mut cx),
            Poll::Ready(WriterWork::Write)
        );
        let frames = drain(hub, sub.0).len();
        assert!(hub.poll_writer(sub.0, &mut cx).is_pending());
        frames
    }

    #[test]
    fn a_fan_out_wakes_at_most_a_window_of_writers_at_a_time() {
        let mut hub = paced_hub(2);
        let subs = sleeping_subscribers(&mut hub, 5);
        assert_eq!(hub.publish("c", OpCode::Text, b"one", None), 5);
        assert_eq!(woken(&subs), [1, 1, 0, 0, 0]);
        assert_eq!(hub.stats.fanout_paced, 3);
        // A second message joins the queues: waiting writers will write
        // both frames in one batch, nobody is woken twice.
        hub.publish("c", OpCode::Text, b"two", None);
        assert_eq!(woken(&subs), [1, 1, 0, 0, 0]);
        // Each completed write passes its place on, in FIFO order.
        assert_eq!(run_writer(&mut hub, &subs[0]), 2);
        assert_eq!(woken(&subs), [1, 1, 1, 0, 0]);
        assert_eq!(run_writer(&mut hub, &subs[1]), 2);
        assert_eq!(run_writer(&mut hub, &subs[2]), 2);
        assert_eq!(woken(&subs), [1, 1, 1, 1, 1]);
        assert_eq!(run_writer(&mut hub, &subs[3]), 2);
        assert_eq!(run_writer(&mut hub, &subs[4]), 2);
        // Nothing lost, nothing left in the window.
        assert_eq!(hub.stats.deliveries, 10);
        assert_eq!((hub.pacer.active, hub.pacer.waiting.len()), (0, 0));
        assert_eq!(hub.total_pending(), 0);
    }

    #[test]
    fn departed_connections_give_up_their_place_and_pongs_wait_their_turn() {
        let mut hub = paced_hub(1);
        let subs = sleeping_subscribers(&mut hub, 4);
        hub.publish("c", OpCode::Text, b"x", None);
        assert_eq!(woken(&subs), [1, 0, 0, 0]);
        // A waiting connection leaves: its queue entry is skipped.
        hub.remove(subs[1].0);
        // Another gets a pong to send: its writer wakes but waits its turn.
        hub.queue_pong(subs[2].0, b"");
        assert_eq!(woken(&subs)[2], 1);
        let waker = Waker::from(subs[2].1.clone());
        let pending = hub.poll_writer(subs[2].0, &mut Context::from_waker(&waker));
        assert!(pending.is_pending());
        // The active one leaves without writing: its place is freed and
        // goes past the departed one to the next in line.
        hub.remove(subs[0].0);
        assert_eq!(woken(&subs)[2], 2);
        assert_eq!(
            run_writer(&mut hub, &subs[2]),
            2,
            "pong and data in one write"
        );
        assert_eq!(woken(&subs)[3], 1);
        assert_eq!(run_writer(&mut hub, &subs[3]), 1);
        assert_eq!((hub.pacer.active, hub.pacer.waiting.len()), (0, 0));
    }

    #[test]
    fn a_writer_that_finds_more_queued_takes_its_turn_again() {
        let mut hub = paced_hub(1);
        let subs = sleeping_subscribers(&mut hub, 2);
        hub.publish("c", OpCode::Text, b"1", None);
        // Writer 0 takes its batch; while it writes, more is published.
        let mut out = Vec::new();
        hub.take_batch(subs[0].0, &mut out);
        hub.publish("c", OpCode::Text, b"2", None);
        hub.wrote(subs[0].0, 3);
        // The place went to writer 1, which has waited longest: writer 0,
        // with a frame queued, must wait for it instead of looping.
        assert_eq!(woken(&subs), [1, 1]);
        let waker = Waker::from(subs[0].1.clone());
        assert!(hub
            .poll_writer(subs[0].0, &mut Context::from_waker(&waker))
            .is_pending());
        assert_eq!(run_writer(&mut hub, &subs[1]), 2);
        assert_eq!(woken(&subs)[0], 2);
        assert_eq!(run_writer(&mut hub, &subs[0]), 1);
    }

    #[test]
    fn writes_stuck_on_their_peers_hand_their_places_on() {
        let mut hub = paced_hub(2);
        let subs = sleeping_subscribers(&mut hub, 5);
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(hub.poll_pacer_backlog(&mut cx).is_pending());
        hub.publish("c", OpCode::Text, b"x", None);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1, "watchdog woken");
        assert!(hub.poll_pacer_backlog(&mut cx).is_ready());
        // Writers 0 and 1 take their batches; their writes never complete
        // (peers that do not read).
        for sub in &subs[..2] {
            let mut out = Vec::new();
            hub.take_batch(sub.0, &mut out);
        }
        // Taken during the first interval: they get one.
        assert_eq!(hub.pacer_tick(), 0);
        assert_eq!(woken(&subs), [1, 1, 0, 0, 0]);
        // Held through a whole interval: written off, places handed on.
        assert_eq!(hub.pacer_tick(), 2);
        assert_eq!(woken(&subs), [1, 1, 1, 1, 0]);
        assert_eq!(hub.stats.fanout_window_stalls, 2);
        // A stalled write completing later frees nothing.
        hub.wrote(subs[0].0, 3);
        assert_eq!(hub.pacer.active, 2);
        assert_eq!(woken(&subs)[4], 0);
        // A completion hands a place on as usual.
        run_writer(&mut hub, &subs[2]);
        assert_eq!(woken(&subs)[4], 1);
        run_writer(&mut hub, &subs[3]);
        run_writer(&mut hub, &subs[4]);
        hub.wrote(subs[1].0, 3);
        assert_eq!((hub.pacer.active, hub.pacer.waiting.len()), (0, 0));
        assert!(hub.poll_pacer_backlog(&mut cx).is_pending());
        assert!(hub.pacer.held.is_empty());
    }

    #[test]
    fn stuck_places_are_written_off_even_while_others_complete() {
        let mut hub = paced_hub(2);
        let subs = sleeping_subscribers(&mut hub, 4);
        hub.publish("c", OpCode::Text, b"x", None);
        let mut out = Vec::new();
        hub.take_batch(subs[0].0, &mut out); // never completes
        assert_eq!(hub.pacer_tick(), 0);
        // Writes keep completing through the one working place...
        run_writer(&mut hub, &subs[1]);
        assert_eq!(woken(&subs), [1, 1, 1, 0]);
        // ...but the stuck place is still written off after an interval,
        // and the window is whole again.
        assert_eq!(hub.pacer_tick(), 1);
        assert_eq!(woken(&subs), [1, 1, 1, 1]);
        assert_eq!(hub.pacer.active, 2);
    }

    #[test]
    fn one_stuck_write_cannot_grow_the_place_log_or_shrink_the_window_for_good() {
        let mut hub = paced_hub(2);
        let subs = sleeping_subscribers(&mut hub, 2);
        let (stuck, busy) = (&subs[0], &subs[1]);
        for i in 0..100 {
            hub.publish("c", OpCode::Text, b"x", None);
            if i == 0 {
                let mut out = Vec::new();
                hub.take_batch(stuck.0, &mut out); // never completes
            }
            run_writer(&mut hub, busy);
            assert!(hub.pacer.held.len() <= HELD_LIMIT * 2 + 1, "{i}");
        }
        // Overtaken by HELD_LIMIT windows of writers: written off without
        // the watchdog, so the window is whole again.
        assert_eq!(hub.stats.fanout_window_stalls, 1);
        assert_eq!(hub.pacer.active, 0);
    }

    #[test]
    fn keepalive_pings_are_paced_too() {
        let mut hub = Hub::new(HubLimits {
            fanout_window: 2,
            ping_interval_ms: 10,
            ..limits()
        });
        let subs = sleeping_subscribers(&mut hub, 5);
        hub.set_now(20);
        let mut expired = Vec::new();
        hub.sweep(&mut expired);
        assert!(expired.is_empty());
        assert_eq!(woken(&subs), [1, 1, 0, 0, 0]);
        for sub in &subs {
            run_writer(&mut hub, sub);
        }
        assert_eq!(woken(&subs), [1, 1, 1, 1, 1]);
    }

    #[test]
    fn a_window_of_zero_wakes_everyone_at_once() {
        let mut hub = paced_hub(0);
        let subs = sleeping_subscribers(&mut hub, 300);
        hub.publish("c", OpCode::Text, b"x", None);
        assert!(woken(&subs).iter().all(|&n| n == 1));
        assert_eq!(hub.stats.fanout_paced, 0);
    }

    #[test]
    fn channel_names_are_validated() {
        assert!(valid_channel_name("news.eu-1:room_2@x"));
        for bad in ["", "a b", "ä", "a/b", &"x".repeat(129)] {
            assert!(!valid_channel_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn one_encoded_frame_is_shared_by_every_subscriber() {
        let mut hub = Hub::new(limits());
        let ids: Vec<_> = (0..3).map(|_| ws(&mut hub, ConnKind::Simple)).collect();
        for &id in &ids {
            hub.subscribe(id, "c").unwrap();
        }
        assert_eq!(hub.publish("c", OpCode::Text, b"hi", None), 3);
        let frames: Vec<Bytes> = ids
            .iter()
            .map(|&id| drain(&mut hub, id).remove(0))
            .collect();
        assert_eq!(&frames[0][..], b"\x81\x02hi");
        // Same allocation, not copies.
        assert!(frames.iter().all(|f| f.as_ptr() == frames[0].as_ptr()));
        assert_eq!(hub.stats.deliveries, 3);
    }

    #[test]
    fn multi_mode_gets_an_envelope_naming_the_channel() {
        let mut hub = Hub::new(limits());
        let id = ws(&mut hub, ConnKind::Multi);
        hub.subscribe(id, "room").unwrap();
        hub.publish("room", OpCode::Text, b"x\"y", None);
        let f = drain(&mut hub, id).remove(0);
        let json: serde_json::Value = serde_json::from_slice(&f[2..]).unwrap();
        assert_eq!(json["type"], "message");
        assert_eq!(json["channel"], "room");
        assert_eq!(json["data"], "x\"y");
    }

    #[test]
    fn disconnect_cleans_up_only_its_subscriptions() {
        let mut hub = Hub::new(limits());
        let a = ws(&mut hub, ConnKind::Multi);
        let b = ws(&mut hub, ConnKind::Multi);
        let c = ws(&mut hub, ConnKind::Multi);
        for id in [a, b, c] {
            hub.subscribe(id, "x").unwrap();
        }
        hub.subscribe(a, "only-a").unwrap();
        hub.remove(a);
        assert_eq!(hub.subscriber_count("x"), 2);
        assert_eq!(hub.channel_count(), 1, "empty channel dropped");
        // Back-pointers survived the swap_remove: c can still leave cleanly.
        assert!(hub.unsubscribe(c, "x"));
        assert!(!hub.unsubscribe(c, "x"));
        assert_eq!(hub.subscriber_count("x"), 1);
        hub.remove(b);
        assert_eq!((hub.channel_count(), hub.stats.subscriptions), (0, 0));
    }

    #[test]
    fn interest_changes_are_logged_in_order_once_tracked() {
        let mut hub = Hub::new(limits());
        let a = ws(&mut hub, ConnKind::Multi);
        hub.subscribe(a, "before").unwrap();
        hub.track_interest();
        assert_eq!(&*hub.interest_snapshot()[0], "before");
        let b = ws(&mut hub, ConnKind::Multi);
        hub.subscribe(b, "x").unwrap();
        hub.subscribe(a, "x").unwrap();
        hub.remove(b);
        hub.remove(a);
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let mut out = Vec::new();
        assert!(hub.poll_interest(&mut cx, &mut out).is_ready());
        let got: Vec<(&str, bool)> = out.iter().map(|(n, g)| (&**n, *g)).collect();
        assert_eq!(got, vec![("x", true), ("before", false), ("x", false)]);
        out.clear();
        assert!(hub.poll_interest(&mut cx, &mut out).is_pending());
        let c = ws(&mut hub, ConnKind::Multi);
        hub.subscribe(c, "y").unwrap();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1, "upstream woken");
    }

    #[test]
    fn subscriptions_are_bounded_and_idempotent() {
        let mut l = limits();
        l.max_subscriptions = 2;
        let mut hub = Hub::new(l);
        let id = ws(&mut hub, ConnKind::Multi);
        hub.subscribe(id, "a").unwrap();
        hub.subscribe(id, "a").unwrap();
        hub.subscribe(id, "b").unwrap();
        assert_eq!(
            hub.subscribe(id, "c"),
            Err(SubscribeError::TooManySubscriptions)
        );
        assert_eq!(
            hub.subscribe(id, "bad name"),
            Err(SubscribeError::InvalidChannel)
        );
        assert_eq!(hub.conn(id).unwrap().subscription_count(), 2);
    }

    #[test]
    fn connections_are_bounded() {
        let mut l = limits();
        l.max_connections = 2;
        let mut hub = Hub::new(l);
        assert!(hub.register(1).is_some() && hub.register(2).is_some());
        assert!(hub.register(3).is_none());
    }

    #[test]
    fn slow_consumer_is_disconnected_with_1008_and_counted() {
        let mut l = limits();
        l.max_outbound_queue = 100;
        let mut hub = Hub::new(l);
        let slow = ws(&mut hub, ConnKind::Simple);
        let fast = ws(&mut hub, ConnKind::Simple);
        hub.subscribe(slow, "c").unwrap();
        hub.subscribe(fast, "c").unwrap();
        for _ in 0..5 {
            hub.publish("c", OpCode::Binary, &[0; 40], None);
            drain(&mut hub, fast);
        }
        assert_eq!(hub.stats.slow_consumer_disconnects, 1);
        assert_eq!(hub.conn(slow).unwrap().state(), ConnState::Closing);
        let out = drain(&mut hub, slow);
        assert_eq!(out.len(), 1, "queue replaced by the close frame");
        assert_eq!(&out[0][..4], &[0x88, 15, 0x03, 0xF0]);
        assert!(hub.conn(slow).unwrap().pending_bytes() == 0);
        assert_eq!(hub.stats.deliveries, 5 + 2);
    }

    #[test]
    fn slow_consumer_close_deadline_starts_when_it_is_cut() {
        let mut l = limits();
        l.max_outbound_queue = 100;
        l.close_timeout_ms = 1000;
        let mut hub = Hub::new(l);
        let slow = ws(&mut hub, ConnKind::Simple);
        hub.subscribe(slow, "c").unwrap();
        hub.set_now(60_000);
        for _ in 0..3 {
            hub.publish("c", OpCode::Binary, &[0; 40], None);
        }
        assert_eq!(hub.conn(slow).unwrap().state(), ConnState::Closing);
        let mut expired = Vec::new();
        hub.set_now(60_999);
        hub.sweep(&mut expired);
        assert!(
            expired.is_empty(),
            "close deadline counted from the connect"
        );
        hub.set_now(61_000);
        hub.sweep(&mut expired);
        assert_eq!(expired, vec![(-1, Expired::Close)]);
    }

    #[test]
    fn the_worker_wide_budget_bounds_all_queues_together() {
        let mut l = limits();
        l.max_outbound_queue = 1000;
        l.max_total_outbound = 250;
        let mut hub = Hub::new(l);
        let ids: Vec<_> = (0..4).map(|_| ws(&mut hub, ConnKind::Simple)).collect();
        for &id in &ids {
            hub.subscribe(id, "c").unwrap();
        }
        // 4 × 42 B = 168 B fits; the second round would make 336 B.
        hub.publish("c", OpCode::Binary, &[0; 40], None);
        assert_eq!(hub.total_pending(), 168);
        hub.publish("c", OpCode::Binary, &[0; 40], None);
        assert!(
            hub.total_pending() <= 250 + 4 * 4,
            "{}",
            hub.total_pending()
        );
        assert!(hub.stats.outbound_budget_exceeded >= 1);
        assert!(hub.stats.slow_consumer_disconnects >= 1);
        for &id in &ids {
            drain(&mut hub, id);
            hub.remove(id);
        }
        assert_eq!(hub.total_pending(), 0, "every byte accounted for");
        assert_eq!(hub.backlog(), 0);
    }

    #[test]
    fn drop_oldest_keeps_the_queue_bounded_and_counts_drops() {
        let mut l = limits();
        l.max_outbound_queue = 100;
        l.slow_consumer = SlowConsumerPolicy::DropOldest;
        let mut hub = Hub::new(l);
        let id = ws(&mut hub, ConnKind::Simple);
        hub.subscribe(id, "c").unwrap();
        for i in 0..10u8 {
            hub.publish("c", OpCode::Binary, &[i; 40], None);
            assert!(hub.conn(id).unwrap().pending_bytes() <= 100);
        }
        let out = drain(&mut hub, id);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1][2], 9, "newest kept");
        assert_eq!(hub.stats.slow_consumer_drops, 8);
        assert_eq!(hub.stats.messages_not_delivered, 8);
    }

    #[test]
    fn a_ping_flood_occupies_a_bounded_number_of_control_slots() {
        let mut hub = Hub::new(limits());
        let id = ws(&mut hub, ConnKind::Simple);
        for i in 0..10_000u32 {
            hub.queue_pong(id, &i.to_be_bytes());
        }
        let out = drain(&mut hub, id);
        assert_eq!(out.len(), MAX_PENDING_CONTROL);
        assert_eq!(
            &out[0][2..],
            &0u32.to_be_bytes(),
            "oldest answered in order"
        );
        assert_eq!(
            &out[15][2..],
            &9_999u32.to_be_bytes(),
            "latest always answered"
        );
    }

    #[test]
    fn writer_is_woken_once_per_burst_and_finishes_after_close() {
        let mut hub = Hub::new(limits());
        let id = ws(&mut hub, ConnKind::Simple);
        hub.subscribe(id, "c").unwrap();
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(hub.poll_writer(id, &mut cx).is_pending());
        for _ in 0..3 {
            hub.publish("c", OpCode::Text, b"m", None);
        }
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert_eq!(hub.poll_writer(id, &mut cx), Poll::Ready(WriterWork::Write));
        assert_eq!(drain(&mut hub, id).len(), 3, "three messages, one batch");
        hub.close(id, 1001, "bye", CloseReason::Shutdown);
        hub.publish("c", OpCode::Text, b"late", None);
        let mut out = Vec::new();
        assert!(
            hub.take_batch(id, &mut out),
            "close frame is the last batch"
        );
        assert_eq!(out.len(), 1);
        assert_eq!(
            hub.poll_writer(id, &mut cx),
            Poll::Ready(WriterWork::Finish)
        );
        assert_eq!(hub.stats.messages_not_delivered, 1);
    }

    #[test]
    fn exclude_sender_skips_the_publisher() {
        let mut l = limits();
        l.exclude_sender = true;
        let mut hub = Hub::new(l);
        let a = ws(&mut hub, ConnKind::Simple);
        let b = ws(&mut hub, ConnKind::Simple);
        hub.subscribe(a, "c").unwrap();
        hub.subscribe(b, "c").unwrap();
        let serial = hub.conn(a).unwrap().serial();
        assert_eq!(hub.publish("c", OpCode::Text, b"m", Some(serial)), 1);
        assert!(drain(&mut hub, a).is_empty());
    }

    #[test]
    fn sweep_pings_quiet_peers_then_expires_dead_ones() {
        let mut l = limits();
        l.ping_interval_ms = 1000;
        l.idle_timeout_ms = 3000;
        l.handshake_timeout_ms = 500;
        let mut hub = Hub::new(l);
        let http = hub.register(7).unwrap();
        let id = hub.register(8).unwrap();
        hub.upgrade(id, ConnKind::Simple);
        let mut expired = Vec::new();
        hub.set_now(1000);
        hub.sweep(&mut expired);
        assert_eq!(expired, vec![(7, Expired::Handshake)]);
        let ping = drain(&mut hub, id);
        assert_eq!(&ping[0][..], &[0x89, 0]);
        hub.remove(http);
        expired.clear();
        hub.set_now(2500);
        hub.sweep(&mut expired);
        assert!(expired.is_empty());
        assert!(
            drain(&mut hub, id).is_empty(),
            "one ping outstanding at a time"
        );
        hub.set_now(3000);
        hub.sweep(&mut expired);
        assert_eq!(expired, vec![(8, Expired::Idle)]);
        assert_eq!(hub.stats.idle_timeouts, 1);
    }
}
