//! One entry of the connection table: what the hub knows about a
//! connection (kind, state, subscriptions, queues, timers, pacing) and the
//! accessors the edge may read.

use std::collections::VecDeque;
use std::task::Waker;

use bytes::Bytes;

use super::format::Format;

/// Index of a connection in the table.
pub type ConnId = usize;
/// Index of a channel in the registry.
pub type ChannelId = usize;

/// How a connection receives what is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnKind {
    /// A plain HTTP connection (never subscribed).
    Http,
    /// A WebSocket receiving what is published in wire format `Format`
    /// (encoded by the edge's encoder for it).
    Ws(Format),
}

impl ConnKind {
    /// The wire format of a WebSocket (or event stream); `None` for HTTP.
    pub fn format(self) -> Option<Format> {
        match self {
            ConnKind::Ws(f) => Some(f),
            ConnKind::Http => None,
        }
    }
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// Data flows both ways.
    Open,
    /// A close frame is queued or sent: no more data is queued for it.
    Closing,
}

/// A connection's place in the fan-out window (the pacer's state, kept in
/// the entry so the fan-out touches one cache line per subscriber).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pace {
    /// Holds no place and waits for none: its writer sleeps with nothing
    /// queued, or is running and asks for a place before its next write.
    Idle,
    /// In the pacer's queue, waiting for a place in the window.
    Waiting,
    /// Holds place number `n` (woken by the pacer, or admitted before a
    /// write) until its write completes.
    Active(u32),
    /// Was active, but its write waits for its peer: the place was written
    /// off (`Pacer::write_off_stalled`); the write completing frees
    /// nothing.
    Released,
}

/// One connection in the table.
#[derive(Debug)]
pub struct Conn {
    /// The socket, for `shutdown(2)` by the sweeper; never read or written here.
    pub fd: i32,
    pub(super) kind: ConnKind,
    pub(super) state: ConnState,
    /// Set when the final batch (containing the close frame) was taken, or
    /// when the connection is being torn down without one.
    pub(super) finished: bool,
    /// The peer's close frame arrived.
    pub(super) peer_closed: bool,
    /// Subscriptions: (channel, index of this connection in its subscriber list).
    pub(super) subs: Vec<(ChannelId, u32)>,
    /// Pending control frames (pongs, our ping), written before data. At
    /// most `MAX_PENDING_CONTROL` (`outbox`): past that
    /// the newest replaces the last (RFC 6455 5.5.3 lets us answer only the
    /// latest ping), so a ping flood cannot grow memory.
    pub(super) ctrl: VecDeque<Bytes>,
    pub(super) queue: VecDeque<Bytes>,
    /// Frames ever taken off `queue`'s front (written, dropped or
    /// cleared), wrapping: a frame's index is its sequence number minus
    /// this (latest-value channels find their frames by it: `latest`).
    pub(super) dequeued: u32,
    /// Bytes in `queue` plus bytes taken by the writer and not yet written.
    pub(super) pending_bytes: usize,
    pub(super) writer: Option<Waker>,
    /// Coarse time (ms) of the last byte received, for ping/idle checks.
    pub(super) last_recv_ms: u64,
    /// Coarse time (ms, wrapping: only recent differences matter) of the
    /// last completed write, for parking; u32 fits the entry's padding.
    pub(super) last_sent_ms: u32,
    /// Coarse time (ms) the current deadline started (request head, close).
    pub(super) since_ms: u64,
    pub(super) ping_outstanding: bool,
    /// Coarse time (s since the hub's epoch) the connection's token
    /// expires, 0 = no token: the sweep closes it with
    /// `CLOSE_TOKEN_EXPIRED` then, so expiry costs no timer per
    /// connection (u32 seconds fit the entry's padding: 136 years).
    pub(super) token_expires_s: u32,
    /// A deadline already fired; the edge is tearing it down.
    pub(super) expired: bool,
    /// When the oldest frame now in `queue` was published (ns since the
    /// hub's epoch; 0 = none), and the same for the batch being written:
    /// the fan-out delay histogram's raw data.
    pub(super) queued_since_ns: u64,
    pub(super) batch_since_ns: u64,
    /// Unique for the hub's life (slab keys are reused): identifies the
    /// publisher for `--exclude-sender`, also across the Redis hop.
    pub(super) serial: u64,
    /// Where the writer is in the fan-out window (`Pacer`).
    pub(super) pace: Pace,
    /// Milliseconds its writes have accepted no byte while it had data
    /// to write, as counted by the sweeps (`timers::sweep`); reset by any
    /// write progress and when data is queued with nothing pending.
    pub(super) stalled_ms: u32,
    /// Counted in `Totals::pressing` (open and over its bound).
    pub(super) pressing: bool,
    /// Parked (or being parked): its tasks are gone or going, and
    /// `writer` holds the edge's park waker (`Hub::park`).
    pub(super) parked: bool,
    /// Subscribed to a latest-value channel: its writer takes small
    /// batches (`outbox::LATEST_BATCH_BYTES`), so that what waits stays in
    /// the queue, where a newer value can replace it.
    pub(super) latest: bool,
}

impl Conn {
    /// A fresh plain HTTP connection on socket `fd`, its deadlines
    /// starting at `now_ms`.
    pub(super) fn new(fd: i32, serial: u64, now_ms: u64) -> Conn {
        Conn {
            fd,
            kind: ConnKind::Http,
            state: ConnState::Open,
            finished: false,
            peer_closed: false,
            subs: Vec::new(),
            ctrl: VecDeque::new(),
            queue: VecDeque::new(),
            dequeued: 0,
            pending_bytes: 0,
            writer: None,
            last_recv_ms: now_ms,
            last_sent_ms: now_ms as u32,
            since_ms: now_ms,
            ping_outstanding: false,
            token_expires_s: 0,
            expired: false,
            queued_since_ns: 0,
            batch_since_ns: 0,
            serial,
            pace: Pace::Idle,
            stalled_ms: 0,
            pressing: false,
            parked: false,
            latest: false,
        }
    }

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

/// Wakes the connection's writer, if it sleeps.
pub(super) fn wake(conn: &mut Conn) {
    if let Some(w) = conn.writer.take() {
        w.wake();
    }
}
