//! The WebSocket upgrade: which routes upgrade, who may (auth: `Origin`,
//! tokens), and the `101 Switching Protocols` answer.

use std::io;
use std::net::IpAddr;

use monoio::io::AsyncWriteRentExt;

use crate::auth::{self, Grants};
use crate::http::{self, HttpError, Route};
use crate::hub::{ConnId, ConnKind};
use crate::log;
use crate::peers::PeerRefusal;
use crate::server::endpoints::STATUS_CHANNEL;
use crate::server::formats;
use crate::server::sock::Sock;
use crate::server::worker::Worker;

/// An accepted upgrade.
pub struct Upgrade {
    /// The mode, its wire format compressed if permessage-deflate was
    /// agreed.
    pub kind: ConnKind,
    /// The channel of `/ws/{channel}`.
    pub channel: Option<String>,
    /// What the connection's token allows.
    pub grants: Grants,
    /// permessage-deflate was agreed: client messages may be compressed.
    pub deflate: bool,
}

/// The mode and channel of an upgrading route; `None` for other routes.
pub fn upgrade_target(route: &Route<'_>) -> Option<(ConnKind, Option<String>)> {
    match route {
        Route::WsChannel(c) => Some((ConnKind::Ws(formats::PATH), Some(c.to_string()))),
        Route::WsMulti => Some((ConnKind::Ws(formats::JSON), None)),
        Route::StatusWs => Some((
            ConnKind::Ws(formats::PATH),
            Some(STATUS_CHANNEL.to_string()),
        )),
        _ => None,
    }
}

/// Decides an upgrade request: writes the `101` and returns the upgrade,
/// or answers with the refusal and returns `None` (the connection ends).
pub async fn upgrade(
    w: &Worker,
    sock: &mut Sock,
    (id, ip): (ConnId, IpAddr),
    req: &http::Request,
    (kind, channel): (ConnKind, Option<String>),
) -> io::Result<Option<Upgrade>> {
    let verdict = w.peers.borrow_mut().handshake(ip, w.now_ms());
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
        let (res, _) = sock.wr.write_all(resp).await;
        res?;
        return Ok(None);
    }
    let status_feed = channel.as_deref() == Some(STATUS_CHANNEL);
    let checked = if status_feed {
        None
    } else {
        channel.as_deref()
    };
    let grants = match auth::authorize_upgrade(&w.cfg.auth, req, checked) {
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
            log::refused(log::Refusal::Upgrade, "upgrade refused", message);
            refuse(sock, &HttpError { status, message }).await?;
            return Ok(None);
        }
    };
    match &req.upgrade {
        Ok(accept) => {
            let agreed = req.deflate.filter(|_| w.cfg.compression.enabled);
            let extension = agreed.map(|a| a.response_value());
            let head = crate::ws::handshake::response_101_with(accept, extension.as_deref());
            let (res, _) = sock.wr.write_all(head).await;
            res?;
            let kind = match kind {
                ConnKind::Ws(base) => ConnKind::Ws(formats::negotiated(base, agreed)),
                other => other,
            };
            Ok(Some(Upgrade {
                kind,
                channel,
                grants,
                deflate: agreed.is_some(),
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

async fn refuse(sock: &mut Sock, err: &HttpError) -> io::Result<()> {
    let (res, _) = sock.wr.write_all(http::error_response(err, false)).await;
    res.map(|_| ())
}
