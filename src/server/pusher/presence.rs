//! Pusher presence channels (`presence-*`) on the shared presence core:
//! members counted per user (`crate::presence`), and in Redis mode kept
//! across instances by `presence::redis` — `member_added`/`member_removed`
//! decided by Redis's scripts and published on the channel itself, the
//! `subscription_succeeded` member list and the HTTP API's `users` and
//! `user_count` read from Redis. With several workers and no Redis, the
//! channel's owner worker keeps them (`presence::owner`, `pusher::owner`):
//! a join on another worker waits for the owner's member list.

use std::rc::Rc;

use crate::control::ErrorCode;
use crate::hub::{ConnId, Hub, EXCLUDE_ALWAYS};
use crate::presence::Joined;
use crate::pusher::presence::{self as pp, Member};
use crate::pusher::protocol;
use crate::pusher::state::Session;
use crate::server::presence::owner as presence_owner;
use crate::server::presence::redis as presence_redis;
use crate::server::worker::Worker;
use crate::ws::frame::encode_server_frame;
use crate::ws::OpCode;

fn text_frame(json: &str) -> bytes::Bytes {
    encode_server_frame(OpCode::Text, json.as_bytes())
}

fn refuse(hub: &mut Hub, id: ConnId, channel: &str, status: u16, message: &str) {
    hub.stats.pusher_subscriptions_refused += 1;
    let text = protocol::subscription_error(channel, status, message);
    hub.send_to(id, text_frame(&text));
}

/// A signed subscribe to presence `channel` (hub name `internal`) as
/// member `m`: joins, subscribes, answers `subscription_succeeded` with
/// the members, announces `member_added` to the others when the user is
/// new.
pub fn subscribe(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (s, id): (&mut Session, ConnId),
    (channel, internal): (String, &str),
    m: Member,
) {
    let max = w.cfg.pusher.max_presence_members;
    let who = (m.user_id.as_str(), m.user_info.as_deref());
    let joined = w.presence.borrow_mut().join(id as u64, internal, who, max);
    let Ok(joined) = joined else {
        return refuse(hub, id, &channel, 403, "presence channel full");
    };
    let shared = w.redis.is_some() || presence_owner::mesh(w).is_some();
    // Subscribed later (after Redis or the owner answers): checked now.
    if shared && at_limit(w, hub, id, (&channel, internal)) {
        return;
    }
    if w.redis.is_some() {
        return subscribe_redis(w, hub, (s, id), (channel, internal), m);
    }
    if presence_owner::mesh(w).is_some() {
        return subscribe_owned(w, hub, (s, id), (channel, internal), m);
    }
    let data = snapshot(w, internal);
    let ack = text_frame(&protocol::subscription_succeeded(&channel, &data));
    if hub.subscribe_internal_acked(id, internal, ack).is_err() {
        w.presence.borrow_mut().leave(id as u64, internal);
        return refuse(hub, id, &channel, 400, "subscription limit reached");
    }
    if joined == Joined::User {
        let (cfg, user) = (&w.cfg.pusher, m.user_id.as_str());
        w.webhooks.member(cfg, internal, user, true, &mut hub.stats);
        let added = pp::member_added(&m);
        let json = protocol::event("pusher_internal:member_added", Some(&channel), &added);
        let sender = Some(s.serial | EXCLUDE_ALWAYS);
        hub.publish_at(internal, OpCode::Text, json.as_bytes(), sender, 0);
    }
    s.channels.insert(channel, Some(m.user_id));
}

/// Whether connection `id` has no subscription left: then refused, and
/// its member leaves `internal` here.
fn at_limit(w: &Worker, hub: &mut Hub, id: ConnId, (channel, internal): (&str, &str)) -> bool {
    let max_subs = hub.limits().max_subscriptions;
    let full = hub
        .conn(id)
        .is_none_or(|c| c.subscription_count() >= max_subs);
    if full {
        w.presence.borrow_mut().leave(id as u64, internal);
        refuse(hub, id, channel, 400, "subscription limit reached");
    }
    full
}

/// Redis mode: the member is added in Redis first; `subscription_succeeded`
/// follows with Redis's member list (every instance's), and Redis's script
/// publishes `member_added` (skipping this connection) when the user is
/// new everywhere.
fn subscribe_redis(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (s, id): (&mut Session, ConnId),
    (channel, internal): (String, &str),
    m: Member,
) {
    hub.subscribe_internal(id, internal);
    let Some(link) = w.redis.clone() else { return };
    let (name, hub_name) = (channel.clone(), internal.to_string());
    let then = Box::new(move |w: &Rc<Worker>| {
        let w = w.clone();
        monoio::spawn(async move {
            let data = match presence_redis::members(&w, &link, &hub_name).await {
                Some(p) => pp::snapshot(
                    p.members
                        .iter()
                        .map(|m| (m.user.as_str(), m.info.as_deref())),
                ),
                None => snapshot(&w, &hub_name),
            };
            let ack = text_frame(&protocol::subscription_succeeded(&name, &data));
            w.hub.borrow_mut().send_to(id, ack);
        });
    });
    let who = (m.user_id.as_str(), m.user_info.as_deref());
    let sender = s.serial | EXCLUDE_ALWAYS;
    let link = w.redis.as_deref().expect("redis mode");
    presence_redis::joined(w, link, (id, sender), internal, who, Some(then));
    s.channels.insert(channel, Some(m.user_id));
}

/// Several workers without Redis: the member joins at the channel's
/// owner (`presence::owner`, `pusher::owner`), which announces
/// `member_added` and lists the members for `subscription_succeeded`;
/// on another worker the reply waits for the owner (the channel is
/// marked subscribed meanwhile, so that an unsubscribe or a close leaves
/// as for any member).
fn subscribe_owned(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (s, id): (&mut Session, ConnId),
    (channel, internal): (String, &str),
    m: Member,
) {
    let Some(mesh) = presence_owner::mesh(w) else {
        return;
    };
    s.channels.insert(channel.clone(), Some(m.user_id.clone()));
    if mesh.owner(internal) != mesh.me() {
        let (w, internal) = (w.clone(), internal.to_string());
        let serial = s.serial;
        monoio::spawn(async move {
            let who = (m.user_id, m.user_info);
            let rows = presence_owner::enter_at_owner(&w, id, &internal, who).await;
            entered(&w, (id, serial), (&channel, &internal), rows);
        });
        return;
    }
    let conn = presence_owner::conn_of(mesh, hub, id);
    let who = (m.user_id.as_str(), m.user_info.as_deref());
    let rows = match presence_owner::joined_here(w, hub, (mesh.me() as u8, conn), internal, who) {
        Some(_) => Ok(presence_owner::rows_here(w, internal)),
        None => Err(ErrorCode::PresenceFull),
    };
    if !finish(w, hub, id, (&channel, internal), rows) {
        s.channels.remove(&channel);
    }
}

/// The owner's answer to a join from this worker: the subscription, if
/// the connection still waits for it (session `serial`, the channel still
/// marked).
fn entered(
    w: &Rc<Worker>,
    (id, serial): (ConnId, u64),
    (channel, internal): (&str, &str),
    rows: Result<Vec<presence_owner::Row>, ErrorCode>,
) {
    let mut hub = w.hub.borrow_mut();
    let waiting = w
        .pusher_sessions
        .borrow()
        .get(&id)
        .is_some_and(|s| s.serial == serial && s.channels.contains_key(channel));
    if !waiting {
        // Unsubscribed or closed meanwhile: its leave went to the owner
        // after the join.
        return;
    }
    if !finish(w, &mut hub, id, (channel, internal), rows) {
        if let Some(s) = w.pusher_sessions.borrow_mut().get_mut(&id) {
            s.channels.remove(channel);
        }
    }
}

/// Subscribes connection `id` with the owner's `rows` as the member
/// list, or refuses (the member leaves here and, if it joined, at the
/// owner): false, and the caller unmarks the channel.
fn finish(
    w: &Rc<Worker>,
    hub: &mut Hub,
    id: ConnId,
    (channel, internal): (&str, &str),
    rows: Result<Vec<presence_owner::Row>, ErrorCode>,
) -> bool {
    let refused = match rows {
        Ok(rows) => {
            let members = rows.iter().map(|(u, i, _)| (u.as_str(), i.as_deref()));
            let data = pp::snapshot(members);
            let ack = text_frame(&protocol::subscription_succeeded(channel, &data));
            match hub.subscribe_internal_acked(id, internal, ack) {
                Ok(_) => return true,
                Err(_) => (400, "subscription limit reached", true),
            }
        }
        Err(ErrorCode::PresenceFull) => (403, "presence channel full", false),
        Err(_) => (503, "presence unavailable (no answer in time)", false),
    };
    let (status, message, joined) = refused;
    if w.presence.borrow_mut().leave(id as u64, internal).is_some() && joined {
        presence_owner::leave(w, hub, id, internal);
    }
    refuse(hub, id, channel, status, message);
    false
}

/// This instance's members of `internal`, as `subscription_succeeded`'s data.
pub fn snapshot(w: &Worker, internal: &str) -> String {
    let p = w.presence.borrow();
    let members = p.members(internal).into_iter().flatten();
    pp::snapshot(members.map(|(u, m)| (u.as_str(), m.info.as_deref())))
}

/// Connection `id` (serial `serial`) left presence `channel` (hub name
/// `internal`): `member_removed` when it was its user's last connection
/// (in Redis mode: its last on every instance, decided by Redis).
pub fn leave(
    w: &Rc<Worker>,
    hub: &mut Hub,
    id: ConnId,
    (channel, internal): (&str, &str),
    serial: u64,
) {
    let Some(l) = w.presence.borrow_mut().leave(id as u64, internal) else {
        return;
    };
    if let Some(link) = &w.redis {
        return presence_redis::left(w, link, &l);
    }
    if presence_owner::mesh(w).is_some() {
        return presence_owner::leave(w, hub, id, internal);
    }
    if l.last {
        let cfg = &w.cfg.pusher;
        w.webhooks
            .member(cfg, internal, &l.user, false, &mut hub.stats);
        let data = pp::member_removed(&l.user);
        let json = protocol::event("pusher_internal:member_removed", Some(channel), &data);
        let sender = Some(serial | EXCLUDE_ALWAYS);
        hub.publish_at(internal, OpCode::Text, json.as_bytes(), sender, 0);
    }
}

/// The user ids of presence channel `internal`, sorted: this instance's
/// embedded, every instance's in Redis mode (`None`: Redis did not answer).
pub async fn user_ids(w: &Worker, internal: &str) -> Option<Vec<String>> {
    if let Some(link) = &w.redis {
        let p = presence_redis::members(w, link, internal).await?;
        return Some(p.members.into_iter().map(|m| m.user).collect());
    }
    if presence_owner::mesh(w).is_some() {
        let rows = presence_owner::rows(w, internal).await?;
        return Some(rows.into_iter().map(|(u, _, _)| u).collect());
    }
    let p = w.presence.borrow();
    Some(
        p.members(internal)
            .into_iter()
            .flatten()
            .map(|(u, _)| u.clone())
            .collect(),
    )
}

/// The number of users of presence channel `internal` (as [`user_ids`]).
pub async fn user_count(w: &Worker, internal: &str) -> Option<usize> {
    if let Some(link) = &w.redis {
        return Some(presence_redis::members(w, link, internal).await?.users as usize);
    }
    if presence_owner::mesh(w).is_some() {
        return Some(presence_owner::rows(w, internal).await?.len());
    }
    Some(w.presence.borrow().count(internal))
}
