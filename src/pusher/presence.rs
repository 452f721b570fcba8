//! Pusher presence channels' texts: a member from `channel_data`, the
//! `member_added`/`member_removed` data and the `subscription_succeeded`
//! snapshot. The members themselves are counted by the shared presence
//! core (`crate::presence`, per user, with Redis mode across instances);
//! the edge is `server::pusher::ws`.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// Longest `user_id`.
pub const MAX_USER_ID: usize = 128;
/// Longest `channel_data` (user id and info) a member may hold, in bytes
/// (soketi's default; Pusher documents 1 KB for `user_info`).
pub const MAX_CHANNEL_DATA: usize = 2 * 1024;

/// A member's identity, from a subscription's `channel_data`.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// `user_id` (numbers are taken as their decimal text).
    pub user_id: String,
    /// `user_info` as sent (raw JSON), if any.
    pub user_info: Option<String>,
}

#[derive(Deserialize)]
struct ChannelData {
    user_id: Value,
    user_info: Option<Box<RawValue>>,
}

/// Parses `channel_data` (`{"user_id":"1","user_info":{...}}`).
pub fn parse_member(channel_data: &str) -> Option<Member> {
    if channel_data.len() > MAX_CHANNEL_DATA {
        return None;
    }
    let d: ChannelData = serde_json::from_str(channel_data).ok()?;
    let user_id = match d.user_id {
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    if user_id.is_empty() || user_id.len() > MAX_USER_ID {
        return None;
    }
    Some(Member {
        user_id,
        user_info: d.user_info.map(|r| r.get().to_string()),
    })
}

/// `subscription_succeeded`'s data for `members` (user id, raw info):
/// `{"presence":{"ids":[...],"hash":{id:info},"count":n}}`.
pub fn snapshot<'a>(members: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> String {
    let mut hash = Map::new();
    let mut ids = Vec::new();
    for (id, info) in members {
        let info = info.and_then(|i| serde_json::from_str(i).ok());
        hash.insert(id.to_string(), info.unwrap_or(Value::Null));
        ids.push(id.to_string());
    }
    ids.sort();
    json!({ "presence": { "count": ids.len(), "ids": ids, "hash": hash } }).to_string()
}

/// `{"event":"pusher_internal:member_removed","channel":channel,"data":`:
/// Redis's prune script completes it with the data string and `}`.
pub fn member_removed_head(channel: &str) -> String {
    let channel = Value::from(channel).to_string();
    format!(r#"{{"event":"pusher_internal:member_removed","channel":{channel},"data":"#)
}

/// `member_added`'s data.
pub fn member_added(m: &Member) -> String {
    let info: Value = m
        .user_info
        .as_deref()
        .and_then(|i| serde_json::from_str(i).ok())
        .unwrap_or(Value::Null);
    json!({ "user_id": m.user_id, "user_info": info }).to_string()
}

/// `member_removed`'s data.
pub fn member_removed(user_id: &str) -> String {
    json!({ "user_id": user_id }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_list_ids_and_infos() {
        let snap: Value =
            serde_json::from_str(&snapshot([("2", Some(r#"{"name":"2"}"#)), ("1", None)])).unwrap();
        assert_eq!(snap["presence"]["ids"], json!(["1", "2"]));
        assert_eq!(snap["presence"]["hash"]["2"]["name"], "2");
        assert_eq!(snap["presence"]["hash"]["1"], Value::Null);
        assert_eq!(snap["presence"]["count"], 2);
    }

    #[test]
    fn the_removed_head_completes_to_member_removed() {
        // What the prune script appends: the data string, then `}`.
        let data = Value::from(member_removed("u")).to_string();
        let full: Value =
            serde_json::from_str(&format!("{}{data}}}", member_removed_head("presence-a")))
                .unwrap();
        assert_eq!(full["event"], "pusher_internal:member_removed");
        assert_eq!(full["channel"], "presence-a");
        assert_eq!(full["data"], member_removed("u"));
    }

    #[test]
    fn channel_data_needs_a_user_id() {
        assert_eq!(parse_member(r#"{"user_id":7}"#).unwrap().user_id, "7");
        assert!(parse_member(r#"{"user_info":{}}"#).is_none());
        assert!(parse_member(r#"{"user_id":""}"#).is_none());
        assert!(parse_member("x").is_none());
        let big = format!(
            r#"{{"user_id":"1","user_info":"{}"}}"#,
            "x".repeat(MAX_CHANNEL_DATA)
        );
        assert!(parse_member(&big).is_none());
    }
}
