//! Presence at the edge (`--presence-channels`): a JSON subscriber of a
//! presence channel becomes a member under its user (the token's `sub`,
//! else its connection id), `"presence":true` adds the channel's join and
//! leave events, `{"op":"presence"}` and `GET /presence/{channel}` list
//! the members. The counting is `crate::presence`'s; this file decides
//! what to send where.
//!
//! Join/leave events travel on the hub's internal channel
//! `presence/{channel}` (`presence::events_channel`): the JSON format frames
//! them as they are, and a connection that did not ask for them pays
//! nothing. Embedded, they are published here, in the same worker and so
//! in order with the channel's messages.

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::auth::Grants;
use crate::control::{self, ErrorCode};
use crate::http::{self, HttpError};
use crate::hub::{ConnId, Hub};
use crate::presence::{self, event, Joined, Left};
use crate::server::worker::Worker;
use crate::ws::OpCode;

/// Who a connection is in presence channels, and its public info.
pub struct Identity<'a> {
    /// The user: the token's `sub`, else `{tag}.{serial}` (the connection).
    pub user: String,
    /// The token's `info` claim.
    pub info: Option<&'a str>,
}

impl<'a> Identity<'a> {
    /// The identity of connection `serial` holding `grants`.
    pub fn of(w: &Worker, grants: &'a Grants, serial: u64) -> Self {
        let user = match grants.subject() {
            Some(sub) => sub.to_string(),
            None => crate::pusher::socket_id(w.pusher.borrow().tag, serial),
        };
        Identity {
            user,
            info: grants.info(),
        }
    }
}

/// Before a JSON subscribe to `channel`: `Err(reply)` refuses it
/// (presence asked of a channel without it; a full presence channel).
pub fn admit(w: &Worker, who: &Identity<'_>, channel: &str, events: bool) -> Result<(), ErrorCode> {
    let cfg = &w.cfg.presence;
    if !cfg.covers(channel) {
        return if events {
            Err(ErrorCode::PresenceOff)
        } else {
            Ok(())
        };
    }
    let mut p = w.presence.borrow_mut();
    if p.admits(channel, &who.user, cfg.max_members) {
        Ok(())
    } else {
        p.stats.presence_refused += 1;
        Err(ErrorCode::PresenceFull)
    }
}

/// The text of a refusal from [`admit`].
pub fn refusal(code: ErrorCode, id: Option<&RawValue>) -> Bytes {
    let msg = match code {
        ErrorCode::PresenceFull => "presence channel full (--presence-max-members)",
        _ => "presence is not enabled for this channel (--presence-channels)",
    };
    control::error(code, msg, id)
}

/// After a JSON subscribe to `channel` went through: the connection joins
/// its presence (when the channel has it) and, with `events`, receives
/// its join/leave events from now on — its own join included.
pub fn join(
    w: &Worker,
    hub: &mut Hub,
    id: ConnId,
    who: &Identity<'_>,
    channel: &str,
    events: bool,
) {
    let cfg = &w.cfg.presence;
    if !cfg.covers(channel) {
        return;
    }
    if events {
        hub.subscribe_internal(id, &presence::events_channel(channel));
    }
    let mut p = w.presence.borrow_mut();
    let joined = p.join(id as u64, channel, (&who.user, who.info), cfg.max_members);
    if joined == Ok(Joined::User) && cfg.announces(p.count(channel)) {
        p.stats.presence_joins += 1;
        drop(p);
        let text = event::join(channel, &who.user, who.info);
        announce(hub, channel, &text);
    }
}

/// After a JSON unsubscribe from `channel`: the connection leaves it.
pub fn unsubscribe(w: &Worker, hub: &mut Hub, id: ConnId, channel: &str) {
    if !w.cfg.presence.covers(channel) {
        return;
    }
    hub.unsubscribe(id, &presence::events_channel(channel));
    let left = w.presence.borrow_mut().leave(id as u64, channel);
    if let Some(l) = left {
        announce_leave(w, hub, &l);
    }
}

/// The connection `id` ended: it leaves every presence channel (a no-op,
/// one map lookup, for connections that never joined one).
pub fn close(w: &Worker, id: ConnId) {
    if !w.cfg.presence.enabled() {
        return;
    }
    let left = w.presence.borrow_mut().close(id as u64);
    if left.is_empty() {
        return;
    }
    let mut hub = w.hub.borrow_mut();
    for l in &left {
        announce_leave(w, &mut hub, l);
    }
}

fn announce_leave(w: &Worker, hub: &mut Hub, l: &Left) {
    let mut p = w.presence.borrow_mut();
    // Counted as it was before the leave: the leave of a join that was
    // announced is announced.
    if !l.last || !w.cfg.presence.announces(p.count(&l.channel) + 1) {
        return;
    }
    p.stats.presence_leaves += 1;
    drop(p);
    announce(hub, &l.channel, &event::leave(&l.channel, &l.user));
}

/// Publishes an event to `channel`'s presence subscribers (never into
/// history: offset 0).
fn announce(hub: &mut Hub, channel: &str, text: &str) {
    let events = presence::events_channel(channel);
    hub.publish_at(&events, OpCode::Text, text.as_bytes(), None, 0);
}

/// The `presence` answer for `channel` (members unless `count_only`).
pub fn answer(w: &Worker, channel: &str, count_only: bool, id: Option<&RawValue>) -> String {
    let p = w.presence.borrow();
    let count = p.count(channel);
    if count_only {
        return event::answer(channel, None, count, id);
    }
    let rows: Vec<event::MemberRow<'_>> = p
        .members(channel)
        .into_iter()
        .flatten()
        .map(|(u, m)| (u.as_str(), m.info.as_deref(), m.connections))
        .collect();
    event::answer(channel, Some(&rows), count, id)
}

/// `{"op":"presence"}` (the subscribe grant already checked).
pub fn query(w: &Worker, channel: &str, id: Option<&RawValue>) -> Bytes {
    if !w.cfg.presence.covers(channel) {
        return refusal(ErrorCode::PresenceOff, id);
    }
    let text = answer(w, channel, false, id);
    crate::ws::frame::encode_server_frame(OpCode::Text, text.as_bytes())
}

/// `GET /presence/{channel}[?count_only=1]` (auth checked by the caller).
pub async fn http_answer(
    w: &Worker,
    channel: &str,
    query: Option<&str>,
    keep_alive: bool,
) -> Vec<u8> {
    if !w.cfg.presence.covers(channel) {
        let e = HttpError {
            status: 404,
            message: "presence is not enabled for this channel",
        };
        return http::error_response(&e, keep_alive);
    }
    let count_only = query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "count_only=1" | "count_only=true"))
    });
    let body = answer(w, channel, count_only, None);
    let ct = "application/json";
    http::response(200, ct, body.as_bytes(), keep_alive, &[], false)
}
