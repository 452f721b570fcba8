//! The Pusher protocol on an upgraded `GET /app/{key}` connection: the
//! session's start (`connection_established`, or the in-band refusal),
//! each client frame, and the end (presence members leave). The protocol
//! itself is `crate::pusher` (sans-I/O); this file applies it to the hub.

use std::rc::Rc;

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::auth::TokenBucket;
use crate::hub::{CloseReason, ConnId, Hub, EXCLUDE_ALWAYS};
use crate::pusher::api::MAX_DATA;
use crate::pusher::presence;
use crate::pusher::protocol::{self, code, ClientMsg};
use crate::pusher::state::Session;
use crate::pusher::webhook::Event;
use crate::pusher::{internal_channel, sign, ChannelKind};
use crate::server::publish::{route_publish, via, Published};
use crate::server::pusher::occupancy as pusher_occupancy;
use crate::server::pusher::owner as pusher_owner;
use crate::server::pusher::presence as pusher_presence;
use crate::server::worker::Worker;
use crate::ws::frame::encode_server_frame;
use crate::ws::OpCode;

fn send(hub: &mut Hub, id: ConnId, json: &str) {
    hub.send_to(id, text_frame(json));
}

fn text_frame(json: &str) -> Bytes {
    encode_server_frame(OpCode::Text, json.as_bytes())
}

/// Queues a webhook event for app `app` (if it has `--pusher-webhook`).
fn hook(w: &Worker, hub: &mut Hub, app: usize, ev: Event<'_>) {
    w.webhooks.emit(app, ev, &mut hub.stats);
}

/// After a subscriber of `channel` left this instance (see
/// `occupancy`: `channel_vacated` if it was the last).
fn vacated(w: &Rc<Worker>, hub: &mut Hub, app: usize, channel: &str, internal: &str) {
    pusher_occupancy::changed(w, hub, app, (channel, internal), false);
}

/// Starts a Pusher session for the upgraded connection `id`:
/// `connection_established`, or `pusher:error` and a close with the
/// upgrade's verdict (4001, 4007), or 4100 when the app is at
/// `--pusher-max-app-connections`. The session lives in the worker's
/// `pusher_sessions` (not in the connection's task, which stays small).
pub fn open(w: &Worker, id: ConnId, serial: u64) {
    let session = start(w, id, serial);
    if let Some(s) = session {
        w.pusher_sessions.borrow_mut().insert(id, s);
    }
}

fn start(w: &Worker, id: ConnId, serial: u64) -> Option<Session> {
    let mut hub = w.hub.borrow_mut();
    let mut shared = w.pusher.borrow_mut();
    let verdict = shared.pending.remove(&id)?;
    let refusal = match verdict {
        Err(c) => Some(c),
        Ok(app) if !shared.admit(app, w.cfg.pusher.max_app_connections) => {
            Some(code::OVER_CAPACITY)
        }
        Ok(_) => None,
    };
    if let Some(c) = refusal {
        let message = match c {
            code::APP_NOT_FOUND => "unknown app key",
            code::UNSUPPORTED_PROTOCOL => "unsupported protocol version (7 is served)",
            _ => "over capacity",
        };
        hub.stats.pusher_connections_refused += 1;
        send(&mut hub, id, &protocol::error(Some(c), message));
        hub.close(id, c, message, CloseReason::Protocol);
        return None;
    }
    let app = verdict.ok()?;
    hub.stats.pusher_connections += 1;
    let socket_id = crate::pusher::socket_id(shared.tag, serial);
    let timeout = w.cfg.pusher.activity_timeout_s;
    send(
        &mut hub,
        id,
        &protocol::connection_established(&socket_id, timeout),
    );
    let rate = w.cfg.pusher.client_event_rate;
    let occupancy = w.cfg.pusher.occupancy_rate;
    Some(Session {
        app,
        serial,
        socket_id,
        channels: Default::default(),
        bucket: TokenBucket::new(rate, rate, w.now_ms()),
        occupancy: TokenBucket::new(occupancy, occupancy, w.now_ms()),
        user: None,
    })
}

/// The connection `id` ended: its presence memberships end (the last
/// connection of a user announces `member_removed`), its app's count drops.
pub fn close(w: &Rc<Worker>, id: ConnId) {
    let Some(s) = w.pusher_sessions.borrow_mut().remove(&id) else {
        return;
    };
    let mut hub = w.hub.borrow_mut();
    hub.stats.pusher_connections -= 1;
    let app = &w.cfg.pusher.apps[s.app];
    for (channel, user) in &s.channels {
        if user.is_some() {
            let internal = internal_channel(&app.id, channel);
            pusher_presence::leave(w, &mut hub, id, (channel, &internal), s.serial);
        }
        // Now rather than when the connection leaves the table, so the
        // last of several closing together sees the channel empty.
        let internal = internal_channel(&app.id, channel);
        hub.unsubscribe(id, &internal);
        vacated(w, &mut hub, s.app, channel, &internal);
    }
    w.pusher.borrow_mut().release(s.app);
}

/// One data frame from the client `id` (ignored once its session ended).
pub fn on_frame(w: &Rc<Worker>, hub: &mut Hub, id: ConnId, op: OpCode, p: &[u8]) {
    let mut sessions = w.pusher_sessions.borrow_mut();
    if let Some(s) = sessions.get_mut(&id) {
        on_session_frame(w, hub, s, id, (op, p));
    }
}

fn on_session_frame(
    w: &Rc<Worker>,
    hub: &mut Hub,
    s: &mut Session,
    id: ConnId,
    (op, p): (OpCode, &[u8]),
) {
    let msg = if op == OpCode::Binary {
        Err("binary frames are not part of the Pusher protocol")
    } else {
        protocol::parse(p).map_err(|e| e.message())
    };
    let msg = match msg {
        Ok(m) => m,
        Err(message) => {
            hub.stats.pusher_errors += 1;
            return send(hub, id, &protocol::error(None, message));
        }
    };
    match msg {
        ClientMsg::Ping => send(hub, id, &protocol::bare("pusher:pong")),
        ClientMsg::Pong | ClientMsg::Other(_) => {}
        ClientMsg::Subscribe {
            channel,
            auth,
            channel_data,
        } => subscribe(w, hub, (s, id), channel, (auth, channel_data)),
        ClientMsg::Unsubscribe { channel } => unsubscribe(w, hub, s, id, &channel),
        ClientMsg::Signin { auth, user_data } => signin(w, hub, (s, id), &auth, &user_data),
        ClientMsg::ClientEvent {
            event,
            channel,
            data,
        } => client_event(w, hub, (s, id), (&event, &channel, &data)),
    }
}

fn refuse_subscription(hub: &mut Hub, id: ConnId, channel: &str, status: u16, message: &str) {
    hub.stats.pusher_subscriptions_refused += 1;
    send(
        hub,
        id,
        &protocol::subscription_error(channel, status, message),
    );
}

/// `pusher:subscribe`: public channels at once; `private-` and
/// `presence-` with a valid signature; presence members join.
fn subscribe(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (s, id): (&mut Session, ConnId),
    channel: String,
    (auth, channel_data): (Option<String>, Option<String>),
) {
    let app = &w.cfg.pusher.apps[s.app];
    let internal = internal_channel(&app.id, &channel);
    if s.channels.contains_key(&channel) {
        // Subscribing twice: confirm again, nothing changes.
        let data = succeeded_data(w, &channel, &internal);
        return send(hub, id, &protocol::subscription_succeeded(&channel, &data));
    }
    let kind = ChannelKind::of(&channel);
    if kind == ChannelKind::User {
        return subscribe_user(hub, (s, id), channel, &internal);
    }
    let signed_data = channel_data
        .as_deref()
        .filter(|_| kind == ChannelKind::Presence);
    let signed = auth
        .as_deref()
        .is_some_and(|a| sign::channel_auth_ok(app, &s.socket_id, &channel, signed_data, a));
    if kind != ChannelKind::Public && !signed {
        hub.stats.pusher_auth_failures += 1;
        return refuse_subscription(hub, id, &channel, 401, "invalid signature");
    }
    if !within_occupancy_rate(w, hub, s, (kind, &internal)) {
        hub.stats.pusher_subscriptions_limited += 1;
        let message =
            "subscription rate limit exceeded (channels newly occupied or presence joins)";
        return refuse_subscription(hub, id, &channel, 429, message);
    }
    let member = match kind {
        ChannelKind::Presence => match signed_data.and_then(presence::parse_member) {
            Some(m) => Some(m),
            None => {
                let message = "invalid channel_data (a user_id, at most 2 KiB)";
                return refuse_subscription(hub, id, &channel, 400, message);
            }
        },
        _ => None,
    };
    if let Some(m) = member {
        return subscribe_member(w, hub, (s, id), (channel, &internal), m);
    }
    let ack = text_frame(&protocol::subscription_succeeded(&channel, "{}"));
    if hub.subscribe_internal_acked(id, &internal, ack).is_err() {
        return refuse_subscription(hub, id, &channel, 400, "subscription limit reached");
    }
    s.channels.insert(channel.clone(), None);
    occupied(w, hub, s.app, &channel, &internal);
}

/// Whether a subscription to `internal` (of `kind`) is within the
/// connection's `--pusher-occupancy-rate`: only one that occupies the
/// channel here or joins a presence channel — what queues webhooks and
/// Redis work — takes a token. (A vacated channel's webhook is bounded by
/// its occupying subscribe's.)
fn within_occupancy_rate(
    w: &Worker,
    hub: &Hub,
    s: &mut Session,
    (kind, internal): (ChannelKind, &str),
) -> bool {
    let costs = kind == ChannelKind::Presence || hub.subscriber_count(internal) == 0;
    !costs || s.occupancy.take(w.now_ms()).is_ok()
}

/// A signed presence subscription of member `m`. Embedded:
/// `channel_occupied` goes before the `member_added` it brings, balanced
/// by `channel_vacated` if the subscription was refused. Redis mode: the
/// app-wide occupancy is updated once subscribed (`occupancy`).
fn subscribe_member(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (s, id): (&mut Session, ConnId),
    (channel, internal): (String, &str),
    m: presence::Member,
) {
    let app = s.app;
    if pusher_owner::mesh(w).is_some() {
        // The channel's owner worker sends the webhooks (`owner`).
        return pusher_presence::subscribe(w, hub, (s, id), (channel, internal), m);
    }
    let first = w.redis.is_none() && hub.subscriber_count(internal) == 0;
    if first {
        hook(w, hub, app, Event::ChannelOccupied { channel: &channel });
    }
    pusher_presence::subscribe(w, hub, (s, id), (channel.clone(), internal), m);
    if first {
        vacated(w, hub, app, &channel, internal);
    } else if w.redis.is_some() && s.channels.contains_key(&channel) {
        occupied(w, hub, app, &channel, internal);
    }
}

/// After a subscription to `channel` (hub name `internal`; see
/// `occupancy`: `channel_occupied` if it is the first).
fn occupied(w: &Rc<Worker>, hub: &mut Hub, app: usize, channel: &str, internal: &str) {
    pusher_occupancy::changed(w, hub, app, (channel, internal), true);
}

/// `#server-to-user-{id}`: only for the connection signed in as `id`.
fn subscribe_user(hub: &mut Hub, (s, id): (&mut Session, ConnId), channel: String, internal: &str) {
    let own = channel.strip_prefix(protocol::USER_CHANNEL_PREFIX) == s.user.as_deref();
    if !own {
        return refuse_subscription(hub, id, &channel, 403, "not signed in as this user");
    }
    let ack = text_frame(&protocol::subscription_succeeded(&channel, "{}"));
    if hub.subscribe_internal_acked(id, internal, ack).is_err() {
        return refuse_subscription(hub, id, &channel, 400, "subscription limit reached");
    }
    s.channels.insert(channel, None);
}

/// `pusher:signin`: a valid signature over `socket_id::user::user_data`
/// signs the connection in (`pusher:signin_success`); an invalid one is
/// `pusher:error` 4009 and close 4009, as on Pusher.
fn signin(w: &Worker, hub: &mut Hub, (s, id): (&mut Session, ConnId), auth: &str, user_data: &str) {
    let app = &w.cfg.pusher.apps[s.app];
    let user = protocol::user_id(user_data)
        .filter(|_| sign::user_auth_ok(app, &s.socket_id, user_data, auth));
    let Some(user) = user else {
        hub.stats.pusher_signin_failures += 1;
        let message = "invalid signin signature or user_data";
        send(hub, id, &protocol::error(Some(code::UNAUTHORIZED), message));
        return hub.close(id, code::UNAUTHORIZED, message, CloseReason::Protocol);
    };
    // The server API's users index: terminate_connections finds it there.
    let key = crate::hooks::api::pusher_user(&app.id, &user);
    w.users
        .borrow_mut()
        .add((&key, None), id, crate::auth::unix_now_ms());
    s.user = Some(user);
    let data = serde_json::json!({ "user_data": user_data }).to_string();
    send(
        hub,
        id,
        &protocol::event("pusher:signin_success", None, &data),
    );
}

fn succeeded_data(w: &Worker, channel: &str, internal: &str) -> String {
    match ChannelKind::of(channel) {
        ChannelKind::Presence => pusher_presence::snapshot(w, internal),
        _ => "{}".to_string(),
    }
}

/// `pusher:unsubscribe`.
fn unsubscribe(w: &Rc<Worker>, hub: &mut Hub, s: &mut Session, id: ConnId, channel: &str) {
    let Some(user) = s.channels.remove(channel) else {
        return;
    };
    let app = &w.cfg.pusher.apps[s.app];
    let internal = internal_channel(&app.id, channel);
    hub.unsubscribe(id, &internal);
    if user.is_some() {
        pusher_presence::leave(w, hub, id, (channel, &internal), s.serial);
    }
    vacated(w, hub, s.app, channel, &internal);
}

/// A `client-*` event: only on private and presence channels the
/// connection is subscribed to, when the app allows them, within
/// `--pusher-client-event-rate`; never echoed to the sender.
fn client_event(
    w: &Worker,
    hub: &mut Hub,
    (s, id): (&mut Session, ConnId),
    (event, channel, data): (&str, &str, &RawValue),
) {
    let app = &w.cfg.pusher.apps[s.app];
    let refusal = if !app.client_events {
        Some("client events are not enabled for this app")
    } else if !matches!(
        ChannelKind::of(channel),
        ChannelKind::Private | ChannelKind::Presence
    ) {
        Some("client events are only allowed on private and presence channels")
    } else if channel.starts_with(protocol::ENCRYPTED_PREFIX) {
        // Pusher's rule: an end-to-end encrypted channel's events are
        // encrypted by the server SDK; a client event would be plaintext.
        Some("client events are not supported on encrypted channels")
    } else if !s.channels.contains_key(channel) {
        Some("client event on a channel this connection is not subscribed to")
    } else if data.get().len() > MAX_DATA {
        Some("client event data is limited to 10 KiB")
    } else {
        None
    };
    if let Some(message) = refusal {
        hub.stats.pusher_errors += 1;
        return send(hub, id, &protocol::error(None, message));
    }
    if s.bucket.take(w.now_ms()).is_err() {
        hub.stats.pusher_client_events_limited += 1;
        let message = "client event rejected: rate limit exceeded";
        return send(
            hub,
            id,
            &protocol::error(Some(code::CLIENT_EVENT_RATE), message),
        );
    }
    let user = s.channels.get(channel).cloned().flatten();
    let json = protocol::client_event(event, channel, data, user.as_deref());
    let internal = internal_channel(&app.id, channel);
    hub.stats.pusher_client_events += 1;
    w.pusher.borrow_mut().app_mut(s.app).client_events += 1;
    let sender = s.serial | EXCLUDE_ALWAYS;
    let outcome = route_publish(
        hub,
        via(w),
        &internal,
        OpCode::Text,
        json.as_bytes(),
        sender,
        false,
    );
    if let Published::Rejected = outcome {
        let message = "redis unavailable and the publish buffer is full; not published";
        return send(hub, id, &protocol::error(None, message));
    }
    let (socket_id, user_id) = (&*s.socket_id, user.as_deref());
    let ev = Event::ClientEvent {
        channel,
        event,
        data,
        socket_id,
        user_id,
    };
    hook(w, hub, s.app, ev);
}
