//! The hooks of a JSON connection's session: its welcome (the connect
//! hook's `connected` frame and server-side channels), and subscribe,
//! publish and rpc asked of the backend before they are done.

use std::rc::Rc;

use serde_json::value::RawValue;

use crate::auth::Grants;
use crate::control::{self, Envelope, Request};
use crate::hooks::reply::{self, PublishResult, RpcResult, SubscribeResult};
use crate::hooks::{frames, request, Answer, HookKind};
use crate::hub::{CloseReason, ConnId, Filtering, Hub};
use crate::log;
use crate::server::admission;
use crate::server::history::{self, owner, recall, resume};
use crate::server::hooks::connect::Welcome;
use crate::server::hooks::refresh::refresh_loop;
use crate::server::hooks::Failure;
use crate::server::presence::edge::{self as presence_edge, Identity};
use crate::server::publish::{self, Published};
use crate::server::worker::Worker;
use crate::ws::OpCode;

/// Queues a hook-admitted connection's first frame, subscribes it to
/// the channels the backend listed (checked names; at most
/// `--max-subscriptions`) as its own subscribes would be, and starts its
/// refresh loop if it has one.
pub fn welcome(w: &Rc<Worker>, hub: &mut Hub, (id, grants): (ConnId, &Grants), welcome: Welcome) {
    let serial = hub.conn(id).map_or(0, |c| c.serial());
    if let Some(plan) = welcome.refresh {
        monoio::spawn(refresh_loop(w.clone(), (id, serial), plan));
    }
    if let Some(frame) = welcome.frame {
        hub.send_to(id, frame);
    }
    let who = Identity::of(w, grants, serial);
    for c in &welcome.channels {
        server_subscribe(w, hub, (id, &who), c);
    }
}

/// A server-side subscription (the connect hook's channels, the server
/// API's subscribe) made as a JSON subscribe without `id` is: admitted
/// by presence (a full presence channel is skipped), answered
/// `{"type":"subscribed"}` with the channel's position when it has
/// history (in Redis mode after the read from Redis), and joined to the
/// channel's presence with the connection's user and info.
fn server_subscribe(w: &Rc<Worker>, hub: &mut Hub, (id, who): (ConnId, &Identity<'_>), c: &str) {
    if let Err(r) = admission::server_may_subscribe(w, c) {
        log!(
            Debug,
            "server-side subscription refused",
            conn = id,
            channel = c,
            reason = r.message()
        );
        return;
    }
    if presence_edge::admit(w, who, c, false).is_err() {
        log!(
            Debug,
            "server-side subscription refused by presence",
            conn = id,
            channel = c
        );
        return;
    }
    let deferred = match w.redis.as_deref() {
        Some(l) => l.keeps_history_of(c),
        None => owner::waits_for_owner(w, hub, c),
    };
    if !deferred {
        // The backend's decision: no filters of its own, and one the
        // connection already has keeps its filters.
        recall::subscribe(hub, id, c, (None, Filtering::IfNew(None)), None);
        if hub.is_subscribed(id, c) {
            presence_edge::join(w, hub, id, who, c, false);
        }
        return;
    }
    // Presence does not wait for the history read (as a client's).
    presence_edge::join(w, hub, id, who, c, false);
    let d = resume::Deferred {
        channel: c.to_string(),
        since: None,
        id: None,
        fresh: !hub.is_subscribed(id, c),
        latest: w.cfg.namespaces.table.recovers(c),
        join: None,
        filters: Filtering::IfNew(None),
    };
    let w = w.clone();
    monoio::spawn(async move { history::subscribe_deferred(&w, id, d).await });
}

/// The server API's subscribe of connection `id`, whose user and info
/// are `who`: as the connect hook's channels are subscribed.
pub fn api_subscribe(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (id, (user, info)): (ConnId, (&str, Option<&str>)),
    channel: &str,
) {
    let who = Identity {
        user: user.to_string(),
        info,
    };
    server_subscribe(w, hub, (id, &who), channel);
}

/// A server-side unsubscribe (the server API's) made as a JSON
/// unsubscribe is: answered `{"type":"unsubscribed"}`, and the
/// connection leaves the channel's presence. False: it was not
/// subscribed.
pub fn server_unsubscribe(w: &Rc<Worker>, hub: &mut Hub, id: ConnId, channel: &str) -> bool {
    if !hub.unsubscribe(id, channel) {
        return false;
    }
    presence_edge::unsubscribe(w, hub, id, channel);
    hub.send_to(id, control::ack("unsubscribed", channel, None, None))
}

/// Records a native WebSocket's user (a token's `sub` or the connect
/// hook's `user`) for the server API; anonymous ones are not recorded.
pub fn register_user(w: &Worker, hub: &Hub, id: ConnId, grants: &Grants) {
    let Some(user) = grants.subject() else { return };
    if hub.conn(id).is_some() {
        w.users
            .borrow_mut()
            .add((user, grants.info()), id, crate::auth::unix_now_ms());
    }
}

/// A native WebSocket ended: out of the server API's index.
pub fn forget_user(w: &Worker, id: ConnId) {
    w.users.borrow_mut().remove(id);
}

/// A JSON request waiting for its hook: the request, and who sent it.
pub struct HookCall {
    /// The request.
    pub env: Envelope,
    /// The connection's serial (its client id).
    pub serial: u64,
    /// What the connection may do (its user).
    pub grants: Grants,
}

/// Whether `req` is asked of a hook first (after the rules allowed it:
/// the connection's grants and its namespace's): a subscribe or a
/// presence query on a channel with a subscribe hook, a publish on one
/// with a publish hook (its namespace's, else the global one), any rpc.
/// Every client request a hook applies to is asked, whatever rule let
/// it through.
pub fn applies(w: &Worker, req: &Request) -> bool {
    let Some(h) = w.hooks.as_deref() else {
        return false;
    };
    match req {
        Request::Subscribe { channel, .. } | Request::Presence { channel } => {
            h.for_channel(HookKind::Subscribe, channel).is_some()
        }
        Request::Publish { channel, .. } => h.for_channel(HookKind::Publish, channel).is_some(),
        Request::Rpc { .. } => h.has(HookKind::Rpc),
        _ => false,
    }
}

/// Whether `channel` has a publish hook (its namespace's or the global).
pub fn publish_hook_for(w: &Worker, channel: &str) -> bool {
    w.hooks
        .as_deref()
        .is_some_and(|h| h.for_channel(HookKind::Publish, channel).is_some())
}

/// Asks the backend about `call`; the request to carry out (a publish's
/// payload replaced by the hook's `data`), or `None` when it is done —
/// answered (rpc), refused (error reply), failed (`unavailable`) or the
/// connection closed (`disconnect`).
pub async fn run(w: &Rc<Worker>, id: ConnId, call: HookCall) -> Option<(Envelope, u64, Grants)> {
    let edge = w.hooks.clone()?;
    let HookCall {
        env,
        serial,
        grants,
    } = call;
    let client = crate::pusher::socket_id(w.pusher.borrow().tag, serial);
    let user = grants.subject().unwrap_or("");
    let idv = env.id.as_deref();
    let env = match &env.request {
        // A presence query reads the channel: its subscribe hook decides.
        Request::Subscribe { channel, .. } | Request::Presence { channel } => {
            let hook = edge.for_channel(HookKind::Subscribe, channel)?;
            let body = request::subscribe(&client, user, channel);
            let a = edge.call_hook(hook, &[], &body, reply::parse::<SubscribeResult>);
            let r = settle(w, id, a.await, idv)?;
            with_server_filter(w, id, env, r.filter)?
        }
        Request::Publish {
            channel,
            opcode,
            payload,
            ..
        } => {
            let hook = edge.for_channel(HookKind::Publish, channel)?;
            let body = request::publish(&client, user, channel, (*opcode, payload));
            let a = edge.call_hook(hook, &[], &body, reply::parse::<PublishResult>);
            let r = settle(w, id, a.await, idv)?;
            let skip = r.skip_history && w.redis.is_none();
            let env = rewritten(env, r);
            if skip {
                return publish_unrecorded(w, (id, serial), env).await;
            }
            env
        }
        Request::Rpc { method, data } => {
            let data = data.clone().and_then(|d| RawValue::from_string(d).ok());
            let body = request::rpc(&client, user, method, data.as_deref());
            let a = edge.call(HookKind::Rpc, &[], &body, reply::parse::<RpcResult>);
            let r = settle(w, id, a.await, idv)?;
            let frame = frames::rpc(idv, r.data.as_deref());
            w.hub.borrow_mut().send_to(id, frame);
            return None;
        }
        _ => env,
    };
    Some((env, serial, grants))
}

/// A publish whose hook said `skip_history` (without Redis): fanned out
/// without a history offset (through the channel's owner with several
/// workers), acknowledged as any publish.
async fn publish_unrecorded<T>(
    w: &Worker,
    (id, serial): (ConnId, u64),
    env: Envelope,
) -> Option<T> {
    let Request::Publish {
        channel,
        opcode,
        payload,
        meta,
    } = &env.request
    else {
        return None;
    };
    let outcome = {
        let mut hub = w.hub.borrow_mut();
        let count = env.id.is_some();
        let msg = (&channel[..], *opcode, &payload[..], meta.as_ref());
        publish::route_unrecorded(&mut hub, publish::via(w), msg, serial, count)
    };
    let n = match outcome {
        Published::Counting(count, _) => publish::counted(w, count).await as usize,
        Published::Local(n) => n,
        _ => 0,
    };
    if let Some(i) = env.id.as_deref() {
        let ack = crate::control::ack("published", channel, Some(n), Some(i));
        w.hub.borrow_mut().send_to(id, ack);
    }
    None
}

/// The subscribe with the subscribe hook's `filter`, which the server
/// applies whatever the client asks; a filter that does not parse fails
/// the subscribe (`unavailable`), never lets everything through.
fn with_server_filter(
    w: &Worker,
    id: ConnId,
    mut env: Envelope,
    filter: Option<serde_json::Value>,
) -> Option<Envelope> {
    let (Some(tree), Request::Subscribe { server_filter, .. }) = (filter, &mut env.request) else {
        return Some(env);
    };
    match crate::filter::Filter::from_json(&tree) {
        Ok(f) => {
            *server_filter = Some(f);
            Some(env)
        }
        Err(e) => {
            log!(
                Warn,
                "subscribe hook answered a bad filter",
                conn = id,
                why = e
            );
            let msg = "the backend answered an invalid filter";
            let frame = frames::unavailable(msg, env.id.as_deref());
            w.hub.borrow_mut().send_to(id, frame);
            None
        }
    }
}

/// The publish with the hook's `data` instead of the client's: a JSON
/// string as its text, any other JSON as its text form.
fn rewritten(mut env: Envelope, r: PublishResult) -> Envelope {
    let (
        Some(data),
        Request::Publish {
            opcode, payload, ..
        },
    ) = (r.data, &mut env.request)
    else {
        return env;
    };
    let text = serde_json::from_str::<String>(data.get()).unwrap_or_else(|_| data.get().into());
    *opcode = OpCode::Text;
    *payload = text.into_bytes();
    env
}

/// The result to go on with, or `None` after answering the client: the
/// backend's `error` passed on, its `disconnect` closing the connection,
/// a failed call as `unavailable`.
fn settle<T>(
    w: &Worker,
    id: ConnId,
    outcome: Result<Answer<T>, Failure>,
    idv: Option<&RawValue>,
) -> Option<T> {
    let mut hub = w.hub.borrow_mut();
    match outcome {
        Ok(Answer::Result(r)) => return Some(r),
        Ok(Answer::Error { code, message }) => {
            hub.send_to(id, frames::refused(code, &message, idv));
        }
        Ok(Answer::Disconnect { code, reason }) => {
            log!(Debug, "backend disconnects", conn = id, code = code);
            hub.close(id, code, &reason, CloseReason::Protocol);
        }
        Err(f) => {
            hub.send_to(id, frames::unavailable(f.message(), idv));
        }
    }
    None
}
