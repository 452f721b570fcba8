//! The WebSocket phase of a connection, split by job:
//! - `task`: the connection's task — spawns the writer, runs the reader,
//!   parks after `--park-after` of quiet, ends it;
//! - `reader`: input through the sans-I/O receiver, and the brakes on a
//!   publisher (rate, pressure, backlog, inbound budget);
//! - `frames`: what a message means — control frames answered (pong,
//!   close handshake), data handed to the session (`native` or
//!   `pusher::ws`);
//! - `writer`: the hub's outbox drained, one vectored write per batch;
//! - `close`: the end — session, writer, drain after a protocol error;
//! - `parked`: parking a fresh connection, resuming a woken one, ending
//!   one whose peer left without a task;
//! - `transport`: the bytes under the frames (plain TCP or TLS), the
//!   only calls the others make on the socket.
//!
//! Imports go one way: `mod.rs` → `parked` → `task` → `reader` →
//! `frames` → `close` → `transport`; `task` → `writer` → `transport`.
//! Neither task holds a hub borrow across an `.await`.
//!
//! # The transport seam
//! A byte transport (TLS is one: `server::tls`) implements what `transport` offers and nothing
//! else changes: `split` a socket into a read and a write half,
//! `ReadHalf::read` / `read_or_quiet` (append the peer's bytes to the
//! frame buffer; the quiet variant gives up after a wait with nothing
//! taken, so the connection can park), `WriteHalf::write` (a batch of
//! encoded frames from the outbox), `ReadHalf::shutdown` and
//! `drain_close`, and `park` / `resume` / `read_parked` / `send_parked` /
//! `close_parked` for a parked connection (or it keeps `--park-after`
//! off). A different wire under the same outbox (Server-Sent Events) is
//! a sibling of this folder, not a part of it: it takes the hub's
//! batches as `writer` does, encoded by its own format
//! (`server::formats`), and needs no `reader`, `frames` or receiver.

mod close;
mod frames;
mod parked;
mod reader;
mod task;
pub mod transport;
mod writer;

use std::rc::Rc;

use bytes::BytesMut;

use crate::hub::{CloseReason, ConnId, ConnKind};
use crate::server::conn::park::Session;
use crate::server::conn::stream::Stream;
use crate::server::conn::upgrade::Upgrade;
use crate::server::formats;
use crate::server::hooks::session as hooks_session;
use crate::server::native::control;
use crate::server::pusher::ws as pusher_ws;
use crate::server::worker::Worker;
use crate::ws::{Receiver, Role};

use close::count_compressed;

pub use parked::unparker;

/// Starts an upgraded connection: subscribes, then runs it ([`run`]) in a
/// task of its own until it ends or parks. `release_ip`: the client
/// address whose per-IP count it holds, released when it ends.
pub fn websocket(
    w: &Rc<Worker>,
    sock: Stream,
    id: ConnId,
    (up, release_ip): (Upgrade, Option<std::net::IpAddr>),
    buf: BytesMut,
) {
    let Upgrade {
        kind,
        channel,
        grants,
        deflate,
        welcome,
        filters,
    } = up;
    if deflate {
        count_compressed(w, true);
    }
    {
        let mut hub = w.hub.borrow_mut();
        hub.upgrade(id, kind);
        // The status feed's grants are read-only; its token's expiry was
        // recorded at the upgrade.
        if let Some(exp) = grants.expires() {
            let at = control::token_deadline(hub.now_ms(), exp);
            hub.set_token_expiry(id, at);
        }
        if let Some(c) = channel.as_deref().filter(|c| c.starts_with('!')) {
            hub.subscribe_internal(id, c);
        } else if let Some(c) = &channel {
            if hub.subscribe(id, c).is_err() {
                // Only possible with max_subscriptions = 0.
                hub.close(id, 1008, "subscription refused", CloseReason::Protocol);
            }
            hub.set_filters(id, c, filters);
        }
        if kind != ConnKind::Ws(formats::PUSHER) {
            hooks_session::register_user(w, &hub, id, &grants);
        }
        if let Some(welcome) = welcome {
            hooks_session::welcome(w, &mut hub, (id, &grants), *welcome);
        }
    }
    if kind == ConnKind::Ws(formats::PUSHER) {
        let serial = w.hub.borrow().conn(id).map_or(0, |c| c.serial());
        pusher_ws::open(w, id, serial);
    }
    let session = Session {
        channel: channel.map(String::into_boxed_str),
        grants,
        release_ip,
        deflate,
    };
    // Nothing to do yet (no input, nothing queued): it starts parked and
    // gets its tasks when something concerns it — a connection that only
    // waits never costs a task (issue 19: accepting and holding idle
    // connections as cheaply as servers that keep them as plain state).
    let (sock, session) = match parked::park_fresh(w, sock, id, session, &buf) {
        Ok(()) => return,
        Err(back) => back,
    };
    let rx = Receiver::new(Role::Server, w.cfg.ws);
    let rx = if deflate { rx.with_compression() } else { rx };
    // A task of its own: the accepted connection's task (with room for
    // the HTTP phase) ends here rather than live on at its larger size.
    monoio::spawn(task::session_task(w.clone(), sock, id, (session, rx), buf));
}
