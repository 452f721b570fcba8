//! The server API at the edge (`/api/...`, with the publish key): the
//! application disconnects, unsubscribes or subscribes a user's
//! connections, or lists them. Without Redis a command acts on this
//! instance at once; in Redis mode it is published on the control
//! channel (`hooks::api::CONTROL_CHANNEL`), which every instance —
//! this one too — hears exactly once and carries out (`Worker`'s
//! delivery calls `users::apply`). `GET /api/connections` lists this
//! instance's connections.

use crate::auth;
use crate::hooks::api::{self, Command, ConnectionInfo, CONTROL_CHANNEL};
use crate::http::{self, HttpError, Method};
use crate::redis::resp::Reply;
use crate::server::hooks::users;
use crate::server::publish::{route_publish, Published};
use crate::server::worker::Worker;
use crate::ws::OpCode;

/// Answers `/api/{rest}`.
pub async fn respond(w: &Worker, rest: &str, req: &http::Request, body: &[u8]) -> Vec<u8> {
    let ka = req.keep_alive;
    let refuse = |(status, message)| http::error_response(&HttpError { status, message }, ka);
    if w.cfg.auth.publish_key.is_none() {
        return refuse((403, "the server API needs --publish-key"));
    }
    if let Err(e) = auth::authorize_publish(&w.cfg.auth, req) {
        w.hub.borrow_mut().stats.auth_failures += 1;
        return refuse(e);
    }
    let answer = match (req.method, rest) {
        (Method::Get | Method::Head, "connections") => Ok(connections(w, req.query.as_deref())),
        (Method::Post, name) => match api::parse(name, body) {
            Ok(cmd) => carry_out(w, &cmd).await,
            Err(e) => Err(e),
        },
        _ => Err((405, "method not allowed")),
    };
    match answer {
        Ok(body) => http::response(
            200,
            "application/json",
            body.to_string().as_bytes(),
            ka,
            &[],
            false,
        ),
        Err(e) => refuse(e),
    }
}

/// Acts here, or on every instance through Redis (also the Pusher API's
/// `terminate_connections`).
pub async fn carry_out(w: &Worker, cmd: &Command) -> Result<serde_json::Value, api::Refusal> {
    let Some(link) = &w.redis else {
        let tag = w.pusher.borrow().tag;
        let n = users::apply(&mut w.hub.borrow_mut(), &w.users.borrow(), (cmd, tag));
        return Ok(serde_json::json!({ "connections": n }));
    };
    let payload = api::encode(cmd);
    let outcome = {
        let mut hub = w.hub.borrow_mut();
        route_publish(
            &mut hub,
            Some(link),
            CONTROL_CHANNEL,
            OpCode::Text,
            &payload,
            0,
            true,
        )
    };
    let Published::Queued(Some(waiter)) = outcome else {
        return Err((503, "redis unavailable; nothing done"));
    };
    match monoio::time::timeout(link.command_timeout(), waiter.wait()).await {
        Ok(Ok(Reply::Integer(n))) => Ok(serde_json::json!({ "instances": n })),
        _ => Err((
            503,
            "redis did not confirm; the command may still be carried out",
        )),
    }
}

/// `GET /api/connections?user=...`: this instance's connections of the
/// user.
fn connections(w: &Worker, query: Option<&str>) -> serde_json::Value {
    let user = query
        .and_then(|q| auth::query_param(q, "user"))
        .unwrap_or("");
    connections_of(w, user)
}

/// This instance's connections of `user` (the console's list too).
pub fn connections_of(w: &Worker, user: &str) -> serde_json::Value {
    let tag = w.pusher.borrow().tag;
    let hub = w.hub.borrow();
    let list: Vec<ConnectionInfo> = w
        .users
        .borrow()
        .of(user)
        .into_iter()
        .filter_map(|(id, since)| {
            let serial = hub.conn(id)?.serial();
            Some(ConnectionInfo {
                instance: tag,
                client: crate::pusher::socket_id(tag, serial),
                channels: hub.channels_of(id).iter().map(|c| c.to_string()).collect(),
                connected_since_ms: since,
            })
        })
        .collect();
    serde_json::json!({ "user": user, "connections": list })
}
