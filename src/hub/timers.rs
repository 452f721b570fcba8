//! Deadlines and keepalive: why connections close, which deadline a
//! connection is under in each state, and the periodic sweep that pings
//! quiet peers and reports expired sockets to the edge.

use slab::Slab;

use super::conn::{Conn, ConnKind, ConnState};
use super::limits::HubLimits;
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

/// What one sweep found: sockets whose deadline passed (for the edge)
/// and open WebSockets whose token expired (for the hub to close).
pub(super) struct Due<'a> {
    pub expired: &'a mut Vec<(i32, Expired)>,
    pub token_expired: Vec<usize>,
}

/// The periodic sweep at coarse time `now`: queues keepalive pings
/// (paced like a fan-out), appends the sockets whose deadline passed and
/// collects the connections whose token expired.
pub(super) fn sweep(
    conns: &mut Slab<Conn>,
    l: &HubLimits,
    now: u64,
    pacer: &mut Pacer,
    stats: &mut Stats,
    due: &mut Due<'_>,
) {
    let expired = &mut *due.expired;
    let first = expired.len();
    // One ping frame shared by every connection pinged in this sweep.
    let ping = encode_server_frame(OpCode::Ping, b"");
    for (id, conn) in conns.iter_mut() {
        if conn.expired {
            continue;
        }
        if token_due(conn, now) {
            conn.token_expires_s = 0;
            due.token_expired.push(id);
        }
        if let Some(why) = deadline_passed(conn, l, now) {
            conn.expired = true;
            expired.push((conn.fd, why));
            continue;
        }
        if wants_ping(conn, l, now) {
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
    stats.token_expirations += due.token_expired.len() as u64;
}

/// An open WebSocket whose token's `exp` (coarse seconds; 0 = none) has
/// passed.
fn token_due(conn: &Conn, now_ms: u64) -> bool {
    conn.token_expires_s != 0
        && now_ms / 1000 >= u64::from(conn.token_expires_s)
        && conn.state == ConnState::Open
        && conn.kind != ConnKind::Http
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

/// The deadline `conn` is under in its state, if it has passed.
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
