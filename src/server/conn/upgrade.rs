//! The WebSocket upgrade: which routes upgrade, who may (auth: `Origin`,
//! tokens), and the `101 Switching Protocols` answer.

use std::io;
use std::net::IpAddr;

use crate::auth::{self, Grants};
use crate::console::FEED_CHANNEL;
use crate::http::{self, HttpError, Route};
use crate::hub::{ConnId, ConnKind, Filters};
use crate::log;
use crate::peers::PeerRefusal;
use crate::pusher;
use crate::server::admission;
use crate::server::conn::stream::Stream;
use crate::server::endpoints::STATUS_CHANNEL;
use crate::server::formats;
use crate::server::hooks::connect::{Admitted, Welcome};
use crate::server::worker::Worker;

/// An accepted upgrade.
pub struct Upgrade {
    /// The mode, its wire format compressed if permessage-deflate was
    /// agreed.
    pub kind: ConnKind,
    /// The channel of `/ws/{channel}` (or the status feed's).
    pub channel: Option<String>,
    /// What the connection's token allows.
    pub grants: Grants,
    /// permessage-deflate was agreed: client messages may be compressed.
    pub deflate: bool,
    /// What the connect hook gave it (first frame, server-side channels).
    pub welcome: Option<Box<Welcome>>,
    /// Path mode: the tag filters the server applies to its channel
    /// (its token's, its subscribe hook's).
    pub filters: Option<Filters>,
}

impl Upgrade {
    /// An upgrade of `kind` on `channel` with `grants`, nothing agreed or
    /// given yet.
    fn plain(kind: ConnKind, channel: Option<String>, grants: Grants) -> Upgrade {
        Upgrade {
            kind,
            channel,
            grants,
            deflate: false,
            welcome: None,
            filters: None,
        }
    }
}

/// The mode and channel of an upgrading route; `None` for other routes.
/// For `GET /app/{key}` the "channel" is the app key.
pub fn upgrade_target(route: &Route<'_>) -> Option<(ConnKind, Option<String>)> {
    match route {
        Route::PusherWs(key) => Some((ConnKind::Ws(formats::PUSHER), Some(key.to_string()))),
        Route::WsChannel(c) => Some((ConnKind::Ws(formats::PATH), Some(c.to_string()))),
        Route::WsMulti => Some((ConnKind::Ws(formats::JSON), None)),
        Route::StatusWs => Some((
            ConnKind::Ws(formats::PATH),
            Some(STATUS_CHANNEL.to_string()),
        )),
        // Its session cookie was checked before (`conn::http`).
        Route::ConsoleFeed => Some((ConnKind::Ws(formats::PATH), Some(FEED_CHANNEL.to_string()))),
        _ => None,
    }
}

/// Decides an upgrade request: writes the `101` and returns the upgrade,
/// or answers with the refusal and returns `None` (the connection ends).
/// `head`: the request's head, kept when the connect hook may need it.
pub async fn upgrade(
    w: &Worker,
    sock: &mut Stream,
    (id, ip): (ConnId, IpAddr),
    (req, head): (&http::Request, Option<&[u8]>),
    (kind, channel): (ConnKind, Option<String>),
) -> io::Result<Option<Upgrade>> {
    let verdict = w.peers.borrow().handshake(ip);
    if let Err(PeerRefusal::TooFast(after_ms)) = verdict {
        w.hub.borrow_mut().stats.per_ip_handshakes_limited += 1;
        log::refused(
            log::Refusal::PerIp,
            "upgrade refused",
            "handshake rate per address exceeded",
        );
        let err = HttpError {
            status: 429,
            message: "too many handshakes from this address",
        };
        let resp = http::retry_after_response(&err, false, after_ms);
        sock.write_all(resp).await?;
        return Ok(None);
    }
    if kind == ConnKind::Ws(formats::PUSHER) {
        let key = channel.as_deref().unwrap_or_default();
        return pusher_upgrade(w, sock, (id, req), key).await;
    }
    if channel.as_deref() == Some(FEED_CHANNEL) {
        // The console's feed: read-only, its session checked already;
        // a page of another origin may not open it (`--allowed-origins`,
        // as every other upgrade).
        if !origin_ok(w, sock, req).await? {
            return Ok(None);
        }
        return accept(w, sock, id, req, feed_upgrade(kind, channel)).await;
    }
    let status_feed = channel.as_deref() == Some(STATUS_CHANNEL);
    if !status_feed {
        // Centrifugo's rule: a client that brings a token is checked as
        // before; one without asks the backend (cookies).
        let json = kind == ConnKind::Ws(formats::JSON);
        if let Some(admitted) = admission::by_connect_hook(w, (id, ip, req), head, json).await {
            return hooked_upgrade(w, sock, (id, req), (kind, channel), admitted).await;
        }
    }
    let checked = if status_feed {
        None
    } else {
        channel.as_deref()
    };
    let grants = match w.authorize(req, checked) {
        Ok(g) if status_feed => {
            // Read-only whatever the token grants, but not beyond its exp.
            if let Some(exp) = g.expires() {
                let mut hub = w.hub.borrow_mut();
                let at = auth::token_deadline_ms(hub.now_ms(), exp, auth::unix_now_ms());
                hub.set_token_expiry(id, at);
            }
            Grants::read_only()
        }
        Ok(g) => g,
        Err((status, message)) => {
            w.hub.borrow_mut().stats.auth_failures += 1;
            if let (Some(c), 403 | 404) = (checked, status) {
                crate::server::publish::count_refused(w, c);
            }
            log::refused(log::Refusal::Upgrade, "upgrade refused", message);
            refuse(sock, &HttpError { status, message }).await?;
            return Ok(None);
        }
    };
    accept(w, sock, id, req, Upgrade::plain(kind, channel, grants)).await
}

/// The console feed's upgrade: read-only (its session was checked by
/// `conn::http` before).
fn feed_upgrade(kind: ConnKind, channel: Option<String>) -> Upgrade {
    Upgrade::plain(kind, channel, Grants::read_only())
}

/// A path-mode upgrade's channel is admitted as any read of it is
/// (`admission::http_read`: the rules, then its subscribe hook) however
/// the connection was identified — a token, a publish key, or the
/// connect hook. Internal `!` channels (the status and console feeds')
/// were decided by their own rules before.
async fn channel_admission(
    w: &Worker,
    id: ConnId,
    up: &Upgrade,
) -> Result<Option<Filters>, Vec<u8>> {
    let channel = up.channel.as_deref().filter(|c| !c.starts_with('!'));
    match (channel, up.kind) {
        (Some(channel), ConnKind::Ws(formats::PATH)) => {
            admission::http_read(w, (id, &up.grants), channel).await
        }
        _ => Ok(None),
    }
}

/// An upgrade the connect hook decided (after the `Origin` allow-list):
/// the backend's refusal is the answer, or its user, info, expiry,
/// channels and data go with the `101`.
async fn hooked_upgrade(
    w: &Worker,
    sock: &mut Stream,
    (id, req): (ConnId, &http::Request),
    (kind, channel): (ConnKind, Option<String>),
    admitted: Result<Admitted, Vec<u8>>,
) -> io::Result<Option<Upgrade>> {
    match admitted {
        Ok(a) => {
            let up = Upgrade {
                kind,
                channel,
                grants: a.grants,
                deflate: false,
                welcome: Some(a.welcome),
                filters: None,
            };
            accept(w, sock, id, req, up).await
        }
        Err(refusal) => {
            sock.write_all(refusal).await?;
            Ok(None)
        }
    }
}

/// Writes the `101` (or refuses a bad handshake, or a channel the
/// subscribe hook refuses).
async fn accept(
    w: &Worker,
    sock: &mut Stream,
    id: ConnId,
    req: &http::Request,
    up: Upgrade,
) -> io::Result<Option<Upgrade>> {
    let filters = match channel_admission(w, id, &up).await {
        Ok(f) => f,
        Err(refusal) => {
            sock.write_all(refusal).await?;
            return Ok(None);
        }
    };
    match &req.upgrade {
        Ok(accept) => {
            let agreed = req.deflate.filter(|_| w.cfg.compression.enabled);
            let extension = agreed.map(|a| a.response_value());
            let head = crate::ws::handshake::response_101_with(accept, extension.as_deref());
            sock.write_small(head).await?;
            let kind = match up.kind {
                ConnKind::Ws(base) => ConnKind::Ws(formats::negotiated(base, agreed)),
                other => other,
            };
            Ok(Some(Upgrade {
                kind,
                deflate: agreed.is_some(),
                filters,
                ..up
            }))
        }
        Err(e) => {
            w.hub.borrow_mut().stats.handshake_failures += 1;
            log!(Debug, "handshake refused", conn = id, reason = log::Dbg(e));
            refuse(sock, &http::handshake_error(e)).await?;
            Ok(None)
        }
    }
}

/// `GET /app/{key}`: only the `Origin` allow-list applies (Pusher
/// clients carry no token; channels are authorized one by one); an
/// unknown key or protocol is refused in-band after the upgrade.
async fn pusher_upgrade(
    w: &Worker,
    sock: &mut Stream,
    (id, req): (ConnId, &http::Request),
    key: &str,
) -> io::Result<Option<Upgrade>> {
    if !origin_ok(w, sock, req).await? {
        return Ok(None);
    }
    let verdict = match w.cfg.pusher.by_key(key) {
        None => Err(pusher::protocol::code::APP_NOT_FOUND),
        Some((app, _)) => pusher::check_protocol(req.query.as_deref()).map(|()| app),
    };
    let up = Upgrade::plain(ConnKind::Ws(formats::PUSHER), None, Grants::read_only());
    // Pusher reports errors in-band, once the WebSocket is open, so
    // pusher-js sees the code and decides on reconnecting; the verdict
    // waits in the worker, not in the connection's task.
    let accepted = accept(w, sock, id, req, up).await?;
    if accepted.is_some() {
        w.pusher.borrow_mut().pending.insert(id, verdict);
    }
    Ok(accepted)
}

/// Whether the upgrade's `Origin` is allowed (`--allowed-origins`);
/// if not, it is refused `403`, counted and logged.
async fn origin_ok(w: &Worker, sock: &mut Stream, req: &http::Request) -> io::Result<bool> {
    if auth::origin_allowed(&w.cfg.auth.allowed_origins, req.origin.as_deref()) {
        return Ok(true);
    }
    w.hub.borrow_mut().stats.auth_failures += 1;
    let message = "origin not allowed";
    log::refused(log::Refusal::Upgrade, "upgrade refused", message);
    let err = HttpError {
        status: 403,
        message,
    };
    refuse(sock, &err).await?;
    Ok(false)
}

async fn refuse(sock: &mut Stream, err: &HttpError) -> io::Result<()> {
    sock.write_all(http::error_response(err, false)).await
}
