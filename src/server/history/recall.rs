//! History at the edge: a JSON subscribe's reply and replay, and
//! `GET /history/{channel}`.

use base64::Engine as _;
use serde_json::value::RawValue;

use crate::control::{self, At, ErrorCode};
use crate::history::Entry;
use crate::http::{self, HttpError};
use crate::hub::{ConnId, Filtering, Filters, Hub, Resumed, SubscribeError};
use crate::meta::Meta;
use crate::ws::OpCode;

/// Messages `GET /history` returns when the request names no `limit`.
pub const HISTORY_DEFAULT_LIMIT: usize = 100;
/// Most messages one `GET /history` returns, whatever `limit` asks.
pub const HISTORY_MAX_LIMIT: usize = 1000;

/// `{"op":"subscribe"}`: subscribes, and queues the reply, then (when the
/// subscribe resumed) the messages the client missed — before anything
/// published later, which the hub queues after them.
pub fn subscribe(
    hub: &mut Hub,
    id: ConnId,
    channel: &str,
    (since, filtering): (Option<&control::Since>, Filtering),
    idv: Option<&RawValue>,
) {
    let since = since.map(|s| (s.epoch.as_str(), s.offset));
    let new = !hub.is_subscribed(id, channel);
    let reply = match hub.subscribe_from(id, channel, since, filtering) {
        Ok(None) => {
            // Without history in Redis mode, "subscribed" waits for Redis
            // to confirm the channel (a publish right after it must not
            // reach Redis first). History in Redis mode answers after a
            // read from Redis instead (`resume`); embedded, it is at once.
            let ack = control::subscribed_live(channel, hub.delta_of(id, channel), idv);
            return hub.ack_when_confirmed(id, channel, ack, new);
        }
        Ok(Some(r)) => return send_resumed(hub, id, channel, r, idv),
        Err(SubscribeError::InvalidChannel) => {
            control::error(ErrorCode::InvalidChannel, "invalid channel name", idv)
        }
        Err(SubscribeError::TooManySubscriptions) => control::error(
            ErrorCode::TooManySubscriptions,
            "subscription limit reached",
            idv,
        ),
        Err(SubscribeError::Backlogged) => control::error(
            ErrorCode::Unavailable,
            "the other workers are behind; retry",
            idv,
        ),
    };
    hub.send_to(id, reply);
}

fn send_resumed(hub: &mut Hub, id: ConnId, channel: &str, r: Resumed, idv: Option<&RawValue>) {
    let at = At {
        epoch: &r.position.epoch,
        offset: r.position.offset,
    };
    send_position(hub, (id, channel), at, (r.recovered, &r.replay), idv);
}

/// `recover-on-subscribe` without `since`: the position just before
/// `channel`'s latest message, if it has one here.
pub fn before_latest(hub: &Hub, channel: &str) -> Option<control::Since> {
    let (at, _) = hub.history(channel, u64::MAX, 0)?;
    (at.offset > 0).then(|| control::Since {
        epoch: at.epoch.to_string(),
        offset: at.offset - 1,
    })
}

/// Queues the `subscribed` reply with the channel's position, then the
/// replay (embedded or read from Redis), stopping if the queue refuses.
pub fn send_position(
    hub: &mut Hub,
    (id, channel): (ConnId, &str),
    at: At<'_>,
    (recovered, replay): (Option<bool>, &[Entry]),
    idv: Option<&RawValue>,
) {
    let filtered = hub.filters_of(id, channel).is_some();
    let delta = hub.delta_of(id, channel);
    let reply = control::subscribed(channel, at, (recovered, filtered, delta), idv);
    hub.send_to(id, reply);
    for e in replay {
        let head = e.meta.as_deref().map(Meta::head).filter(|h| !h.is_empty());
        let frame = control::encode_delivery(channel, e.opcode, &e.payload, (e.offset, head));
        if !hub.send_to(id, frame) {
            return;
        }
    }
}

/// `GET /history/{channel}?since=N&limit=L` (auth checked by the caller):
/// `{"epoch":E,"offset":TOP,"messages":[{"offset":N+1,"data":...},...]}`,
/// at most `limit` messages (default [`HISTORY_DEFAULT_LIMIT`], at most
/// [`HISTORY_MAX_LIMIT`]); a channel without history answers
/// `"epoch":null,"offset":0`.
pub fn history_http(
    hub: &Hub,
    (channel, filters): (&str, Option<&Filters>),
    query: Option<&str>,
    keep_alive: bool,
) -> Vec<u8> {
    if !hub.history_enabled(channel) {
        return error(404, "history is off (--history-size)", keep_alive);
    }
    let (since, limit) = match parse_query(query) {
        Ok(q) => q,
        Err(message) => return error(400, message, keep_alive),
    };
    match hub.history(channel, since, limit) {
        Some((pos, entries)) => history_json(
            (channel, filters),
            Some((&pos.epoch, pos.offset)),
            &entries,
            keep_alive,
        ),
        None => history_json((channel, None), None, &[], keep_alive),
    }
}

/// An HTTP error answer.
pub fn error(status: u16, message: &'static str, keep_alive: bool) -> Vec<u8> {
    http::error_response(&HttpError { status, message }, keep_alive)
}

/// The `GET /history` answer for a position (`None`: no history) and
/// the messages after the one asked for — those that pass `filters`, the
/// server's tag filters for the reader (its token's, its subscribe
/// hook's), when there are any.
pub fn history_json(
    (channel, filters): (&str, Option<&Filters>),
    at: Option<(&str, u64)>,
    entries: &[Entry],
    keep_alive: bool,
) -> Vec<u8> {
    let (epoch, offset) = match at {
        Some((e, o)) => (serde_json::Value::from(e), o),
        None => (serde_json::Value::Null, 0),
    };
    let body = serde_json::json!({
        "channel": channel,
        "epoch": epoch,
        "offset": offset,
        "messages": entries
            .iter()
            .filter(|e| filters.is_none_or(|f| crate::filter::all_match(f, e.tags())))
            .map(entry_json)
            .collect::<Vec<_>>(),
    })
    .to_string();
    http::response(
        200,
        "application/json",
        body.as_bytes(),
        keep_alive,
        &[],
        false,
    )
}

fn entry_json(e: &Entry) -> serde_json::Value {
    let mut v = if e.opcode == OpCode::Text {
        let text = String::from_utf8_lossy(&e.payload);
        serde_json::json!({"offset": e.offset, "data": text})
    } else {
        let b64 = base64::engine::general_purpose::STANDARD.encode(&e.payload);
        serde_json::json!({"offset": e.offset, "data_base64": b64})
    };
    if let Some(t) = e.tags() {
        v["tags"] = t.to_json();
    }
    if let Some(i) = e.meta.as_deref().and_then(Meta::id) {
        v["idempotency_key"] = i.into();
    }
    v
}

/// `since` (default 0) and `limit` (default and cap above).
pub fn parse_query(query: Option<&str>) -> Result<(u64, usize), &'static str> {
    let param = |name| query.and_then(|q| crate::auth::query_param(q, name));
    let since = match param("since") {
        Some(v) => v
            .parse()
            .map_err(|_| "since must be an offset (a whole number)")?,
        None => 0,
    };
    let limit = match param("limit") {
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| "limit must be a whole number")?,
        None => HISTORY_DEFAULT_LIMIT,
    };
    Ok((since, limit.min(HISTORY_MAX_LIMIT)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_has_defaults_and_a_cap() {
        assert_eq!(parse_query(None), Ok((0, HISTORY_DEFAULT_LIMIT)));
        assert_eq!(parse_query(Some("since=5&limit=7")), Ok((5, 7)));
        assert_eq!(
            parse_query(Some("limit=999999")),
            Ok((0, HISTORY_MAX_LIMIT))
        );
        assert!(parse_query(Some("since=-1")).is_err());
        assert!(parse_query(Some("limit=x")).is_err());
    }
}
