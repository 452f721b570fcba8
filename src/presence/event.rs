//! The JSON texts of presence: the `join` and `leave` events and the
//! `presence` answer (to `{"op":"presence"}` and `GET /presence/{channel}`).
//!
//! ```json
//! {"type":"join","channel":"c","user":"u","info":{"name":"Ana"}}
//! {"type":"leave","channel":"c","user":"u"}
//! {"type":"presence","channel":"c","members":[{"user":"u","info":{},"connections":2}],"count":1,"id":1}
//! ```
//! `info` is left out when the member has none. Info is stored as the
//! JSON text it arrived as (checked when the token was verified) and
//! copied in verbatim.

use serde::Serialize;
use serde_json::value::RawValue;

/// One member of an answer: user, info (raw JSON), connections.
pub type MemberRow<'a> = (&'a str, Option<&'a str>, u32);

#[derive(Serialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    channel: &'a str,
    user: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    info: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct Row<'a> {
    user: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    info: Option<&'a RawValue>,
    connections: u32,
}

#[derive(Serialize)]
struct Answer<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    channel: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    members: Option<Vec<Row<'a>>>,
    count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RawValue>,
}

/// Info text as raw JSON, or `None` if it is not JSON (never stored so;
/// defensive for what Redis hands back).
fn raw(info: Option<&str>) -> Option<&RawValue> {
    info.and_then(|i| serde_json::from_str::<&RawValue>(i).ok())
}

/// `{"type":"join",...}`.
pub fn join(channel: &str, user: &str, info: Option<&str>) -> String {
    let e = Event {
        kind: "join",
        channel,
        user,
        info: raw(info),
    };
    serde_json::to_string(&e).expect("events serialize")
}

/// `{"type":"leave",...}`.
pub fn leave(channel: &str, user: &str) -> String {
    let e = Event {
        kind: "leave",
        channel,
        user,
        info: None,
    };
    serde_json::to_string(&e).expect("events serialize")
}

/// A leave event up to its user (`{"type":"leave","channel":"c","user":`):
/// Redis's prune script appends the user it removes, as a JSON string, and
/// the closing `}`.
pub fn leave_head(channel: &str) -> String {
    let full = leave(channel, "");
    full.strip_suffix(r#"""}"#)
        .expect("a leave ends with its user")
        .to_string()
}

/// `{"type":"presence",...}`: the members (`None`: count only) and the
/// request's `id`, if any.
pub fn answer(
    channel: &str,
    members: Option<&[MemberRow<'_>]>,
    count: usize,
    id: Option<&RawValue>,
) -> String {
    let members = members.map(|m| {
        m.iter()
            .map(|&(user, info, connections)| Row {
                user,
                info: raw(info),
                connections,
            })
            .collect()
    });
    let a = Answer {
        kind: "presence",
        channel,
        members,
        count,
        id,
    };
    serde_json::to_string(&a).expect("answers serialize")
}
