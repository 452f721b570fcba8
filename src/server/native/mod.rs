//! corecast's own protocol at the edge, the session of a WebSocket that
//! is neither Pusher's: path mode (`GET /ws/{channel}`: every message is a
//! publish to its channel) and the JSON control protocol (`GET /ws`,
//! `control`). The WebSocket's reader hands it data messages
//! ([`on_data`]) and the end of the connection ([`close`]); it answers
//! through the hub, publishes through `publish`, and reaches presence and
//! history through their edges.

pub mod control;

use std::rc::Rc;

use crate::auth::Grants;
use crate::hub::{CloseReason, ConnId, Hub};
use crate::log;
use crate::server::presence::edge as presence_edge;
use crate::server::publish::{count_published, count_refused, route_publish, via, Published};
use crate::server::worker::Worker;
use crate::ws::OpCode;

use crate::server::history;
use crate::server::hooks::session as hooks_session;

pub use control::Deferred;

/// Runs a deferred request to the end (replies queued).
pub async fn subscribe_deferred(w: &Rc<Worker>, id: ConnId, d: Deferred) {
    let call = match d {
        Deferred::Resume(r) => return history::subscribe_deferred(w, id, r).await,
        Deferred::Hook(call) => call,
        Deferred::Count {
            count,
            channel,
            id: idv,
        } => {
            let n = crate::server::publish::counted(w, count).await as usize;
            let reply = crate::control::ack("published", &channel, Some(n), idv.as_deref());
            w.hub.borrow_mut().send_to(id, reply);
            return;
        }
    };
    let Some((env, serial, grants)) = hooks_session::run(w, id, call).await else {
        return;
    };
    let later = {
        let mut hub = w.hub.borrow_mut();
        control::handle(w, &mut hub, (id, serial, &grants), env)
    };
    match later.map(|d| *d) {
        // The request was approved, it is not asked again: a resume, or a
        // publish's reply waiting for the other workers' counts.
        Some(d @ (Deferred::Resume(_) | Deferred::Count { .. })) => {
            Box::pin(subscribe_deferred(w, id, d)).await;
        }
        Some(Deferred::Hook(_)) | None => {}
    }
}

/// A data message from connection `id` (`serial`; its path-mode
/// `channel`, its `grants`): a publish in path mode, a request in the
/// JSON protocol. A subscribe that must
/// first read history from Redis is returned, for the reader to run
/// ([`subscribe_deferred`]) before it reads on.
pub fn on_data(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (id, serial): (ConnId, u64),
    (channel, grants): (Option<&str>, &Grants),
    opcode: OpCode,
    payload: &[u8],
) -> Option<Box<Deferred>> {
    let route = via(w);
    let Some(c) = channel else {
        let who = (id, serial, grants);
        return control::on_control(w, hub, who, opcode, payload);
    };
    // A path-mode connection is subscribed to its channel; with a publish
    // hook it may not publish (the hook speaks the JSON protocol), nor
    // may a connect-hook connection, which publishes only through one.
    let table = &w.cfg.namespaces.table;
    let verdict = match publish_hooked(w, c) || grants.via_hook() {
        true => Err(crate::namespace::Refusal::Forbidden(
            "this connection may not publish here",
        )),
        false => table.may_publish(grants, (c, payload.len()), true),
    };
    if let Err(refusal) = verdict {
        hub.stats.publish_forbidden += 1;
        count_refused(w, c);
        let (code, why) = match refusal {
            crate::namespace::Refusal::TooLarge => (1009, refusal.message()),
            _ if table.is_empty() => (1008, "this connection may not publish here"),
            _ => (1008, refusal.message()),
        };
        hub.close(id, code, why, CloseReason::Protocol);
        return None;
    }
    let before = hub.stats.deliveries;
    let outcome = route_publish(hub, route, c, opcode, payload, serial, false);
    count_published(w, c, hub.stats.deliveries - before);
    if let Published::Rejected = outcome {
        // A plain WebSocket has no way to carry an error reply: tell
        // the publisher with close 1013 rather than drop its message.
        log!(
            Info,
            "publish refused, closing publisher",
            conn = id,
            channel = c
        );
        hub.close(id, 1013, "publish buffer full", CloseReason::Overloaded);
    }
    None
}

/// With a publish hook for `channel` (`--proxy-publish`, or its
/// namespace's `publish-proxy`) every publish there is asked of the
/// backend; path mode has no way to carry its refusal, so it may not
/// publish at all (the JSON protocol's publish goes through the hook).
fn publish_hooked(w: &Worker, channel: &str) -> bool {
    w.hooks.as_deref().is_some_and(|h| {
        h.for_channel(crate::hooks::HookKind::Publish, channel)
            .is_some()
    })
}

/// What ends with the connection: its presence memberships and its
/// entry among the users (no-ops if it had none).
pub fn close(w: &Rc<Worker>, id: ConnId) {
    presence_edge::close(w, id);
    hooks_session::forget_user(w, id);
}
