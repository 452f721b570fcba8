//! Pusher protocol 7 frames: what clients send ([`parse`] into
//! [`ClientMsg`]) and what the server sends (the `encode_*`/`*_frame`
//! functions return JSON text; the edge wraps it in a WebSocket frame).
//!
//! On the wire, server events carry `data` as a JSON-encoded *string*
//! (`"data":"{\"socket_id\":...}"`), except `pusher:error`, whose `data`
//! is an object; pusher-js decodes both.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// The protocol version served (`?protocol=7`).
pub const PROTOCOL: u32 = 7;
/// Longest channel name (Pusher's documented limit).
pub const MAX_CHANNEL_NAME: usize = 164;
/// Longest event name.
pub const MAX_EVENT_NAME: usize = 200;

/// Close and error codes (Pusher's "Error codes" section). 4000–4099:
/// do not reconnect; 4100–4199: reconnect after backing off; 4200–4299:
/// reconnect at once; 4300–4399: other errors.
pub mod code {
    /// The app key is unknown.
    pub const APP_NOT_FOUND: u16 = 4001;
    /// `protocol` missing or not 7.
    pub const UNSUPPORTED_PROTOCOL: u16 = 4007;
    /// The connection is not authorized.
    pub const UNAUTHORIZED: u16 = 4009;
    /// The app is over its connection quota.
    pub const OVER_CAPACITY: u16 = 4100;
    /// Generic "reconnect now" (server shutting down).
    pub const RECONNECT: u16 = 4200;
    /// No pong (or other traffic) in time.
    pub const PONG_NOT_RECEIVED: u16 = 4201;
    /// Closed after inactivity.
    pub const INACTIVE: u16 = 4202;
    /// A client event over the rate limit (error only, not a close).
    pub const CLIENT_EVENT_RATE: u16 = 4301;
}

/// Why a client frame was not understood (answered with `pusher:error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not a JSON object with a string `event`.
    NotAnEvent,
    /// A subscribe/unsubscribe without `data.channel`.
    MissingChannel,
    /// A channel or event name outside Pusher's rules.
    BadName,
}

impl ParseError {
    /// The message sent in `pusher:error`.
    pub fn message(&self) -> &'static str {
        match self {
            ParseError::NotAnEvent => "expected a JSON object with a string `event`",
            ParseError::MissingChannel => "expected data.channel",
            ParseError::BadName => "invalid channel or event name",
        }
    }
}

/// One frame from a client.
#[derive(Debug)]
pub enum ClientMsg {
    /// `pusher:ping`.
    Ping,
    /// `pusher:pong`.
    Pong,
    /// `pusher:subscribe`.
    Subscribe {
        /// Channel name.
        channel: String,
        /// `key:signature` for private and presence channels.
        auth: Option<String>,
        /// Presence: the JSON string the signature covers.
        channel_data: Option<String>,
    },
    /// `pusher:unsubscribe`.
    Unsubscribe {
        /// Channel name.
        channel: String,
    },
    /// A `client-*` event to the other subscribers of `channel`.
    ClientEvent {
        /// Event name (starts with `client-`).
        event: String,
        /// Channel name.
        channel: String,
        /// `data` as sent (raw JSON).
        data: Box<RawValue>,
    },
    /// `pusher:signin` (user authentication).
    Signin {
        /// `key:signature` over `socket_id::user::user_data`.
        auth: String,
        /// The user's JSON (with a string `id`), as signed.
        user_data: String,
    },
    /// Any other event: ignored.
    Other(String),
}

#[derive(Deserialize)]
struct Frame {
    event: String,
    channel: Option<String>,
    data: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct SigninData {
    auth: String,
    user_data: String,
}

/// The prefix of a signed-in user's own channel (`#server-to-user-{id}`),
/// which carries the HTTP API's events to that user.
pub const USER_CHANNEL_PREFIX: &str = "#server-to-user-";

/// End-to-end encrypted channels: private channels whose events the
/// server SDKs encrypt; clients may not send client events on them.
pub const ENCRYPTED_PREFIX: &str = "private-encrypted-";

/// Whether `name` is a valid channel name, or a user's own channel.
pub fn valid_channel_or_user(name: &str) -> bool {
    match name.strip_prefix(USER_CHANNEL_PREFIX) {
        Some(id) => valid_channel(id),
        None => valid_channel(name),
    }
}

#[derive(Deserialize)]
struct SubscribeData {
    channel: String,
    auth: Option<String>,
    channel_data: Option<String>,
}

/// Whether `name` is a valid Pusher channel name: 1–164 of
/// `A-Z a-z 0-9 _ - = @ , . ;`.
pub fn valid_channel(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_CHANNEL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-=@,.;".contains(&b))
}

/// Parses one text frame from a client.
pub fn parse(text: &[u8]) -> Result<ClientMsg, ParseError> {
    let f: Frame = serde_json::from_slice(text).map_err(|_| ParseError::NotAnEvent)?;
    match f.event.as_str() {
        "pusher:ping" => Ok(ClientMsg::Ping),
        "pusher:pong" => Ok(ClientMsg::Pong),
        "pusher:subscribe" | "pusher:unsubscribe" => subscription(&f),
        "pusher:signin" => {
            let data = f.data.as_ref().ok_or(ParseError::NotAnEvent)?;
            let d: SigninData =
                serde_json::from_str(data.get()).map_err(|_| ParseError::NotAnEvent)?;
            Ok(ClientMsg::Signin {
                auth: d.auth,
                user_data: d.user_data,
            })
        }
        e if e.starts_with("client-") => {
            let channel = f.channel.ok_or(ParseError::MissingChannel)?;
            if !valid_channel(&channel) || e.len() > MAX_EVENT_NAME {
                return Err(ParseError::BadName);
            }
            let data = f
                .data
                .unwrap_or_else(|| RawValue::from_string("{}".into()).unwrap());
            Ok(ClientMsg::ClientEvent {
                event: f.event,
                channel,
                data,
            })
        }
        _ => Ok(ClientMsg::Other(f.event)),
    }
}

fn subscription(f: &Frame) -> Result<ClientMsg, ParseError> {
    let data = f.data.as_ref().ok_or(ParseError::MissingChannel)?;
    // pusher-js sends `data` as an object; some clients send it encoded.
    let d: SubscribeData = serde_json::from_str(data.get())
        .or_else(|_| {
            let s: String = serde_json::from_str(data.get())?;
            serde_json::from_str(&s)
        })
        .map_err(|_| ParseError::MissingChannel)?;
    if !valid_channel_or_user(&d.channel) {
        return Err(ParseError::BadName);
    }
    Ok(if f.event == "pusher:subscribe" {
        ClientMsg::Subscribe {
            channel: d.channel,
            auth: d.auth,
            channel_data: d.channel_data,
        }
    } else {
        ClientMsg::Unsubscribe { channel: d.channel }
    })
}

/// The `id` of a signin's `user_data` (a non-empty string of at most 128
/// bytes, as Pusher requires).
pub fn user_id(user_data: &str) -> Option<String> {
    let v: Value = serde_json::from_str(user_data).ok()?;
    let id = v.get("id")?.as_str()?;
    (!id.is_empty() && id.len() <= 128).then(|| id.to_string())
}

/// An event with `data` as a JSON string (the server's usual shape).
pub fn event(event: &str, channel: Option<&str>, data: &str) -> String {
    match channel {
        Some(c) => json!({ "event": event, "channel": c, "data": data }).to_string(),
        None => json!({ "event": event, "data": data }).to_string(),
    }
}

/// A client event relayed to the channel's other subscribers: `data` as
/// the client sent it, plus `user_id` on presence channels.
pub fn client_event(event: &str, channel: &str, data: &RawValue, user_id: Option<&str>) -> String {
    let mut v = json!({ "event": event, "channel": channel, "data": data });
    if let Some(u) = user_id {
        v["user_id"] = Value::from(u);
    }
    v.to_string()
}

/// `pusher:connection_established`.
pub fn connection_established(socket_id: &str, activity_timeout_s: u64) -> String {
    let data = json!({ "socket_id": socket_id, "activity_timeout": activity_timeout_s });
    event("pusher:connection_established", None, &data.to_string())
}

/// `pusher:pong` (and `pusher:ping`, `name` = the event).
pub fn bare(name: &str) -> String {
    event(name, None, "{}")
}

/// `pusher:error`: `code` `None` for errors without one.
pub fn error(code: Option<u16>, message: &str) -> String {
    json!({ "event": "pusher:error", "data": { "code": code, "message": message } }).to_string()
}

/// `pusher:subscription_error` on `channel` (what soketi sends; pusher-js
/// emits it on the channel): `status` 401 for a bad signature.
pub fn subscription_error(channel: &str, status: u16, message: &str) -> String {
    let data = json!({ "type": "AuthError", "error": message, "status": status });
    json!({ "event": "pusher:subscription_error", "channel": channel, "data": data }).to_string()
}

/// `pusher_internal:subscription_succeeded`; `data` is `{}` or, for a
/// presence channel, `{"presence":{...}}`.
pub fn subscription_succeeded(channel: &str, data: &str) -> String {
    event(
        "pusher_internal:subscription_succeeded",
        Some(channel),
        data,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribe_parses_object_and_string_data() {
        let obj = br#"{"event":"pusher:subscribe","data":{"channel":"private-a","auth":"k:s"}}"#;
        let s = br#"{"event":"pusher:subscribe","data":"{\"channel\":\"a\"}"}"#;
        assert!(matches!(
            parse(obj).unwrap(),
            ClientMsg::Subscribe { channel, auth: Some(a), channel_data: None }
                if channel == "private-a" && a == "k:s"
        ));
        assert!(
            matches!(parse(s).unwrap(), ClientMsg::Subscribe { channel, .. } if channel == "a")
        );
    }

    #[test]
    fn bad_frames_are_errors() {
        let err = |t: &[u8]| parse(t).unwrap_err();
        assert_eq!(err(b"nope"), ParseError::NotAnEvent);
        assert_eq!(err(br#"{"data":1}"#), ParseError::NotAnEvent);
        let no_channel = br#"{"event":"pusher:subscribe","data":{}}"#;
        assert_eq!(err(no_channel), ParseError::MissingChannel);
        let bad = br#"{"event":"pusher:subscribe","data":{"channel":"a b"}}"#;
        assert_eq!(err(bad), ParseError::BadName);
        let long = format!(
            r#"{{"event":"pusher:unsubscribe","data":{{"channel":"{}"}}}}"#,
            "x".repeat(165)
        );
        assert_eq!(err(long.as_bytes()), ParseError::BadName);
    }

    #[test]
    fn client_events_keep_their_data_and_gain_user_id() {
        let m = parse(br#"{"event":"client-x","channel":"private-c","data":{"a":1}}"#).unwrap();
        let ClientMsg::ClientEvent {
            event,
            channel,
            data,
        } = m
        else {
            panic!("{m:?}")
        };
        let out: Value =
            serde_json::from_str(&client_event(&event, &channel, &data, Some("u"))).unwrap();
        assert_eq!(
            out,
            json!({"event":"client-x","channel":"private-c","data":{"a":1},"user_id":"u"})
        );
    }

    #[test]
    fn signin_parses_and_user_ids_are_checked() {
        let m = parse(
            br#"{"event":"pusher:signin","data":{"auth":"k:s","user_data":"{\"id\":\"7\"}"}}"#,
        )
        .unwrap();
        let ClientMsg::Signin { auth, user_data } = m else {
            panic!("{m:?}")
        };
        assert_eq!(
            (auth.as_str(), user_id(&user_data).as_deref()),
            ("k:s", Some("7"))
        );
        assert_eq!(user_id(r#"{"id":7}"#), None);
        assert_eq!(user_id(r#"{"id":""}"#), None);
        assert!(valid_channel_or_user("#server-to-user-7"));
        assert!(!valid_channel_or_user("#other"));
    }

    #[test]
    fn server_events_carry_data_as_a_string() {
        let v: Value = serde_json::from_str(&connection_established("1.2", 120)).unwrap();
        assert_eq!(v["event"], "pusher:connection_established");
        let d: Value = serde_json::from_str(v["data"].as_str().unwrap()).unwrap();
        assert_eq!(d, json!({"socket_id":"1.2","activity_timeout":120}));
        let e: Value = serde_json::from_str(&error(Some(4301), "slow down")).unwrap();
        assert_eq!(e["data"]["code"], 4301);
    }
}
