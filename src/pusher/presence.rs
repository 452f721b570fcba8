//! Presence channel members of one worker: per channel, each user with
//! how many of its connections are subscribed, so a user's second
//! connection does not announce it again and only its last one leaving
//! removes it. Sans-I/O; the edge sends `member_added`/`member_removed`
//! when [`Presence::join`]/[`Presence::leave`] say so.
//!
//! Embedded (one instance): across Redis-connected instances each one
//! knows only its own members (a later issue moves this to Redis).

use std::collections::HashMap;

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

struct Entry {
    conns: usize,
    info: Option<String>,
}

/// Why a join was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelFull;

/// Members of every presence channel with local subscribers.
#[derive(Default)]
pub struct Presence {
    channels: HashMap<String, HashMap<String, Entry>>,
}

impl Presence {
    /// A connection of `m` joins `channel`: `Ok(true)` when the user is
    /// new there (announce `member_added`); refused when the channel has
    /// `max` users and this one is not among them.
    pub fn join(&mut self, channel: &str, m: &Member, max: usize) -> Result<bool, ChannelFull> {
        let users = self.channels.entry(channel.to_string()).or_default();
        if let Some(e) = users.get_mut(&m.user_id) {
            e.conns += 1;
            return Ok(false);
        }
        if users.len() >= max {
            if users.is_empty() {
                self.channels.remove(channel);
            }
            return Err(ChannelFull);
        }
        let info = m.user_info.clone();
        users.insert(m.user_id.clone(), Entry { conns: 1, info });
        Ok(true)
    }

    /// A connection of `user_id` leaves `channel`: `true` when it was the
    /// user's last one there (announce `member_removed`).
    pub fn leave(&mut self, channel: &str, user_id: &str) -> bool {
        let Some(users) = self.channels.get_mut(channel) else {
            return false;
        };
        let Some(e) = users.get_mut(user_id) else {
            return false;
        };
        e.conns -= 1;
        if e.conns > 0 {
            return false;
        }
        users.remove(user_id);
        if users.is_empty() {
            self.channels.remove(channel);
        }
        true
    }

    /// Distinct users in `channel`.
    pub fn user_count(&self, channel: &str) -> usize {
        self.channels.get(channel).map_or(0, HashMap::len)
    }

    /// The user ids in `channel`.
    pub fn user_ids(&self, channel: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .channels
            .get(channel)
            .map(|u| u.keys().cloned().collect())
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// `subscription_succeeded`'s data:
    /// `{"presence":{"ids":[...],"hash":{id:info},"count":n}}`.
    pub fn snapshot(&self, channel: &str) -> String {
        let mut hash = Map::new();
        if let Some(users) = self.channels.get(channel) {
            for (id, e) in users {
                let info = e.info.as_deref().and_then(|i| serde_json::from_str(i).ok());
                hash.insert(id.clone(), info.unwrap_or(Value::Null));
            }
        }
        let ids = self.user_ids(channel);
        json!({ "presence": { "count": ids.len(), "ids": ids, "hash": hash } }).to_string()
    }
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

    fn m(id: &str) -> Member {
        parse_member(&format!(
            r#"{{"user_id":"{id}","user_info":{{"name":"{id}"}}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_user_is_added_once_and_removed_with_its_last_connection() {
        let mut p = Presence::default();
        assert_eq!(p.join("presence-a", &m("1"), 10), Ok(true));
        assert_eq!(p.join("presence-a", &m("1"), 10), Ok(false));
        assert_eq!(p.join("presence-a", &m("2"), 10), Ok(true));
        assert_eq!(p.user_count("presence-a"), 2);
        assert!(!p.leave("presence-a", "1"));
        assert!(p.leave("presence-a", "1"));
        assert!(!p.leave("presence-a", "1"), "already gone");
        let snap: Value = serde_json::from_str(&p.snapshot("presence-a")).unwrap();
        assert_eq!(snap["presence"]["ids"], json!(["2"]));
        assert_eq!(snap["presence"]["hash"]["2"]["name"], "2");
        assert_eq!(snap["presence"]["count"], 1);
        assert!(p.leave("presence-a", "2"));
        assert!(p.channels.is_empty());
    }

    #[test]
    fn a_full_channel_refuses_new_users_but_not_known_ones() {
        let mut p = Presence::default();
        p.join("c", &m("1"), 1).unwrap();
        assert_eq!(p.join("c", &m("2"), 1), Err(ChannelFull));
        assert_eq!(p.join("c", &m("1"), 1), Ok(false));
        assert_eq!(p.join("d", &m("1"), 0), Err(ChannelFull));
        assert!(!p.channels.contains_key("d"));
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
