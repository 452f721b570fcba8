//! The JSON control protocol on a WebSocket (`GET /ws`): one request at
//! a time — subscribe (with history, presence), unsubscribe, publish,
//! presence queries, token refresh — answered through the connection's
//! queue. Run by the WebSocket reader, through `native::on_data`.

use std::rc::Rc;

use bytes::Bytes;

use crate::auth::Grants;
use crate::control::{self, ErrorCode};
use crate::hub::{ConnId, Filtering, Hub, Message};
use crate::namespace::Refusal;
use crate::server::admission;
use crate::server::history::recall;
use crate::server::history::{owner, resume};
use crate::server::hooks::session::{self as hooks_session, HookCall};
use crate::server::presence::edge::{self as presence_edge, Identity};
use crate::server::presence::owner as presence_owner;
use crate::server::publish::{count_published, count_refused, route_tagged, via, Published, Via};
use crate::server::worker::Worker;
use crate::ws::OpCode;

/// A request the reader waits for before it reads on (requests stay in
/// order): a subscribe's read from Redis, or a hook's call.
pub enum Deferred {
    /// A subscribe in Redis mode with history.
    Resume(resume::Deferred),
    /// A subscribe, publish or rpc asked of the backend first.
    Hook(HookCall),
    /// A publish whose reply waits for the other workers' count of
    /// their deliveries (`--workers` above 1).
    Count {
        count: u64,
        channel: String,
        id: Option<Box<serde_json::value::RawValue>>,
    },
}

/// The hub's coarse time at which a token with `exp` (seconds since the
/// epoch) expires; the sweep closes the connection then.
pub fn token_deadline(hub_now_ms: u64, exp: u64) -> u64 {
    crate::auth::token_deadline_ms(hub_now_ms, exp, crate::auth::unix_now_ms())
}

/// One request of the JSON control protocol; replies go through the
/// queue. A subscribe that must first read history from Redis is
/// returned instead.
pub fn on_control(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (id, serial, grants): (ConnId, u64, &Grants),
    opcode: OpCode,
    payload: &[u8],
) -> Option<Box<Deferred>> {
    if opcode == OpCode::Binary {
        let msg = "binary frames are not part of the control protocol; use data_base64";
        hub.send_to(id, control::error(ErrorCode::BinaryNotSupported, msg, None));
        return None;
    }
    let env = match control::parse(payload) {
        Ok(env) => env,
        Err(e) => {
            hub.send_to(id, control::error(e.code, &e.message, e.id.as_deref()));
            return None;
        }
    };
    // The rules first: a request they forbid is refused without asking
    // the backend; one they allow is asked of its hook, if it has one.
    if let Some(refusal) = namespace_gate(w, hub, (id, grants), &env.request) {
        let idv = env.id.as_deref();
        hub.send_to(id, control::error(refusal.0, refusal.1, idv));
        return None;
    }
    if hooks_session::applies(w, &env.request) {
        let grants = grants.clone();
        return Some(Box::new(Deferred::Hook(HookCall {
            env,
            serial,
            grants,
        })));
    }
    handle(w, hub, (id, serial, grants), env)
}

/// One parsed request (asked of its hook already, if it has one).
pub fn handle(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (id, serial, grants): (ConnId, u64, &Grants),
    mut env: control::Envelope,
) -> Option<Box<Deferred>> {
    let route = via(w);
    let idv = env.id.as_deref();
    if let Some(refusal) = namespace_gate(w, hub, (id, grants), &env.request) {
        hub.send_to(id, control::error(refusal.0, refusal.1, idv));
        return None;
    }
    if w.redis.is_none() {
        recover_latest(w, hub, &mut env.request);
    }
    if let Some(early) = before_subscribe(w, hub, (id, serial, grants), &env) {
        return early;
    }
    let reply = match env.request {
        control::Request::Rpc { .. } => {
            let msg = "rpc needs a backend (--proxy-rpc)";
            Some(control::error(ErrorCode::BadRequest, msg, idv))
        }
        control::Request::Refresh { token } => Some(refresh(w, hub, id, grants, &token, idv)),
        control::Request::Connect => {
            let client = crate::pusher::socket_id(w.pusher.borrow().tag, serial);
            let who = grants.subject();
            Some(crate::hooks::frames::connected_reply(&client, who, idv))
        }
        control::Request::Subscribe {
            channel,
            since,
            presence,
            filter,
            server_filter,
            delta,
        } => {
            let filters = admission::filters(grants, &channel, (server_filter, filter));
            let how = (since.as_ref(), Filtering::Replace(filters, delta));
            recall::subscribe(hub, id, &channel, how, idv);
            if hub.is_subscribed(id, &channel) {
                let who = Identity::of(w, grants, serial);
                presence_edge::join(w, hub, id, &who, &channel, presence);
            } else if presence {
                // Refused (subscription limit): no events either.
                hub.unsubscribe(id, &crate::presence::events_channel(&channel));
            }
            None
        }
        control::Request::Presence { channel } => {
            presence_edge::query(w, hub, id, &channel, idv);
            None
        }
        control::Request::Unsubscribe { channel } => Some(if hub.unsubscribe(id, &channel) {
            presence_edge::unsubscribe(w, hub, id, &channel);
            control::ack("unsubscribed", &channel, None, idv)
        } else {
            control::error(ErrorCode::NotSubscribed, "not subscribed", idv)
        }),
        control::Request::Publish {
            channel,
            opcode,
            payload,
            meta,
        } => {
            let msg = (&channel[..], opcode, &payload[..], meta.as_ref());
            match publish(w, hub, (serial, route), msg, idv) {
                Ok(reply) => reply,
                Err(count) => {
                    let id = env.id.clone();
                    return Some(Box::new(Deferred::Count { count, channel, id }));
                }
            }
        }
    };
    if let Some(frame) = reply {
        hub.send_to(id, frame);
    }
    None
}

/// `{"op":"publish"}` (the grant already checked): its reply, if any;
/// `Err`: the count to wait for (several workers) before replying.
fn publish(
    w: &Worker,
    hub: &mut Hub,
    (serial, route): (u64, Via<'_>),
    msg: Message<'_>,
    idv: Option<&serde_json::value::RawValue>,
) -> Result<Option<Bytes>, u64> {
    let before = hub.stats.deliveries;
    // Several workers: a reply's count waits for theirs.
    let count = matches!(route, Via::Mesh(_)) && idv.is_some();
    let outcome = route_tagged(hub, route, msg, serial, count);
    count_published(w, msg.0, hub.stats.deliveries - before);
    match outcome {
        Published::Counting(count, _) => Err(count),
        outcome => Ok(publish_reply(hub, outcome, msg.0, idv)),
    }
}

/// `{"op":"publish"}`'s reply (the grant already checked), if any.
fn publish_reply(
    hub: &mut Hub,
    outcome: Published,
    channel: &str,
    idv: Option<&serde_json::value::RawValue>,
) -> Option<Bytes> {
    match outcome {
        Published::Rejected => Some(control::error(
            ErrorCode::Unavailable,
            "redis unavailable and the publish buffer is full; not published",
            idv,
        )),
        outcome => {
            let n = match outcome {
                Published::Local(n) => n,
                _ => hub.subscriber_count(channel),
            };
            idv.map(|i| control::ack("published", channel, Some(n), Some(i)))
        }
    }
}

/// The part of a JSON subscribe that comes before the hub's: presence's
/// admission (a refusal is answered here), and in Redis mode with history
/// the read from Redis that the subscribe waits for. `Some`: the request
/// is done here (`Some(None)`) or deferred.
fn before_subscribe(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (id, serial, grants): (ConnId, u64, &Grants),
    env: &control::Envelope,
) -> Option<Option<Box<Deferred>>> {
    let control::Request::Subscribe {
        channel,
        since,
        presence,
        filter,
        server_filter,
        delta,
    } = &env.request
    else {
        return None;
    };
    let who = Identity::of(w, grants, serial);
    if let Err(code) = presence_edge::admit(w, &who, channel, *presence) {
        hub.send_to(id, presence_edge::refusal(code, env.id.as_deref()));
        return Some(None);
    }
    // The limit before any side effect (presence, its events, Redis): a
    // refused subscribe must leave nothing behind.
    let fresh = !hub.is_subscribed(id, channel);
    if fresh && !hub.has_room(id, presence_edge::slots(hub, id, channel, *presence)) {
        let msg = "subscription limit reached";
        let reply = control::error(ErrorCode::TooManySubscriptions, msg, env.id.as_deref());
        hub.send_to(id, reply);
        return Some(None);
    }
    if *presence {
        presence_edge::watch(hub, id, channel);
    }
    // (The name is valid: `control::parse` checked it.)
    let remote = presence_owner::elsewhere(w, channel);
    let defer = match w.redis.as_deref() {
        Some(l) => l.keeps_history_of(channel),
        None => remote || owner::waits_for_owner(w, hub, channel),
    };
    if !defer {
        return None;
    }
    // Presence does not wait for the history read; with several workers
    // the join is made at the channel's owner first.
    let join = remote.then(|| (who.user.clone(), who.info.map(str::to_string)));
    if !remote {
        presence_edge::join(w, hub, id, &who, channel, *presence);
    }
    let latest = since.is_none() && w.cfg.namespaces.table.recovers(channel);
    let (channel, since, id) = (channel.clone(), since.clone(), env.id.clone());
    let own = (server_filter.clone(), filter.clone());
    let filters = admission::filters(grants, &channel, own);
    Some(Some(Box::new(Deferred::Resume(resume::Deferred {
        channel,
        since,
        id,
        fresh,
        latest,
        join,
        filters: Filtering::Replace(filters, *delta),
    }))))
}

/// `{"op":"refresh"}`: a valid token for the same channels moves the
/// connection's expiry; anything else is refused and the old expiry stands.
fn refresh(
    w: &Worker,
    hub: &mut Hub,
    id: ConnId,
    grants: &Grants,
    token: &str,
    idv: Option<&serde_json::value::RawValue>,
) -> Bytes {
    let (true, Grants::Token(current)) = (w.cfg.auth.tokens_required(), grants) else {
        let msg = "this connection holds no token to refresh";
        return control::error(ErrorCode::BadRequest, msg, idv);
    };
    match w.verify_token(token.as_bytes(), &mut hub.stats) {
        Ok(Grants::Token(new)) if new.same_channels(current) && new.subject == current.subject => {
            let at = token_deadline(hub.now_ms(), new.exp);
            hub.set_token_expiry(id, at);
            hub.stats.token_refreshes += 1;
            control::refreshed(new.exp, idv)
        }
        Ok(_) => {
            hub.stats.auth_failures += 1;
            let msg = "a refresh token must name the same user and grant the same channels";
            control::error(ErrorCode::InvalidToken, msg, idv)
        }
        Err(e) => {
            hub.stats.auth_failures += 1;
            control::error(ErrorCode::InvalidToken, e.message(), idv)
        }
    }
}

/// `recover-on-subscribe` (embedded; Redis mode reads the position in
/// `resume`): a subscribe without `since` resumes from just before the
/// channel's latest message, which its reply is then followed by.
fn recover_latest(w: &Worker, hub: &Hub, request: &mut control::Request) {
    let control::Request::Subscribe { channel, since, .. } = request else {
        return;
    };
    if since.is_some() || !w.cfg.namespaces.table.recovers(channel) {
        return;
    }
    *since = recall::before_latest(hub, channel);
}

/// Whether the connection may subscribe to (or query) or publish on the
/// request's channel: its grants, and with namespaces its namespace's
/// rules (`namespace::Table`); the error to answer if not.
/// A connect-hook connection's publish on a channel without a publish hook.
const UNHOOKED: &str = "a connection of the connect hook publishes only through a publish hook, and this channel has none";

fn namespace_gate(
    w: &Worker,
    hub: &mut Hub,
    (id, grants): (ConnId, &Grants),
    request: &control::Request,
) -> Option<(ErrorCode, &'static str)> {
    let table = &w.cfg.namespaces.table;
    let verdict = match request {
        control::Request::Subscribe {
            channel,
            delta: true,
            ..
        } if !table.allows_delta(channel) => {
            return Some((ErrorCode::DeltaNotAllowed, NO_DELTAS));
        }
        control::Request::Publish {
            channel,
            meta: Some(m),
            ..
        } if m.delta() && !table.allows_delta(channel) => {
            count_refused(w, channel);
            return Some((ErrorCode::DeltaNotAllowed, NO_DELTAS));
        }
        // A read of the channel: the one admission's rules (counted there).
        control::Request::Subscribe { channel, .. } | control::Request::Presence { channel } => {
            return admission::rules(w, grants, channel)
                .err()
                .map(|r| (error_code(r), r.message()));
        }
        control::Request::Publish {
            channel, payload, ..
        } => {
            let subscribed = !table.is_empty() && hub.is_subscribed(id, channel);
            let verdict = match grants.via_hook() && !hooks_session::publish_hook_for(w, channel) {
                true => Err(Refusal::Forbidden(UNHOOKED)),
                false => table.may_publish(grants, (channel, payload.len()), subscribed),
            };
            if verdict.is_err() {
                hub.stats.publish_forbidden += 1;
            }
            verdict
        }
        _ => Ok(()),
    };
    let refusal = verdict.err()?;
    if let control::Request::Publish { channel, .. } = request {
        count_refused(w, channel);
    }
    Some((error_code(refusal), refusal.message()))
}

/// Why a delta was refused: the channel's namespace has no `delta`.
const NO_DELTAS: &str = "this channel's namespace does not allow deltas (delta = \"fossil\")";

fn error_code(refusal: Refusal) -> ErrorCode {
    match refusal {
        Refusal::UnknownChannel => ErrorCode::UnknownChannel,
        Refusal::Forbidden(_) => ErrorCode::Forbidden,
        Refusal::TooLarge => ErrorCode::MessageTooLarge,
    }
}
