//! The JSON control protocol spoken on `GET /ws` (sans-I/O).
//!
//! Client → server, one JSON object per text frame:
//! ```json
//! {"op":"subscribe","channel":"news","id":1}
//! {"op":"subscribe","channel":"news","since":{"epoch":"E","offset":41}}
//! {"op":"unsubscribe","channel":"news","id":2}
//! {"op":"publish","channel":"news","data":"hello","id":3}
//! {"op":"publish","channel":"news","data_base64":"AAEC"}
//! {"op":"subscribe","channel":"room-1","presence":true,"id":5}
//! {"op":"subscribe","channel":"px","filter":{"key":"sym","cmp":"eq","val":"BTC"}}
//! {"op":"publish","channel":"px","data":"…","tags":{"sym":"BTC"},"key":"BTC"}
//! {"op":"presence","channel":"room-1","id":6}
//! {"op":"rpc","method":"sum","data":{"a":1,"b":2},"id":7}
//! {"op":"connect","id":8}
//! ```
//! Server → client:
//! ```json
//! {"type":"subscribed","channel":"news","id":1}
//! {"type":"subscribed","channel":"news","recovered":true,"epoch":"E","offset":45}
//! {"type":"message","channel":"news","offset":42,"data":"hello"}
//! {"type":"gap","channel":"news","epoch":"E","offset":60}
//! {"type":"unsubscribed","channel":"news","id":2}
//! {"type":"published","channel":"news","subscribers":12,"id":3}
//! {"type":"message","channel":"news","data":"hello"}
//! {"type":"message","channel":"news","data_base64":"AAEC"}
//! {"type":"message","channel":"px","data":"…","tags":{"sym":"BTC"}}
//! {"type":"error","code":"invalid_channel","message":"…","id":4}
//! {"type":"join","channel":"room-1","user":"ana","info":{"name":"Ana"}}
//! {"type":"leave","channel":"room-1","user":"ana"}
//! {"type":"presence","channel":"room-1","members":[{"user":"ana","connections":1}],"count":1,"id":6}
//! {"type":"rpc","id":7,"data":{"sum":3}}
//! {"type":"connected","client":"482913.7","user":"42","id":8}
//! ```
//! `connect` is Centrifugo's first command and reply: the connection's
//! id (the server API's and the hooks' `client`) and its user (absent
//! when anonymous), asked whenever the client wants them; a client the
//! connect hook admitted is sent a `connected` frame unasked, first,
//! with the backend's `data`.
//! `rpc` is answered by `--proxy-rpc` (`crate::hooks`), as are the
//! hooks' other frames (`connected`, `refused` errors).
//! Presence (`--presence-channels`) is described in `crate::presence`.
//! With `--history-size`, every delivery carries its `offset`, and a
//! subscribe answers with the channel's `epoch` and latest `offset`; one
//! with `since` also says whether it was `recovered` and, if so, is
//! followed by exactly the messages after `since`, then live ones.
//! `id` is optional and echoed verbatim (any JSON scalar). Subscribe and
//! unsubscribe are always acknowledged; publish only when it carries an
//! `id`, so a high-rate publisher is not sent one ack per message.

use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use std::sync::Arc;

use crate::channel::valid_channel_name;
use crate::filter::{Filter, Tags};
use crate::meta::Meta;
use crate::ws::frame::{encode_server_frame, encode_server_frame_parts, OpCode};

/// A parsed client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Start receiving a channel (resuming after `since` when given).
    Subscribe {
        /// Channel name.
        channel: String,
        /// The last position the client has seen, to get what it missed.
        since: Option<Since>,
        /// `"presence":true`: also receive the channel's join/leave events.
        presence: bool,
        /// Only publications whose tags pass this (`crate::filter`).
        filter: Option<Filter>,
        /// The subscribe hook's filter, applied first and whatever
        /// `filter` says (never read from the wire).
        server_filter: Option<Filter>,
        /// `"delta":"fossil"`: publications that ask for it may come as
        /// Fossil deltas of the previous one (`crate::delta`).
        delta: bool,
    },
    /// The members of a presence channel (`{"op":"presence"}`).
    Presence {
        /// Channel name.
        channel: String,
    },
    /// Stop receiving a channel.
    Unsubscribe {
        /// Channel name.
        channel: String,
    },
    /// Publish a message.
    Publish {
        /// Channel name.
        channel: String,
        /// Text or binary frame.
        opcode: OpCode,
        /// Message bytes (decoded from `data` or `data_base64`).
        payload: Vec<u8>,
        /// Its tags and latest-value key, if it has any.
        meta: Option<Arc<Meta>>,
    },
    /// Replace the connection token before it expires (same grants, later
    /// `exp`).
    Refresh {
        /// The new token.
        token: String,
    },
    /// A call answered by the rpc hook (`--proxy-rpc`):
    /// `{"op":"connect"}`: who the connection is (its client id and user).
    Connect,
    /// `{"op":"rpc","method":"sum","data":{...},"id":7}`.
    Rpc {
        /// The method's name.
        method: String,
        /// `data` as sent (raw JSON text), if any.
        data: Option<String>,
    },
}

/// A position in a channel's history, as a client remembers it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Since {
    /// The channel's epoch when the client saw `offset`.
    pub epoch: String,
    /// The last offset the client received.
    pub offset: u64,
}

/// A request with its optional correlation id (raw JSON, echoed as is).
#[derive(Debug)]
pub struct Envelope {
    /// The request.
    pub request: Request,
    /// The `id` member, if any, as raw JSON.
    pub id: Option<Box<RawValue>>,
}

/// Machine-readable error codes sent in `{"type":"error"}` replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Not JSON, not an object, unknown op, missing or mistyped member.
    BadRequest,
    /// Channel name fails validation.
    InvalidChannel,
    /// `max_subscriptions` reached.
    TooManySubscriptions,
    /// Unsubscribe from a channel not subscribed.
    NotSubscribed,
    /// A binary frame on the control connection.
    BinaryNotSupported,
    /// Redis is unreachable and the publish buffer is full: not published.
    Unavailable,
    /// The connection token does not grant the channel.
    Forbidden,
    /// A refresh token that is invalid, or grants something else.
    InvalidToken,
    /// Presence asked of a channel `--presence-channels` does not cover.
    PresenceOff,
    /// The presence channel has `--presence-max-members` users.
    PresenceFull,
    /// Over a per-connection rate (`--presence-read-rate`).
    RateLimited,
    /// The channel's namespace is not configured (namespaces are).
    UnknownChannel,
    /// Larger than the namespace's `max-message-size`.
    MessageTooLarge,
    /// A subscribe's `filter` is malformed or over its bounds.
    InvalidFilter,
    /// A publish's `tags` are malformed or over their bounds.
    InvalidTags,
    /// A subscribe's `delta` is not `"fossil"`, or a publish's not a
    /// boolean.
    InvalidDelta,
    /// Deltas asked on a channel whose namespace does not allow them
    /// (`delta = "fossil"`).
    DeltaNotAllowed,
}

impl ErrorCode {
    /// The code's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::InvalidChannel => "invalid_channel",
            ErrorCode::TooManySubscriptions => "too_many_subscriptions",
            ErrorCode::NotSubscribed => "not_subscribed",
            ErrorCode::BinaryNotSupported => "binary_not_supported",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::InvalidToken => "invalid_token",
            ErrorCode::PresenceOff => "presence_off",
            ErrorCode::PresenceFull => "presence_full",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::UnknownChannel => "unknown_channel",
            ErrorCode::MessageTooLarge => "message_too_large",
            ErrorCode::InvalidFilter => "invalid_filter",
            ErrorCode::InvalidTags => "invalid_tags",
            ErrorCode::InvalidDelta => "invalid_delta",
            ErrorCode::DeltaNotAllowed => "delta_not_allowed",
        }
    }
}

/// A request that could not be understood: the code, a human message, and
/// the `id` when it could still be read.
#[derive(Debug)]
pub struct ControlError {
    /// What went wrong.
    pub code: ErrorCode,
    /// Human-readable detail.
    pub message: String,
    /// The request's id, if it parsed that far.
    pub id: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct Wire<'a> {
    op: Option<&'a str>,
    channel: Option<String>,
    /// Raw: a publish's is a string, an rpc's any JSON.
    data: Option<&'a RawValue>,
    data_base64: Option<&'a str>,
    method: Option<String>,
    token: Option<String>,
    since: Option<Since>,
    presence: Option<bool>,
    #[serde(borrow)]
    filter: Option<&'a RawValue>,
    #[serde(borrow)]
    tags: Option<&'a RawValue>,
    key: Option<&'a RawValue>,
    /// A subscribe's `"fossil"`, a publish's `true`.
    delta: Option<&'a RawValue>,
    id: Option<Box<RawValue>>,
}

/// The requests that name no channel (`connect`, `refresh`, `rpc`), or
/// `None` for the others; a missing field is the error's message.
fn without_channel(wire: &mut Wire<'_>) -> Option<Result<Request, &'static str>> {
    let request = match wire.op? {
        "connect" => Ok(Request::Connect),
        "refresh" => match wire.token.take() {
            Some(token) => Ok(Request::Refresh { token }),
            None => Err("missing \"token\""),
        },
        "rpc" => match wire.method.take() {
            Some(method) => Ok(Request::Rpc {
                method,
                data: wire.data.map(|d| d.get().to_string()),
            }),
            None => Err("missing \"method\""),
        },
        _ => return None,
    };
    Some(request)
}

/// Parses one control frame's text.
pub fn parse(text: &[u8]) -> Result<Envelope, ControlError> {
    let mut wire: Wire<'_> = serde_json::from_slice(text).map_err(|e| ControlError {
        code: ErrorCode::BadRequest,
        message: format!("invalid JSON request: {e}"),
        id: None,
    })?;
    let id = wire.id.take();
    let fail = |code, message: &str, id| ControlError {
        code,
        message: message.to_string(),
        id,
    };
    if let Some(r) = without_channel(&mut wire) {
        return match r {
            Ok(request) => Ok(Envelope { request, id }),
            Err(message) => Err(fail(ErrorCode::BadRequest, message, id)),
        };
    }
    let Some(channel) = wire.channel else {
        return Err(fail(ErrorCode::BadRequest, "missing \"channel\"", id));
    };
    // One check for every op: the names the edge keeps for itself
    // (`pusher/{app}/…`, `presence/…`, Redis's `!…`) are outside the
    // charset, so no native request can read or join them.
    if !valid_channel_name(&channel) {
        return Err(fail(ErrorCode::InvalidChannel, "invalid channel name", id));
    }
    let request = match wire.op {
        Some("subscribe") => {
            let filter = match wire.filter.map(|f| Filter::parse(f.get().as_bytes())) {
                None => None,
                Some(Ok(f)) => Some(f),
                Some(Err(e)) => return Err(fail(ErrorCode::InvalidFilter, &e.to_string(), id)),
            };
            let delta = match wire.delta.map(|d| d.get()) {
                None | Some("null") => false,
                Some("\"fossil\"") => true,
                Some(_) => {
                    let why = "delta must be \"fossil\" (the only delta format)";
                    return Err(fail(ErrorCode::InvalidDelta, why, id));
                }
            };
            Request::Subscribe {
                channel,
                since: wire.since,
                presence: wire.presence.unwrap_or(false),
                filter,
                server_filter: None,
                delta,
            }
        }
        Some("presence") => Request::Presence { channel },
        Some("unsubscribe") => Request::Unsubscribe { channel },
        Some("publish") => {
            let meta = match publish_meta(wire.tags, wire.key, wire.delta) {
                Ok(meta) => meta,
                Err((code, why)) => return Err(fail(code, &why, id)),
            };
            match publish_payload(wire.data, wire.data_base64) {
                Ok((opcode, payload)) => Request::Publish {
                    channel,
                    opcode,
                    payload,
                    meta,
                },
                Err(message) => return Err(fail(ErrorCode::BadRequest, message, id)),
            }
        }
        Some(_) => return Err(fail(ErrorCode::BadRequest, "unknown op", id)),
        None => return Err(fail(ErrorCode::BadRequest, "missing \"op\"", id)),
    };
    Ok(Envelope { request, id })
}

/// A publish's tags (`invalid_tags` when malformed), latest-value `key`
/// (a string of 1 to 128 bytes, else `bad_request`) and `delta` (a
/// boolean, else `invalid_delta`).
fn publish_meta(
    tags: Option<&RawValue>,
    key: Option<&RawValue>,
    delta: Option<&RawValue>,
) -> Result<Option<Arc<Meta>>, (ErrorCode, String)> {
    let delta = match delta.map(|d| d.get()) {
        None | Some("false") | Some("null") => false,
        Some("true") => true,
        Some(_) => {
            let why = "a publish's \"delta\" must be true or false".into();
            return Err((ErrorCode::InvalidDelta, why));
        }
    };
    let tags = match tags.map(|t| Tags::parse(t.get().as_bytes())) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => return Err((ErrorCode::InvalidTags, e.to_string())),
    };
    let bad_key = || {
        (
            ErrorCode::BadRequest,
            "\"key\" must be a string of 1 to 128 bytes".into(),
        )
    };
    let key = match key.map(|k| serde_json::from_str::<String>(k.get())) {
        None => None,
        Some(Ok(k)) => Some(k),
        Some(Err(_)) => return Err(bad_key()),
    };
    let meta = Meta::new(tags, key, delta).map_err(|_| bad_key())?;
    Ok(meta.map(Arc::new))
}

/// A publish's frame type and bytes, from `data` (a string: text) or
/// `data_base64` (binary): exactly one.
fn publish_payload(
    data: Option<&RawValue>,
    data_base64: Option<&str>,
) -> Result<(OpCode, Vec<u8>), &'static str> {
    match (data, data_base64) {
        (Some(d), None) => match serde_json::from_str::<String>(d.get()) {
            Ok(d) => Ok((OpCode::Text, d.into_bytes())),
            Err(_) => Err("\"data\" must be a string"),
        },
        (None, Some(b)) => match base64::engine::general_purpose::STANDARD.decode(b) {
            Ok(payload) => Ok((OpCode::Binary, payload)),
            Err(_) => Err("invalid data_base64"),
        },
        _ => Err("publish needs exactly one of \"data\" (string) or \"data_base64\""),
    }
}

#[derive(Serialize)]
struct Reply<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subscribers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exp: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recovered: Option<bool>,
    /// The subscription has tag filters: its offsets jump over what they
    /// leave out (a client must not read those jumps as gaps).
    #[serde(skip_serializing_if = "Option::is_none")]
    filtered: Option<bool>,
    /// Deltas were granted: messages may carry `"delta":true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    delta: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    epoch: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RawValue>,
}

impl<'a> Reply<'a> {
    fn new(kind: &'a str, id: Option<&'a RawValue>) -> Self {
        Reply {
            kind,
            channel: None,
            subscribers: None,
            code: None,
            message: None,
            exp: None,
            recovered: None,
            filtered: None,
            delta: None,
            epoch: None,
            offset: None,
            id,
        }
    }
}

fn reply_frame(r: &Reply<'_>) -> Bytes {
    let json = serde_json::to_vec(r).expect("replies always serialize");
    encode_server_frame(OpCode::Text, &json)
}

/// `{"type":"subscribed"|"unsubscribed"|"published", ...}` as a text frame.
pub fn ack(kind: &str, channel: &str, subscribers: Option<usize>, id: Option<&RawValue>) -> Bytes {
    reply_frame(&Reply {
        channel: Some(channel),
        subscribers,
        ..Reply::new(kind, id)
    })
}

/// `{"type":"subscribed","channel":c}` on a channel without history,
/// with `"delta":true` when deltas were granted.
pub fn subscribed_live(channel: &str, delta: bool, id: Option<&RawValue>) -> Bytes {
    reply_frame(&Reply {
        channel: Some(channel),
        delta: delta.then_some(true),
        ..Reply::new("subscribed", id)
    })
}

/// A channel's position in its history, for replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At<'a> {
    /// The channel's epoch.
    pub epoch: &'a str,
    /// Its latest offset.
    pub offset: u64,
}

/// `{"type":"subscribed","channel":c,"epoch":E,"offset":N}` on a channel
/// with history, with `"recovered"` when the subscribe asked to resume.
pub fn subscribed(
    channel: &str,
    at: At<'_>,
    (recovered, filtered, delta): (Option<bool>, bool, bool),
    id: Option<&RawValue>,
) -> Bytes {
    reply_frame(&Reply {
        channel: Some(channel),
        recovered,
        filtered: filtered.then_some(true),
        delta: delta.then_some(true),
        epoch: Some(at.epoch),
        offset: Some(at.offset),
        ..Reply::new("subscribed", id)
    })
}

/// `{"type":"gap","channel":c,"epoch":E,"offset":N}`: messages up to
/// `offset` could not be delivered (and no longer can be); the client
/// reloads its state and goes on from this position.
pub fn gap(channel: &str, at: At<'_>) -> Bytes {
    reply_frame(&Reply {
        channel: Some(channel),
        epoch: Some(at.epoch),
        offset: Some(at.offset),
        ..Reply::new("gap", None)
    })
}

/// `{"type":"refreshed","exp":N}`: the connection now lives until `exp`.
pub fn refreshed(exp: u64, id: Option<&RawValue>) -> Bytes {
    reply_frame(&Reply {
        exp: Some(exp),
        ..Reply::new("refreshed", id)
    })
}

/// `{"type":"error", ...}` as a text frame.
pub fn error(code: ErrorCode, message: &str, id: Option<&RawValue>) -> Bytes {
    reply_frame(&Reply {
        code: Some(code.as_str()),
        message: Some(message),
        ..Reply::new("error", id)
    })
}

/// The envelope a multi-channel subscriber receives for one published
/// message: the encoder of `server::formats::JSON`, which the hub calls
/// once per publish (not per subscriber). `offset` is the message's place
/// in the channel's history (0: none, and no `"offset"` member).
pub fn encode_delivery(
    channel: &str,
    opcode: OpCode,
    payload: &[u8],
    at: (u64, Option<&str>),
) -> Bytes {
    let (head, body) = delivery_parts(channel, opcode, payload, at);
    encode_server_frame_parts(OpCode::Text, &[head.as_bytes(), body.as_bytes()])
}

/// The envelope of [`encode_delivery`] as two pieces of one text message
/// (written back to back), for encoders that frame it themselves (the
/// compressed format).
pub fn delivery_parts(
    channel: &str,
    opcode: OpCode,
    payload: &[u8],
    (offset, fields): (u64, Option<&str>),
) -> (String, String) {
    // Channel names are restricted to characters that need no JSON
    // escaping (`crate::channel`; internal names such as `!status` too).
    let mut head = if offset == 0 {
        format!("{{\"type\":\"message\",\"channel\":\"{channel}\",")
    } else {
        format!("{{\"type\":\"message\",\"channel\":\"{channel}\",\"offset\":{offset},")
    };
    // The meta's fields are JSON already, each with its comma
    // (`Meta::head`: the idempotency key, the tags).
    if let Some(f) = fields {
        head.push_str(f);
    }
    let body = if opcode == OpCode::Text {
        let text = String::from_utf8_lossy(payload);
        let quoted = serde_json::to_string(&text).expect("strings serialize");
        format!("\"data\":{quoted}}}")
    } else {
        let b64 = base64::engine::general_purpose::STANDARD.encode(payload);
        format!("\"data_base64\":\"{b64}\"}}")
    };
    (head, body)
}

/// [`delivery_parts`] of a message sent as a Fossil delta (`patch`, the
/// delta's text) of the subscriber's previous message on `channel`:
/// `"data"` holds the delta, and `"delta":true` says so.
pub fn delta_parts(channel: &str, patch: &str, at: (u64, Option<&str>)) -> (String, String) {
    let (head, mut body) = delivery_parts(channel, OpCode::Text, patch.as_bytes(), at);
    body.pop();
    body.push_str(",\"delta\":true}");
    (head, body)
}

#[cfg(test)]
mod tests;
