//! A `GET /sse` request, from its head to a running stream: admitted
//! under the rules of a WebSocket subscriber (the per-address handshake
//! rate, `Origin`, the token and the channels it grants), its channels
//! and positions read (`crate::sse`), the `200` head written, each
//! channel subscribed with its first events queued — `subscribed` (with
//! the replay of a covered resume) or one `gap` — before anything live.

use std::io;
use std::net::IpAddr;
use std::rc::Rc;

use crate::auth::{self, Grants};
use crate::history::{Entry, Position};
use crate::http::{self, HttpError};
use crate::hub::{CloseReason, ConnId, ConnKind, Delivery, Filtering, Filters, Hub};
use crate::log;
use crate::peers::PeerRefusal;
use crate::server::admission;
use crate::server::conn::stream::Stream;
use crate::server::formats;
use crate::server::history::{owner, resume};
use crate::server::redis::RedisLink;
use crate::server::worker::Worker;
use crate::sse::{self, Subscription};

/// Why a request is refused: its answer, and when the client may retry.
struct Refusal {
    err: HttpError,
    retry_after_ms: Option<u64>,
}

impl From<HttpError> for Refusal {
    fn from(err: HttpError) -> Self {
        Refusal {
            err,
            retry_after_ms: None,
        }
    }
}

/// Serves `GET /sse` (`head`: the request head's bytes, for
/// `Last-Event-ID`): the stream's grants once it is open and subscribed
/// (its task is the caller's to start), or `None` after answering the
/// refusal (the connection ends).
pub async fn open(
    w: &Rc<Worker>,
    sock: &mut Stream,
    (id, ip): (ConnId, IpAddr),
    req: &http::Request,
    head: &[u8],
) -> io::Result<Option<Grants>> {
    let (grants, sub, filters) = match admit(w, (id, ip), req, head).await {
        Ok(admitted) => admitted,
        Err(Refused::Answered(resp)) => {
            w.hub.borrow_mut().stats.sse_refused += 1;
            sock.write_all(resp).await?;
            return Ok(None);
        }
        Err(Refused::Http(r)) => {
            w.hub.borrow_mut().stats.sse_refused += 1;
            log::refused(log::Refusal::Upgrade, "event stream refused", r.err.message);
            let resp = match r.retry_after_ms {
                Some(ms) => http::retry_after_response(&r.err, false, ms),
                None => http::error_response(&r.err, false),
            };
            sock.write_all(resp).await?;
            return Ok(None);
        }
    };
    {
        let mut hub = w.hub.borrow_mut();
        hub.upgrade(id, ConnKind::Ws(formats::SSE));
        if let Some(exp) = grants.expires() {
            let at = auth::token_deadline_ms(hub.now_ms(), exp, auth::unix_now_ms());
            hub.set_token_expiry(id, at);
        }
    }
    // `admit` checked the `Origin` against `--allowed-origins`.
    sock.write_all(sse::response_head(req.origin.as_deref()))
        .await?;
    for (channel, filters) in sub.channels.iter().zip(filters) {
        subscribe(w, id, (channel, filters), &sub).await;
    }
    Ok(Some(grants))
}

/// Why a stream is not opened.
enum Refused {
    /// To be answered (and counted, logged) here.
    Http(Refusal),
    /// Answered by the admission (the connect or subscribe hook's
    /// refusal, counted and logged there): the complete response.
    Answered(Vec<u8>),
}

impl From<HttpError> for Refused {
    fn from(err: HttpError) -> Self {
        Refused::Http(err.into())
    }
}

/// The checks of a WebSocket subscriber's upgrade — the per-address
/// rate, the identity (a token, or the connect hook for a request
/// without one) — and the request's channels and positions, each
/// admitted as a subscribe to it is (`admission::http_read`).
async fn admit(
    w: &Worker,
    (id, ip): (ConnId, IpAddr),
    req: &http::Request,
    head: &[u8],
) -> Result<(Grants, Subscription, Vec<Option<Filters>>), Refused> {
    if let Err(PeerRefusal::TooFast(after_ms)) = w.peers.borrow().handshake(ip) {
        w.hub.borrow_mut().stats.per_ip_handshakes_limited += 1;
        return Err(Refused::Http(Refusal {
            err: HttpError {
                status: 429,
                message: "too many handshakes from this address",
            },
            retry_after_ms: Some(after_ms),
        }));
    }
    let grants = match admission::by_connect_hook(w, (id, ip, req), Some(head), false).await {
        Some(admitted) => admitted.map_err(Refused::Answered)?.grants,
        None => w.authorize(req, None).map_err(|(status, message)| {
            w.hub.borrow_mut().stats.auth_failures += 1;
            HttpError { status, message }
        })?,
    };
    // A stream is one connection: its channels are its subscriptions.
    let max = w.cfg.sse.max_channels.min(w.cfg.max_subscriptions);
    let sub = sse::parse_request(req.query.as_deref(), sse::last_event_id(head), max);
    let sub = sub.map_err(|e| HttpError {
        status: 400,
        message: e.message(),
    })?;
    let mut filters = Vec::with_capacity(sub.channels.len());
    for c in &sub.channels {
        let found = admission::http_read(w, (id, &grants), c)
            .await
            .map_err(Refused::Answered)?;
        // The stream's own filter narrows what the server's let through.
        let own = sub
            .filters
            .iter()
            .find(|(d, _)| d == c)
            .map(|(_, f)| f.clone());
        filters.push(admission::narrowed(found, own));
    }
    Ok((grants, sub, filters))
}

/// Subscribes stream `id` to `channel`, queueing its first events: from
/// Redis's history in Redis mode with history, else from the hub's.
async fn subscribe(
    w: &Rc<Worker>,
    id: ConnId,
    (channel, filters): (&str, Option<Filters>),
    sub: &Subscription,
) {
    let since = sub.since(channel).map(|p| (p.epoch.as_str(), p.offset));
    // Reconnecting without a position for this channel: what it missed
    // cannot be known.
    let unknown = sub.reconnect && since.is_none();
    if w.redis.as_deref().is_some_and(RedisLink::keeps_history) {
        let how = (since, Filtering::Replace(filters, false));
        let resumed = resume::resume_from_redis(w, id, channel, how).await;
        let mut hub = w.hub.borrow_mut();
        match resumed {
            Ok(r) => queue_position(
                &mut hub,
                (id, channel),
                (&r.position, r.recovered, &r.replay),
                unknown,
            ),
            // The client reconnects (`EventSource` does) and tries again.
            Err((_, why)) => hub.close(id, 1013, why, CloseReason::Overloaded),
        }
        return;
    }
    // Several workers: this worker's copy of the channel's history
    // first (`history::owner`).
    if let Err(why) = owner::locate(w, channel, true).await {
        w.hub
            .borrow_mut()
            .close(id, 1013, why, CloseReason::Overloaded);
        return;
    }
    let mut hub = w.hub.borrow_mut();
    let new = !hub.is_subscribed(id, channel);
    match hub.subscribe_from(id, channel, since, Filtering::Replace(filters, false)) {
        Ok(Some(r)) => queue_position(
            &mut hub,
            (id, channel),
            (&r.position, r.recovered, &r.replay),
            unknown,
        ),
        Ok(None) => {
            // Without history in Redis mode, it waits for Redis to
            // confirm the channel, as the JSON protocol's reply does.
            let event = sse::position_event("subscribed", channel, None, None);
            hub.ack_when_confirmed(id, channel, event, new);
        }
        // Checked against --max-subscriptions before (`admit`).
        Err(_) => hub.close(id, 1008, "subscription refused", CloseReason::Protocol),
    }
}

/// Queues a channel's first events at `pos`: one `gap` when a resume was
/// not covered (or its position is `unknown`), else `subscribed` and the
/// replay, stopping if the queue refuses.
fn queue_position(
    hub: &mut Hub,
    (id, channel): (ConnId, &str),
    (pos, recovered, replay): (&Position, Option<bool>, &[Entry]),
    unknown: bool,
) {
    let at = Some((&*pos.epoch, pos.offset));
    if recovered == Some(false) || unknown {
        hub.send_to(id, sse::position_event("gap", channel, at, None));
        return;
    }
    if !hub.send_to(
        id,
        sse::position_event("subscribed", channel, at, recovered),
    ) {
        return;
    }
    for e in replay {
        let frame = formats::sse_message(&Delivery {
            channel,
            opcode: e.opcode,
            payload: &e.payload,
            offset: e.offset,
            epoch: &pos.epoch,
            meta: e.meta.as_deref(),
            patch: None,
        });
        if !hub.send_to(id, frame) {
            return;
        }
    }
}
