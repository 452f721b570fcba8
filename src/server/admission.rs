//! Who may read a channel: the one admission of a (connection identity,
//! channel) pair, whichever way the client comes in — a JSON subscribe
//! or presence query (`native::control`, whose hook call the reader
//! defers), a path-mode upgrade, an event stream, `GET /history` and
//! `GET /presence`.
//!
//! A read is admitted in two steps, always both:
//! 1. the identity: the request's token (or publish key) — or, with a
//!    connect hook and no token, the backend's answer for the request's
//!    cookies and allow-listed headers ([`by_connect_hook`]);
//! 2. the channel: the rules ([`rules`]: the grants, and the channel's
//!    namespace), then the channel's subscribe hook when it has one
//!    ([`subscribe_hook`]).
//!
//! Server-side subscriptions (the connect hook's channels, the server
//! API's subscribe) are the backend's own decision; they only need a
//! channel some namespace names ([`server_may_subscribe`]).

use std::net::IpAddr;

use crate::auth::{self, Grants};
use crate::filter::Filter;
use crate::hooks::HookKind;
use crate::http::{self, HttpError};
use crate::hub::{ConnId, Filters};
use crate::log;
use crate::namespace::Refusal;
use crate::server::hooks::connect::{self as connect_hook, Admitted};
use crate::server::hooks::{Hook, HookEdge};
use crate::server::publish::count_refused;
use crate::server::worker::Worker;

/// The rules of a read of `channel` by a connection with `grants`: what
/// its token grants, and with namespaces the channel's namespace rules
/// (`subscribe`, anonymous access, user channels). A refusal is counted
/// against the channel's namespace.
pub fn rules(w: &Worker, grants: &Grants, channel: &str) -> Result<(), Refusal> {
    let tokens = w.cfg.auth.tokens_required();
    let verdict = w
        .cfg
        .namespaces
        .table
        .may_subscribe(grants, tokens, channel);
    if verdict.is_err() {
        count_refused(w, channel);
    }
    verdict
}

/// The subscribe hook that decides reads of `channel`: its namespace's
/// (`subscribe-proxy`), else the global `--proxy-subscribe`.
pub fn subscribe_hook<'a>(w: &'a Worker, channel: &str) -> Option<(&'a HookEdge, &'a Hook)> {
    let edge = w.hooks.as_deref()?;
    Some((edge, edge.for_channel(HookKind::Subscribe, channel)?))
}

/// The client id the backend knows connection `id` by (its
/// `socket_id`).
pub fn client_id(w: &Worker, id: ConnId) -> String {
    let serial = w.hub.borrow().conn(id).map_or(0, |c| c.serial());
    crate::pusher::socket_id(w.pusher.borrow().tag, serial)
}

/// A read of `channel` over HTTP — a path-mode upgrade, an event
/// stream's channel, `GET /history`, `GET /presence` — by connection
/// `id` with `grants`: the rules, then the subscribe hook. `Err`: the
/// complete response that refuses it (the connection closes).
pub async fn http_read(
    w: &Worker,
    (id, grants): (ConnId, &Grants),
    channel: &str,
) -> Result<Option<Filters>, Vec<u8>> {
    if let Err(r) = rules(w, grants, channel) {
        w.hub.borrow_mut().stats.auth_failures += 1;
        log::refused(log::Refusal::Upgrade, "channel refused", r.message());
        let err = HttpError {
            status: r.status(),
            message: r.message(),
        };
        return Err(http::error_response(&err, false));
    }
    let Some(hook) = subscribe_hook(w, channel) else {
        return Ok(filters(grants, channel, (None, None)));
    };
    let client = client_id(w, id);
    let user = grants.subject().unwrap_or("");
    let verdict = connect_hook::admit_channel(hook, &client, user, channel).await;
    if verdict.is_err() {
        w.hub.borrow_mut().stats.auth_failures += 1;
        log::refused(log::Refusal::Upgrade, "channel refused", "subscribe hook");
    }
    verdict.map(|hooked| filters(grants, channel, (hooked, None)))
}

/// `filters` (the server's) with a client's `own` filter after them.
pub fn narrowed(filters: Option<Filters>, own: Option<Filter>) -> Option<Filters> {
    let Some(own) = own else {
        return filters;
    };
    let mut all: Vec<Filter> = filters.map(|f| f.to_vec()).unwrap_or_default();
    all.push(own);
    Some(Filters::from(all))
}

/// The tag filters a subscription of `grants`' holder to `channel` gets:
/// its token's (every pattern matching the channel), the subscribe
/// hook's (`hooked`), then the client's own (`own`). A publication
/// reaches it only if it passes all of them, so the client's filter can
/// narrow what the server's let through, never widen it. `None`: none.
pub fn filters(
    grants: &Grants,
    channel: &str,
    (hooked, own): (Option<Filter>, Option<Filter>),
) -> Option<Filters> {
    let mut all = grants.filters_for(channel);
    all.extend(hooked);
    all.extend(own);
    (!all.is_empty()).then(|| Filters::from(all))
}

/// With a connect hook, a request from `peer` that brings no token is
/// identified by the backend (`head`: the request's head, for its cookies
/// and allow-listed headers; none is asked as a request without them);
/// `json`: the client speaks the JSON protocol. `None`: the hook does
/// not decide (none is configured, or the request brings a token, whose
/// rules then apply). `Err`: the complete refusal (the `Origin` not
/// allowed, the backend's refusal, or its failure: fail closed).
pub async fn by_connect_hook(
    w: &Worker,
    (id, peer, req): (ConnId, IpAddr, &http::Request),
    head: Option<&[u8]>,
    json: bool,
) -> Option<Result<Admitted, Vec<u8>>> {
    let edge = w.connect_hook()?;
    if carries_token(&w.cfg.auth, req) {
        return None;
    }
    let refused = |why: &str| {
        w.hub.borrow_mut().stats.auth_failures += 1;
        log::refused(log::Refusal::Upgrade, "request refused", why);
    };
    if !auth::origin_allowed(&w.cfg.auth.allowed_origins, req.origin.as_deref()) {
        refused("origin not allowed");
        let err = HttpError {
            status: 403,
            message: "origin not allowed",
        };
        return Some(Err(http::error_response(&err, false)));
    }
    let client = client_id(w, id);
    let head = head.unwrap_or_default();
    let admitted = connect_hook::admit(edge, (&client, peer), head, json).await;
    Some(admitted.inspect_err(|_| refused("connect hook")))
}

/// Whether a server-side subscription (the connect hook's channels, the
/// server API's subscribe) may be made: the backend decides who reads
/// what, but only of channels some namespace names.
pub fn server_may_subscribe(w: &Worker, channel: &str) -> Result<(), Refusal> {
    let table = &w.cfg.namespaces.table;
    match table.is_empty() || table.find(channel).is_some() {
        true => Ok(()),
        false => Err(Refusal::UnknownChannel),
    }
}

/// Whether tokens are on and the request carries one (`?token=` or
/// `Authorization: Bearer`).
pub fn carries_token(cfg: &auth::AuthConfig, req: &http::Request) -> bool {
    let query = req.query.as_deref();
    cfg.tokens_required()
        && (query.and_then(|q| auth::query_param(q, "token")).is_some()
            || req
                .authorization
                .as_deref()
                .and_then(auth::bearer)
                .is_some())
}
