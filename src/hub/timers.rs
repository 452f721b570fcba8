//! Deadlines and keepalive: why connections close, which deadline a
//! connection is under in each state, and the periodic sweep that pings
//! quiet peers and reports expired sockets to the edge.

use slab::Slab;

use super::conn::{Conn, ConnKind, ConnState};
use super::format::{Encoders, Keepalives};
use super::limits::{HubLimits, SlowConsumerPolicy};
use super::outbox::{self, Totals};
use super::pacer::Pacer;
use crate::stats::Stats;
use crate::ws::frame::{encode_server_frame, OpCode};

/// Close code sent on server shutdown ("going away").
pub const CLOSE_GOING_AWAY: u16 = 1001;

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
    /// Nothing received for `--idle-timeout`, on a format that says so
    /// with a close code (Pusher's 4201) rather than a shut socket.
    Idle,
}

/// Close code sent when a connection's token expires without a refresh
/// (the 4000-4999 range is for applications, RFC 6455 7.4.2).
pub const CLOSE_TOKEN_EXPIRED: u16 = 4001;

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

/// A closing handshake the sweep asks the hub to start.
pub(super) struct Closing {
    pub id: usize,
    pub code: u16,
    pub reason: &'static str,
    pub why: CloseReason,
}

/// What one sweep found: sockets whose deadline passed (for the edge)
/// and open WebSockets to close with a code (for the hub): an expired
/// token, or an idle connection of a format with an idle close code.
pub(super) struct Due<'a> {
    pub expired: &'a mut Vec<(i32, Expired)>,
    pub closes: Vec<Closing>,
}

/// Longest step one sweep counts towards a write stall: a sweep that runs
/// late because the worker was busy (writing, among others) must not make
/// every connection look stalled for the whole delay.
pub(super) const MAX_STALL_STEP_MS: u64 = 200;

/// The sweep's view of the clock: coarse time now, and how long since the
/// previous sweep.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    pub(super) now: u64,
    pub(super) step: u64,
}

/// The periodic sweep at coarse time `clock.now`: applies the slow-consumer
/// policy to connections whose writes stall, queues keepalive pings
/// (paced like a fan-out), appends the sockets whose deadline passed and
/// collects the connections whose token expired.
pub(super) fn sweep(
    conns: &mut Slab<Conn>,
    l: &HubLimits,
    clock: Clock,
    (pacer, totals): (&mut Pacer, &mut Totals),
    stats: &mut Stats,
    encoders: &Encoders,
    due: &mut Due<'_>,
) {
    let now = clock.now;
    let expired = &mut *due.expired;
    let first = expired.len();
    // One ping frame (per format) shared by every connection pinged in
    // this sweep.
    let mut pings = Keepalives::new(encoders, encode_server_frame(OpCode::Ping, b""));
    for (id, conn) in conns.iter_mut() {
        if conn.expired {
            continue;
        }
        if token_due(conn, now) {
            conn.token_expires_s = 0;
            stats.token_expirations += 1;
            due.closes.push(Closing {
                id,
                code: CLOSE_TOKEN_EXPIRED,
                reason: "token expired",
                why: CloseReason::TokenExpired,
            });
        }
        if conn.pending_bytes > 0 {
            let step = clock.step.min(MAX_STALL_STEP_MS) as u32;
            conn.stalled_ms = conn.stalled_ms.saturating_add(step);
        }
        if write_stalled(conn, l) {
            // Nothing to drop its way out of: its writes do not move.
            stats.write_stall_timeouts += 1;
            outbox::cut_slow(conn, 0, stats, now, totals);
        } else if is_slow(conn, l) {
            match l.slow_consumer {
                SlowConsumerPolicy::Disconnect => outbox::cut_slow(conn, 0, stats, now, totals),
                SlowConsumerPolicy::DropOldest => {
                    outbox::drop_oldest(conn, l.max_outbound_queue, stats, totals);
                }
            }
        }
        let heartbeat = heartbeat_of(conn, encoders);
        if let Some(why) = deadline_passed(conn, l, now, heartbeat.is_some()) {
            match idle_close_code(conn, why, encoders) {
                // Closed with a code: the close timeout still shuts a
                // peer that does not answer.
                Some(code) => due.closes.push(idle_closing(id, code, stats)),
                None => {
                    conn.expired = true;
                    expired.push((conn.fd, why));
                }
            }
            continue;
        }
        if keepalive_due(conn, l, now, heartbeat) {
            let ping = pings.frame_for(conn.kind.format());
            // Charged once, by the first connection that takes it.
            totals.charge(ping);
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
}

fn idle_closing(id: usize, code: u16, stats: &mut Stats) -> Closing {
    stats.idle_timeouts += 1;
    Closing {
        id,
        code,
        reason: "Pong reply not received",
        why: CloseReason::Idle,
    }
}

/// The close code an idle `conn` gets from its format, if it has one.
fn idle_close_code(conn: &Conn, why: Expired, encoders: &Encoders) -> Option<u16> {
    match (why, conn.kind) {
        (Expired::Idle, ConnKind::Ws(f)) => encoders.idle_close(f),
        _ => None,
    }
}

/// An open WebSocket whose token's `exp` (coarse seconds; 0 = none) has
/// passed.
fn token_due(conn: &Conn, now_ms: u64) -> bool {
    conn.token_expires_s != 0
        && now_ms / 1000 >= u64::from(conn.token_expires_s)
        && conn.state == ConnState::Open
        && conn.kind != ConnKind::Http
}

/// An open WebSocket over its bound whose writes have not accepted a byte
/// for the grace period: it does not keep up. (One that reads at line
/// rate is never cut for a publisher's burst: the burst pauses the
/// publisher, and its queue drains.)
fn is_slow(conn: &Conn, l: &HubLimits) -> bool {
    conn.kind != ConnKind::Http
        && conn.state == ConnState::Open
        && conn.pending_bytes > l.max_outbound_queue
        && u64::from(conn.stalled_ms) >= l.slow_grace_ms
}

/// An open WebSocket with data to write whose writes have accepted no byte
/// for `--write-stall-timeout`, however little it has queued.
fn write_stalled(conn: &Conn, l: &HubLimits) -> bool {
    conn.kind != ConnKind::Http
        && conn.state == ConnState::Open
        && conn.pending_bytes > 0
        && l.write_stall_timeout_ms > 0
        && u64::from(conn.stalled_ms) >= l.write_stall_timeout_ms
}

/// An open WebSocket quiet for `ping_interval`, with no ping unanswered
/// and no control frame waiting, gets a keepalive ping.
fn wants_ping(conn: &Conn, l: &HubLimits, now: u64) -> bool {
    let quiet = now.saturating_sub(conn.last_recv_ms);
    conn.kind != ConnKind::Http
        && conn.state == ConnState::Open
        && l.ping_interval_ms > 0
        && quiet >= l.ping_interval_ms
        && !conn.ping_outstanding
        && conn.ctrl.is_empty()
}

/// The heartbeat interval of `conn`'s format if it is one-way (Server-Sent
/// Events: its peer sends nothing after its request).
fn heartbeat_of(conn: &Conn, encoders: &Encoders) -> Option<u64> {
    conn.kind.format().and_then(|f| encoders.heartbeat_of(f))
}

/// Whether `conn` gets its keepalive now — a ping, or a one-way format's
/// heartbeat (`heartbeat`: its interval) — and if so marks it sent.
fn keepalive_due(conn: &mut Conn, l: &HubLimits, now: u64, heartbeat: Option<u64>) -> bool {
    match heartbeat {
        Some(every) if heartbeat_due(conn, every, now) => {
            // Nothing will answer it; the next one is due `every` from
            // now (a one-way connection's receive time is otherwise unused).
            conn.last_recv_ms = now;
            true
        }
        Some(_) => false,
        None if wants_ping(conn, l, now) => {
            conn.ping_outstanding = true;
            true
        }
        None => false,
    }
}

/// An open one-way connection whose last heartbeat (or its start) is
/// `every` ms old (0: heartbeats off), with no control frame waiting.
fn heartbeat_due(conn: &Conn, every: u64, now: u64) -> bool {
    conn.state == ConnState::Open
        && every > 0
        && now.saturating_sub(conn.last_recv_ms) >= every
        && conn.ctrl.is_empty()
}

/// The deadline `conn` is under in its state, if it has passed; a
/// `one_way` connection has no idle deadline (its peer never speaks).
fn deadline_passed(conn: &Conn, l: &HubLimits, now: u64, one_way: bool) -> Option<Expired> {
    let since = now.saturating_sub(conn.since_ms);
    match (conn.kind, conn.state) {
        (ConnKind::Http, _) if since >= l.handshake_timeout_ms => Some(Expired::Handshake),
        (ConnKind::Http, _) => None,
        (_, ConnState::Closing) if since >= l.close_timeout_ms => Some(Expired::Close),
        (_, ConnState::Closing) => None,
        (_, ConnState::Open) if one_way => None,
        (_, ConnState::Open) => {
            let quiet = now.saturating_sub(conn.last_recv_ms);
            (l.idle_timeout_ms > 0 && quiet >= l.idle_timeout_ms).then_some(Expired::Idle)
        }
    }
}
