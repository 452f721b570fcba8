//! Hook answers: `{"result":{...}}`, `{"error":{"code":N,"message":"..."}}`
//! (the client is refused, the connection stays) or
//! `{"disconnect":{"code":N,"reason":"..."}}` (the connection ends with
//! that close code) — parsed and checked, one typed result per hook.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::channel::valid_channel_name;

/// Longest `user` a connect hook may give (bytes).
pub const MAX_USER: usize = 256;
/// Longest `info` (a JSON object, bytes), as a token's `info` claim.
pub const MAX_INFO: usize = crate::auth::MAX_INFO;
/// Longest close reason a WebSocket close frame can carry (RFC 6455 5.5:
/// 125 bytes of payload, 2 of them the code).
pub const MAX_REASON: usize = 123;

/// What the backend decided.
#[derive(Debug)]
pub enum Answer<T> {
    /// Go ahead, with the hook's result.
    Result(T),
    /// Refused: the client gets the code and message; the connection stays.
    Error {
        /// The backend's code (401 refuses an upgrade with 401, any other
        /// with 403).
        code: u32,
        /// The backend's message.
        message: String,
    },
    /// The connection is closed with this code (3000–4999) and reason.
    Disconnect {
        /// The close code.
        code: u16,
        /// The close reason (at most [`MAX_REASON`] bytes).
        reason: String,
    },
}

/// Why an answer could not be used (the call failed: fail closed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    /// Not JSON, or not of the proxy's shape.
    Malformed(String),
    /// None of `result`, `error` or `disconnect`.
    NoOutcome,
    /// A `disconnect` code outside 3000–4999 (an application may not
    /// send the others).
    BadCloseCode(u32),
    /// A connect result that breaks a bound: its `user`, `info` or
    /// `channels`.
    BadResult(&'static str),
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplyError::Malformed(e) => write!(f, "malformed answer: {e}"),
            ReplyError::NoOutcome => f.write_str("answer has no result, error or disconnect"),
            ReplyError::BadCloseCode(c) => write!(f, "disconnect code {c} is not in 3000-4999"),
            ReplyError::BadResult(why) => write!(f, "bad result: {why}"),
        }
    }
}

#[derive(Deserialize)]
struct Wire<T> {
    result: Option<T>,
    error: Option<ErrorWire>,
    disconnect: Option<DisconnectWire>,
}

#[derive(Deserialize)]
struct ErrorWire {
    code: u32,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct DisconnectWire {
    code: u32,
    #[serde(default)]
    reason: String,
}

/// The connect hook's result.
#[derive(Debug, Default, Deserialize)]
pub struct ConnectResult {
    /// Who the connection is (`""`: anonymous).
    #[serde(default)]
    pub user: String,
    /// Unix seconds when the connection expires (0: never).
    #[serde(default)]
    pub expire_at: u64,
    /// Public info (a JSON object), shown by presence.
    pub info: Option<Box<RawValue>>,
    /// Channels subscribed at once, server-side.
    #[serde(default)]
    pub channels: Vec<String>,
    /// Sent to a JSON client in its `connected` frame.
    pub data: Option<Box<RawValue>>,
}

/// The subscribe hook's result (its members are accepted; corecast keeps
/// no per-subscription info or expiry yet).
#[derive(Debug, Default, Deserialize)]
pub struct SubscribeResult {
    /// Public info for this subscription (unused).
    pub info: Option<Box<RawValue>>,
    /// Data for the subscriber (unused).
    pub data: Option<Box<RawValue>>,
    /// Subscription expiry (unused).
    #[serde(default)]
    pub expire_at: u64,
    /// A tag filter the server applies to this subscription, before and
    /// whatever the client's own (`crate::filter`); checked by the edge.
    pub filter: Option<serde_json::Value>,
}

/// The publish hook's result.
#[derive(Debug, Default, Deserialize)]
pub struct PublishResult {
    /// Replaces the message: a JSON string is published as its text,
    /// any other JSON as its text form.
    pub data: Option<Box<RawValue>>,
    /// Do not keep the message in the channel's history (embedded mode;
    /// in Redis mode it is kept).
    #[serde(default)]
    pub skip_history: bool,
}

/// The rpc hook's result.
#[derive(Debug, Default, Deserialize)]
pub struct RpcResult {
    /// The answer's data, sent to the client as is.
    pub data: Option<Box<RawValue>>,
}

/// The refresh hook's result.
#[derive(Debug, Default, Deserialize)]
pub struct RefreshResult {
    /// The connection's time is over: it is closed (4001).
    #[serde(default)]
    pub expired: bool,
    /// The new expiry (unix seconds; 0: never).
    #[serde(default)]
    pub expire_at: u64,
    /// New public info (unused after connect).
    pub info: Option<Box<RawValue>>,
}

/// Parses an answer of any hook.
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<Answer<T>, ReplyError> {
    let wire: Wire<T> =
        serde_json::from_slice(body).map_err(|e| ReplyError::Malformed(e.to_string()))?;
    if let Some(d) = wire.disconnect {
        let code = u16::try_from(d.code)
            .ok()
            .filter(|c| (3000..=4999).contains(c))
            .ok_or(ReplyError::BadCloseCode(d.code))?;
        let reason = truncate(d.reason, MAX_REASON);
        return Ok(Answer::Disconnect { code, reason });
    }
    if let Some(e) = wire.error {
        let message = truncate(e.message, 1024);
        return Ok(Answer::Error {
            code: e.code,
            message,
        });
    }
    wire.result.map(Answer::Result).ok_or(ReplyError::NoOutcome)
}

/// Parses a connect answer and checks its result against the bounds:
/// `user` at most [`MAX_USER`] bytes, `info` a JSON object of at most
/// [`MAX_INFO`], at most `max_channels` valid channel names.
pub fn parse_connect(
    body: &[u8],
    max_channels: usize,
) -> Result<Answer<ConnectResult>, ReplyError> {
    let answer = parse::<ConnectResult>(body)?;
    if let Answer::Result(r) = &answer {
        check_connect(r, max_channels)?;
    }
    Ok(answer)
}

fn check_connect(r: &ConnectResult, max_channels: usize) -> Result<(), ReplyError> {
    if r.user.len() > MAX_USER {
        return Err(ReplyError::BadResult("user longer than 256 bytes"));
    }
    if r.info
        .as_ref()
        .is_some_and(|i| i.get().len() > MAX_INFO || !i.get().starts_with('{'))
    {
        return Err(ReplyError::BadResult(
            "info must be an object of at most 1 KiB",
        ));
    }
    if r.channels.len() > max_channels {
        return Err(ReplyError::BadResult(
            "more channels than --max-subscriptions",
        ));
    }
    if !r.channels.iter().all(|c| valid_channel_name(c)) {
        return Err(ReplyError::BadResult("invalid channel name"));
    }
    Ok(())
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_results_are_read_and_bounded() {
        let body = br#"{"result":{"user":"42","expire_at":1900000000,"info":{"name":"Ana"},"channels":["news"],"data":{"hello":1}}}"#;
        let Answer::Result(r) = parse_connect(body, 8).unwrap() else {
            panic!("a result");
        };
        assert_eq!((r.user.as_str(), r.expire_at), ("42", 1_900_000_000));
        assert_eq!(r.info.unwrap().get(), r#"{"name":"Ana"}"#);
        assert_eq!(
            (r.channels, r.data.unwrap().get()),
            (vec!["news".to_string()], r#"{"hello":1}"#)
        );
        let many = br#"{"result":{"channels":["a","b"]}}"#;
        assert!(matches!(
            parse_connect(many, 1),
            Err(ReplyError::BadResult(_))
        ));
        let bad = br#"{"result":{"channels":["no spaces"]}}"#;
        assert!(matches!(
            parse_connect(bad, 8),
            Err(ReplyError::BadResult(_))
        ));
        let info = br#"{"result":{"info":"not an object"}}"#;
        assert!(matches!(
            parse_connect(info, 8),
            Err(ReplyError::BadResult(_))
        ));
        assert!(matches!(
            parse_connect(br#"{"result":{}}"#, 8),
            Ok(Answer::Result(_))
        ));
    }

    #[test]
    fn errors_and_disconnects() {
        let e = parse::<RpcResult>(br#"{"error":{"code":403,"message":"no"}}"#).unwrap();
        assert!(matches!(e, Answer::Error { code: 403, ref message } if message == "no"));
        let long = format!(
            r#"{{"disconnect":{{"code":4500,"reason":"{}"}}}}"#,
            "é".repeat(100)
        );
        let Answer::Disconnect { code, reason } = parse::<RpcResult>(long.as_bytes()).unwrap()
        else {
            panic!("a disconnect");
        };
        assert_eq!(code, 4500);
        assert!(reason.len() <= MAX_REASON && reason.chars().all(|c| c == 'é'));
        let low = parse::<RpcResult>(br#"{"disconnect":{"code":1000,"reason":""}}"#);
        assert_eq!(low.unwrap_err(), ReplyError::BadCloseCode(1000));
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(
            parse::<RpcResult>(b"<html>"),
            Err(ReplyError::Malformed(_))
        ));
        assert_eq!(
            parse::<RpcResult>(b"{}").unwrap_err(),
            ReplyError::NoOutcome
        );
        let p =
            parse::<PublishResult>(br#"{"result":{"data":"new","skip_history":true}}"#).unwrap();
        assert!(matches!(
            p,
            Answer::Result(PublishResult {
                skip_history: true,
                ..
            })
        ));
    }
}
