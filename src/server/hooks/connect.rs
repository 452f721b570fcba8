//! The connect hook at the upgrade, before the `101`: the backend says
//! who the client is (from its cookies and allow-listed headers), or
//! refuses it — `error` 401 → `401`, any other `error` or a `disconnect`
//! → `403`, the reason in the body — and a failed call refuses it with
//! `503` (fail closed). A refused client never holds a WebSocket.

use std::net::IpAddr;

use bytes::Bytes;

use super::refresh::Plan;
use super::{Failure, Hook, HookEdge};
use crate::auth::Grants;
use crate::filter::Filter;
use crate::hooks::reply::{self, ConnectResult, SubscribeResult};
use crate::hooks::{frames, request, Answer, HookKind};
use crate::http;

/// What the connection gets once it is a WebSocket.
#[derive(Debug, Default)]
pub struct Welcome {
    /// A JSON client's first frame (`{"type":"connected"}`).
    pub frame: Option<Bytes>,
    /// Channels the backend subscribed it to.
    pub channels: Vec<String>,
    /// With `--proxy-refresh` and an `expire_at`: whom to ask, when.
    pub refresh: Option<Plan>,
}

/// An admitted connection: what it may do, and its welcome.
pub struct Admitted {
    /// Its user, info and expiry as the backend gave them.
    pub grants: Grants,
    /// Its first frame and server-side subscriptions.
    pub welcome: Box<Welcome>,
}

/// Asks the connect hook about the upgrade whose head is `head`, for
/// connection `client` from address `peer`; `json`: it speaks the JSON protocol (it gets a
/// `connected` frame). `Err`: the complete refusal response.
pub async fn admit(
    edge: &HookEdge,
    (client, peer): (&str, IpAddr),
    head: &[u8],
    json: bool,
) -> Result<Admitted, Vec<u8>> {
    let forwarded = request::pick_headers(head, &edge.config().http_headers, peer);
    let body = request::connect(client);
    let max = edge.max_channels;
    let parse = |b: &[u8]| reply::parse_connect(b, max);
    let r = refused(edge.call(HookKind::Connect, &forwarded, &body, parse).await)?;
    Ok(admitted(edge, client, r, json))
}

/// A path-mode upgrade's channel (`/ws/{channel}`), asked of its
/// subscribe hook before the `101` as a JSON subscribe is: a refusal is
/// the upgrade's answer, as the connect hook's.
pub async fn admit_channel(
    (edge, hook): (&HookEdge, &Hook),
    client: &str,
    user: &str,
    channel: &str,
) -> Result<Option<Filter>, Vec<u8>> {
    let body = request::subscribe(client, user, channel);
    let parse = reply::parse::<SubscribeResult>;
    let r = refused(edge.call_hook(hook, &[], &body, parse).await)?;
    // The hook's filter is a security decision: one that does not parse
    // refuses the read (503), never lets everything through.
    match r.filter.map(|f| Filter::from_json(&f)) {
        None => Ok(None),
        Some(Ok(f)) => Ok(Some(f)),
        Some(Err(_)) => {
            let why = "the backend answered an invalid filter";
            Err(refusal(503, why, None))
        }
    }
}

/// The result, or the upgrade's refusal: `error` 401 → `401`, any other
/// `error` or a `disconnect` → `403`, a failed call → `503`.
fn refused<T>(outcome: Result<Answer<T>, Failure>) -> Result<T, Vec<u8>> {
    match outcome {
        Ok(Answer::Result(r)) => Ok(r),
        Ok(Answer::Error { code, message }) => {
            let status = if code == 401 { 401 } else { 403 };
            Err(refusal(status, &message, Some(code)))
        }
        Ok(Answer::Disconnect { code, reason }) => Err(refusal(403, &reason, Some(code.into()))),
        Err(f) => Err(refusal(503, f.message(), None)),
    }
}

fn admitted(edge: &HookEdge, client: &str, r: ConnectResult, json: bool) -> Admitted {
    let frame = json.then(|| frames::connected(client, &r.user, r.data.as_deref()));
    let publish = edge.any_publish();
    let info = r.info.map(|i| i.get().to_string());
    let refresh = (edge.has(HookKind::Refresh) && r.expire_at > 0).then(|| Plan {
        user: r.user.clone(),
        exp: r.expire_at,
    });
    Admitted {
        grants: Grants::from_hook(r.user, info, r.expire_at, publish),
        welcome: Box::new(Welcome {
            frame,
            // A path-mode connection has its one channel by its URL: its
            // messages carry no channel name to tell others apart.
            channels: if json { r.channels } else { Vec::new() },
            refresh,
        }),
    }
}

/// `{"error":"...","code":N}` with `status`; the connection closes.
fn refusal(status: u16, message: &str, code: Option<u32>) -> Vec<u8> {
    let body = serde_json::json!({ "error": message, "code": code });
    let body = body.to_string();
    http::response(
        status,
        "application/json",
        body.as_bytes(),
        false,
        &[],
        false,
    )
}
