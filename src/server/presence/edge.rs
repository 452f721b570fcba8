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

use std::rc::Rc;

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::auth::Grants;
use crate::control::{self, ErrorCode};
use crate::http::{self, HttpError};
use crate::hub::{ConnId, Hub};
use crate::presence::{self, event, Joined, Left};
use crate::server::presence::owner::{self as presence_owner, Row};
use crate::server::presence::redis as presence_redis;
use crate::server::worker::Worker;
use crate::ws::frame::encode_server_frame;
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
    if let Some(mesh) = presence_owner::mesh(w) {
        // The owner decides: here, or (a subscribe on another worker)
        // when the join is made there (`presence_owner::join_at_owner`).
        let here = mesh.owner(channel) == mesh.me();
        let ok = !here || presence_owner::admits(w, channel, &who.user);
        return if ok {
            Ok(())
        } else {
            Err(ErrorCode::PresenceFull)
        };
    }
    let (max_members, _) = w.cfg.presence_limits(channel);
    let mut p = w.presence.borrow_mut();
    if p.admits(channel, &who.user, max_members) {
        Ok(())
    } else {
        p.stats.presence_refused += 1;
        Err(ErrorCode::PresenceFull)
    }
}

/// The text of a refusal from [`admit`].
pub fn refusal(code: ErrorCode, id: Option<&RawValue>) -> Bytes {
    let msg = match code {
        ErrorCode::PresenceFull => presence::FULL_MESSAGE,
        _ => presence::OFF_MESSAGE,
    };
    control::error(code, msg, id)
}

/// After a JSON subscribe to `channel` went through: the connection joins
/// its presence (when the channel has it) and, with `events`, receives
/// its join/leave events from now on — its own join included.
pub fn join(
    w: &Rc<Worker>,
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
        watch(hub, id, channel);
    }
    let (max_members, max_events) = w.cfg.presence_limits(channel);
    let mut p = w.presence.borrow_mut();
    if presence_owner::mesh(w).is_some() {
        // This worker's own record; the owner counts and announces.
        let joined = p.join(id as u64, channel, (&who.user, who.info), usize::MAX);
        drop(p);
        if matches!(joined, Ok(Joined::User | Joined::Connection)) {
            presence_owner::join(w, hub, id, channel, (&who.user, who.info));
        }
        return;
    }
    let joined = p.join(id as u64, channel, (&who.user, who.info), max_members);
    if let Some(link) = &w.redis {
        drop(p);
        if matches!(joined, Ok(Joined::User | Joined::Connection)) {
            let who = (who.user.as_str(), who.info);
            presence_redis::joined(w, link, (id, 0), channel, who, None);
        }
        return;
    }
    if joined == Ok(Joined::User) && p.count(channel) <= max_events {
        p.stats.presence_joins += 1;
        drop(p);
        let text = event::join(channel, &who.user, who.info);
        announce(hub, channel, &text);
    }
}

/// The subscriptions a subscribe to `channel` takes: the channel, and
/// its events channel when `events` asks for them and `id` does not
/// watch them yet.
pub fn slots(hub: &Hub, id: ConnId, channel: &str, events: bool) -> usize {
    1 + usize::from(events && !hub.is_subscribed(id, &presence::events_channel(channel)))
}

/// Subscribes `id` to `channel`'s join/leave events (once). Done before
/// the channel's own subscribe in Redis mode, so that Redis subscribes
/// the events channel first and the `subscribed` ack (sent once Redis
/// confirmed the channel) comes after both.
pub fn watch(hub: &mut Hub, id: ConnId, channel: &str) {
    let events = presence::events_channel(channel);
    if !hub.is_subscribed(id, &events) {
        hub.subscribe_internal(id, &events);
    }
}

/// After a JSON unsubscribe from `channel`: the connection leaves it.
pub fn unsubscribe(w: &Rc<Worker>, hub: &mut Hub, id: ConnId, channel: &str) {
    if !w.cfg.presence.covers(channel) {
        return;
    }
    hub.unsubscribe(id, &presence::events_channel(channel));
    let left = w.presence.borrow_mut().leave(id as u64, channel);
    if let Some(l) = left {
        announce_leave(w, hub, id, &l);
    }
}

/// The connection `id` ended: it leaves every presence channel (a no-op,
/// one map lookup, for connections that never joined one).
pub fn close(w: &Rc<Worker>, id: ConnId) {
    if !w.cfg.presence.enabled() {
        return;
    }
    let left = w.presence.borrow_mut().close(id as u64);
    if left.is_empty() {
        return;
    }
    let mut hub = w.hub.borrow_mut();
    for l in &left {
        announce_leave(w, &mut hub, id, l);
    }
}

fn announce_leave(w: &Rc<Worker>, hub: &mut Hub, id: ConnId, l: &Left) {
    if let Some(link) = &w.redis {
        return presence_redis::left(w, link, l);
    }
    if presence_owner::mesh(w).is_some() {
        return presence_owner::leave(w, hub, id, &l.channel);
    }
    let mut p = w.presence.borrow_mut();
    // Counted as it was before the leave: the leave of a join that was
    // announced is announced.
    if !l.last || p.count(&l.channel) + 1 > w.cfg.presence_limits(&l.channel).1 {
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

/// The `presence` answer for `channel` (members unless `count_only`):
/// this instance's view embedded; in Redis mode, Redis's after a prune
/// (`None`: Redis did not answer in time).
async fn answer(
    w: &Worker,
    channel: &str,
    count_only: bool,
    id: Option<&RawValue>,
) -> Option<String> {
    if let Some(link) = &w.redis {
        let pruned = presence_redis::members(w, link, channel).await?;
        let rows: Vec<event::MemberRow<'_>> = pruned
            .members
            .iter()
            .map(|m| (m.user.as_str(), m.info.as_deref(), m.connections))
            .collect();
        let members = (!count_only).then_some(rows.as_slice());
        let count = pruned.users as usize;
        return Some(event::answer(channel, members, count, id));
    }
    if presence_owner::mesh(w).is_some() {
        let rows = presence_owner::rows(w, channel).await?;
        return Some(rows_answer(channel, &rows, count_only, id));
    }
    Some(local_answer(w, channel, count_only, id))
}

/// The `presence` answer from an owner worker's `rows` (several workers).
fn rows_answer(channel: &str, rows: &[Row], count_only: bool, idv: Option<&RawValue>) -> String {
    let rows: Vec<event::MemberRow<'_>> = rows
        .iter()
        .map(|(u, i, n)| (u.as_str(), i.as_deref(), *n))
        .collect();
    let members = (!count_only).then_some(rows.as_slice());
    event::answer(channel, members, rows.len(), idv)
}

/// Embedded mode's `presence` answer: this instance's members.
fn local_answer(w: &Worker, channel: &str, count_only: bool, id: Option<&RawValue>) -> String {
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

/// One presence read by connection `id` (`--presence-read-rate`);
/// `Err(ms)`: refused (counted), the client may try again in `ms`.
fn take_read(w: &Worker, hub: &Hub, id: ConnId) -> Result<(), u64> {
    // The serial, not the slot id: a slot is reused by the next connection.
    let serial = hub.conn(id).map_or(0, |c| c.serial());
    let mut p = w.presence.borrow_mut();
    let taken = p.reads.take(serial, w.cfg.presence.read_rate, w.now_ms());
    if taken.is_err() {
        p.stats.presence_reads_limited += 1;
    }
    taken
}

const READ_LIMITED: &str = "presence reads over --presence-read-rate";

/// `{"op":"presence"}` (the subscribe grant already checked): answered
/// at once embedded, after a read in Redis mode.
pub fn query(w: &Rc<Worker>, hub: &mut Hub, id: ConnId, channel: &str, idv: Option<&RawValue>) {
    if !w.cfg.presence.covers(channel) {
        hub.send_to(id, refusal(ErrorCode::PresenceOff, idv));
        return;
    }
    if let Err(ms) = take_read(w, hub, id) {
        let msg = format!("{READ_LIMITED}; retry in {ms} ms");
        hub.send_to(id, control::error(ErrorCode::RateLimited, &msg, idv));
        return;
    }
    if w.redis.is_none() && !presence_owner::elsewhere(w, channel) {
        // Nothing to wait for: answered now, in order with the
        // connection's other replies (the hub is borrowed by the caller).
        let text = match presence_owner::mesh(w) {
            Some(_) => rows_answer(channel, &presence_owner::rows_here(w, channel), false, idv),
            None => local_answer(w, channel, false, idv),
        };
        hub.send_to(id, encode_server_frame(OpCode::Text, text.as_bytes()));
        return;
    }
    let (w, channel) = (w.clone(), channel.to_string());
    let idv: Option<Box<RawValue>> = idv.map(ToOwned::to_owned);
    monoio::spawn(async move {
        let frame = match answer(&w, &channel, false, idv.as_deref()).await {
            Some(t) => encode_server_frame(OpCode::Text, t.as_bytes()),
            None => {
                let msg = "presence unavailable (its worker or redis did not answer); retry";
                control::error(ErrorCode::Unavailable, msg, idv.as_deref())
            }
        };
        w.hub.borrow_mut().send_to(id, frame);
    });
}

/// `GET /presence/{channel}[?count_only=1]` on connection `id` (auth
/// checked by the caller).
pub async fn http_answer(
    w: &Worker,
    (id, channel): (ConnId, &str),
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
    let taken = take_read(w, &w.hub.borrow(), id);
    if let Err(ms) = taken {
        let e = HttpError {
            status: 429,
            message: READ_LIMITED,
        };
        return http::retry_after_response(&e, keep_alive, ms);
    }
    let count_only = query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "count_only=1" | "count_only=true"))
    });
    let Some(body) = answer(w, channel, count_only, None).await else {
        let e = HttpError {
            status: 503,
            message: "presence unavailable (its worker or redis did not answer)",
        };
        return http::error_response(&e, keep_alive);
    };
    let ct = "application/json";
    http::response(200, ct, body.as_bytes(), keep_alive, &[], false)
}
