//! Presence in Redis, sans-I/O: the scripts that keep a channel's members
//! across instances, and the commands and replies around them.
//!
//! Per channel (hash-tagged on its events channel — `presence/{channel}`
//! for the JSON protocol, a Pusher channel itself — so that on a Redis
//! Cluster the keys and the sharded channel the scripts `SPUBLISH` to are
//! one slot; `!` keeps the keys apart from any channel's):
//! - `prefix!p{events}:e` — a hash: entry → `"{connections} {info}"`,
//!   one entry per (instance, user): `{instance:016x}:{user}`;
//! - `prefix!p{events}:x` — a sorted set: entry → expiry (Redis time, ms);
//! - `prefix!p{events}:u` — a hash: user → how many entries it has.
//!
//! Every change is one script, so it is atomic, and a user's join or
//! leave is decided by its entry counter going 0 → 1 or 1 → 0 inside it:
//! however many instances add, remove or prune at once, exactly one of
//! them sees each transition, and that one script `PUBLISH`es (on a
//! cluster `SPUBLISH`es) the event on
//! the channel's events channel — in Redis's order with the channel's
//! other publishes. Expiry uses Redis's clock (`TIME`), so instances' clocks
//! do not matter. The events are not kept in history.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use bytes::{Bytes, BytesMut};

use super::commands::Pubsub;
use super::envelope::{self, Origin};
use super::resp::{self, Reply};
use crate::ws::OpCode;

/// Adds or refreshes an entry. KEYS: e, x, u. ARGV: entry, user,
/// `"{connections} {info}"`, ttl ms, max users (0: no bound: a refresh),
/// most users for events, events channel, join message (envelope), and
/// `SPUBLISH` on a Redis Cluster. Returns 2 (the user joined), 1 (added or refreshed), -1 (full: nothing
/// changed).
pub const ADD_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[4])
local new = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[3])
local joined = 1
if new == 1 then
  local n = redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
  if n == 1 then
    local users = redis.call('HLEN', KEYS[3])
    local max = tonumber(ARGV[5])
    if max > 0 and users > max then
      redis.call('HDEL', KEYS[1], ARGV[1])
      redis.call('HDEL', KEYS[3], ARGV[2])
      return -1
    end
    if users <= tonumber(ARGV[6]) then
      redis.call(ARGV[9] or 'PUBLISH', ARGV[7], ARGV[8])
    end
    joined = 2
  end
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], ttl * 3)
end
return joined
"#;

/// Removes an entry (a user's last connection on this instance left).
/// KEYS: e, x, u. ARGV: entry, user, most users for events, events
/// channel, leave message (envelope), `SPUBLISH` on a Redis Cluster.
/// Returns 2 (the user left), 1
/// (removed), 0 (not there: pruned already, whose script announced it).
pub const REMOVE_SCRIPT: &str = r#"
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
local n = redis.call('HINCRBY', KEYS[3], ARGV[2], -1)
if n > 0 then
  return 1
end
redis.call('HDEL', KEYS[3], ARGV[2])
if redis.call('HLEN', KEYS[3]) + 1 <= tonumber(ARGV[3]) then
  redis.call(ARGV[6] or 'PUBLISH', ARGV[4], ARGV[5])
end
return 2
"#;

/// Prunes expired entries, then (with ARGV[5] = 1) returns the members.
/// KEYS: e, x, u. ARGV: most entries to prune, most users for events,
/// events channel, the leave message's head (envelope and JSON up to the
/// user: the script appends the user as a JSON string — with ARGV[7] = 1
/// the JSON string of `{"user_id":user}` — and `}`), 1 to read, most
/// entries read, the leave's style, `SPUBLISH` on a Redis Cluster. Returns `{expired entries, users that left, users,
/// entry, value, entry, value...}`.
pub const PRUNE_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local left = 0
for _, m in ipairs(gone) do
  redis.call('ZREM', KEYS[2], m)
  if redis.call('HDEL', KEYS[1], m) == 1 then
    local user = string.sub(m, 18)
    if redis.call('HINCRBY', KEYS[3], user, -1) <= 0 then
      redis.call('HDEL', KEYS[3], user)
      left = left + 1
      if redis.call('HLEN', KEYS[3]) + 1 <= tonumber(ARGV[2]) then
        local u = cjson.encode(user)
        if ARGV[7] == '1' then
          u = cjson.encode('{"user_id":' .. u .. '}')
        end
        redis.call(ARGV[8] or 'PUBLISH', ARGV[3], ARGV[4] .. u .. '}')
      end
    end
  end
end
local out = {#gone, left, redis.call('HLEN', KEYS[3])}
if ARGV[5] == '1' then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, math.min(#all, 2 * tonumber(ARGV[6])) do
    out[#out + 1] = all[i]
  end
end
return out
"#;

static ADD_SHA: LazyLock<String> = LazyLock::new(|| super::stream::sha(ADD_SCRIPT));
static REMOVE_SHA: LazyLock<String> = LazyLock::new(|| super::stream::sha(REMOVE_SCRIPT));
static PRUNE_SHA: LazyLock<String> = LazyLock::new(|| super::stream::sha(PRUNE_SCRIPT));

/// The scripts, for `SCRIPT LOAD` on every (re)connect.
pub const SCRIPTS: [&str; 3] = [ADD_SCRIPT, REMOVE_SCRIPT, PRUNE_SCRIPT];

/// Most expired entries one prune removes (the next prune goes on).
pub const PRUNE_BATCH: usize = 1000;
/// Most entries one read returns: with `--presence-max-members` at most
/// [`crate::presence::MAX_MEMBERS`], a reply stays far below the element
/// bound of `redis::scan` (a larger one would cost the connection). A
/// user on more instances than that allows is listed with fewer
/// connections; `count` (the users) is always exact.
pub const READ_ENTRIES: usize = 20_000;

/// Where a channel's presence lives, who this instance is, and where
/// and as whom its events are published.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// The key prefix (`--redis-prefix`).
    pub prefix: &'a str,
    /// The channel (the hub's name: a Pusher channel's internal one).
    pub channel: &'a str,
    /// This instance's id (the envelope's origin).
    pub instance: u64,
    /// The hub channel the events go to (`presence/{channel}` for the JSON
    /// protocol, the channel itself for Pusher).
    pub events: &'a str,
    /// The envelope's sender (a Pusher member's own `member_added` is not
    /// sent to it: its serial with `EXCLUDE_ALWAYS`), 0 for none.
    pub sender: u64,
    /// Plain or sharded pub/sub (Redis Cluster: the scripts `SPUBLISH`).
    pub mode: Pubsub,
}

/// How the prune script writes a leave's user after the head: as a JSON
/// string (`"u"`, the JSON protocol's `leave`), or as the JSON string of
/// `{"user_id":"u"}` (Pusher's `member_removed`, whose `data` is a string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaveUser {
    /// `"u"`.
    Plain,
    /// `"{\"user_id\":\"u\"}"`.
    PusherData,
}

impl Place<'_> {
    /// The key a script call is routed by (its first key; every key of the
    /// channel has the same slot).
    pub fn route_key(&self) -> Vec<u8> {
        self.key("e")
    }

    /// Tagged with the events channel, so that on a Redis Cluster the
    /// keys and the sharded channel the scripts `SPUBLISH` to are in one
    /// slot (for Pusher the events channel is the channel itself).
    fn key(&self, suffix: &str) -> Vec<u8> {
        format!("{}!p{{{}}}:{suffix}", self.prefix, self.events).into_bytes()
    }

    fn events(&self) -> Vec<u8> {
        super::commands::channel_key_as(self.mode, self.prefix, self.events)
    }

    /// The publish verb the scripts get (none: their `PUBLISH`).
    fn verb(&self) -> Option<&'static [u8]> {
        (self.mode == Pubsub::Sharded).then_some(b"SPUBLISH")
    }

    /// This instance's entry for `user`.
    pub fn entry(&self, user: &str) -> String {
        format!("{:016x}:{user}", self.instance)
    }

    fn message(&self, json: &str) -> Vec<u8> {
        let mut out = BytesMut::with_capacity(envelope::HEADER_LEN + json.len());
        let origin = Origin {
            instance: self.instance,
            sender: self.sender,
        };
        envelope::put_header(&mut out, OpCode::Text, origin);
        out.extend_from_slice(json.as_bytes());
        out.to_vec()
    }
}

/// What an entry's value holds: this instance's connections of the user
/// and the user's info.
pub fn entry_value(connections: u32, info: Option<&str>) -> String {
    format!("{connections} {}", info.unwrap_or(""))
}

/// `EVALSHA sha 3 e x u ARGV...` for `at`'s channel, with the publish
/// verb last on a cluster (each script reads it as its optional last
/// argument).
fn script(at: &Place<'_>, sha: &str, argv: &[&[u8]]) -> Bytes {
    let (e, x, u) = (at.key("e"), at.key("x"), at.key("u"));
    let mut args: Vec<&[u8]> = vec![b"EVALSHA", sha.as_bytes(), b"3", &e, &x, &u];
    args.extend_from_slice(argv);
    args.extend(at.verb());
    resp::command(&args)
}

/// Adds (or refreshes) this instance's entry for `user`, publishing
/// `join` if the user is new to the channel; `max` = 0 for a refresh (an
/// entry already admitted is never refused).
pub fn add(
    at: &Place<'_>,
    (user, connections, info): (&str, u32, Option<&str>),
    (ttl_ms, max, max_events): (u64, usize, usize),
    join: &str,
) -> Bytes {
    let (ttl, max, max_events) = (ttl_ms.to_string(), max.to_string(), max_events.to_string());
    let (entry, value) = (at.entry(user), entry_value(connections, info));
    let (events, message) = (at.events(), at.message(join));
    script(
        at,
        &ADD_SHA,
        &[
            entry.as_bytes(),
            user.as_bytes(),
            value.as_bytes(),
            ttl.as_bytes(),
            max.as_bytes(),
            max_events.as_bytes(),
            &events,
            &message,
        ],
    )
}

/// Removes this instance's entry for `user`, publishing `leave` if it was
/// the user's last.
pub fn remove(at: &Place<'_>, user: &str, max_events: usize, leave: &str) -> Bytes {
    let (entry, max_events) = (at.entry(user), max_events.to_string());
    let (events, message) = (at.events(), at.message(leave));
    let argv: [&[u8]; 5] = [
        entry.as_bytes(),
        user.as_bytes(),
        max_events.as_bytes(),
        &events,
        &message,
    ];
    script(at, &REMOVE_SHA, &argv)
}

/// Prunes expired entries (announcing the leaves: `leave_head`, the user
/// written as `how` says, then `}`), and with `read` lists the members.
pub fn prune(
    at: &Place<'_>,
    max_events: usize,
    (leave_head, how): (&str, LeaveUser),
    read: bool,
) -> Bytes {
    let (batch, max_events) = (PRUNE_BATCH.to_string(), max_events.to_string());
    let (events, message) = (at.events(), at.message(leave_head));
    let entries = READ_ENTRIES.to_string();
    let style: &[u8] = if how == LeaveUser::PusherData {
        b"1"
    } else {
        b"0"
    };
    let argv: [&[u8]; 7] = [
        batch.as_bytes(),
        max_events.as_bytes(),
        &events,
        &message,
        if read { b"1" } else { b"0" },
        entries.as_bytes(),
        style,
    ];
    script(at, &PRUNE_SHA, &argv)
}

/// A member as read from Redis: connections summed over instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadMember {
    /// The user.
    pub user: String,
    /// Its info (raw JSON), if any.
    pub info: Option<String>,
    /// Its connections, over every instance.
    pub connections: u32,
}

/// What a prune answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Entries that had expired.
    pub expired: u64,
    /// Users whose last entry that was (their leave was announced).
    pub left: u64,
    /// Users present (after the prune).
    pub users: u64,
    /// The members (sorted by user), when read.
    pub members: Vec<ReadMember>,
}

/// Parses a prune's reply; `None` when it is not the script's shape.
pub fn parse_prune(reply: &Reply) -> Option<Pruned> {
    let Reply::Array(parts) = reply else {
        return None;
    };
    let [Reply::Integer(expired), Reply::Integer(left), Reply::Integer(users), entries @ ..] =
        parts.as_slice()
    else {
        return None;
    };
    // Keyed by user (an entry per instance a user is on): one lookup per
    // entry, sorted by user as it is built.
    let mut members: BTreeMap<&str, ReadMember> = BTreeMap::new();
    for pair in entries.chunks(2) {
        let [Reply::BulkString(entry), Reply::BulkString(value)] = pair else {
            return None;
        };
        let (entry, value) = (
            std::str::from_utf8(entry).ok()?,
            std::str::from_utf8(value).ok()?,
        );
        let user = entry.get(17..)?;
        let (n, info) = value.split_once(' ')?;
        let n: u32 = n.parse().ok()?;
        let info = (!info.is_empty()).then(|| info.to_string());
        let m = members.entry(user).or_insert_with(|| ReadMember {
            user: user.to_string(),
            info,
            connections: 0,
        });
        m.connections = m.connections.saturating_add(n);
    }
    let members = members.into_values().collect();
    // Redis is not trusted to be well-behaved: a negative count is not
    // the script's answer.
    Some(Pruned {
        expired: u64::try_from(*expired).ok()?,
        left: u64::try_from(*left).ok()?,
        users: u64::try_from(*users).ok()?,
        members,
    })
}

/// An add's or remove's reply: the script's number.
pub fn parse_number(reply: &Reply) -> Option<i64> {
    match reply {
        Reply::Integer(n) => Some(*n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_hash_tagged_on_the_events_channel() {
        let mut at = Place {
            prefix: "cc:",
            channel: "room-1",
            instance: 0xab,
            events: "presence/room-1",
            sender: 0,
            mode: Pubsub::Plain,
        };
        assert_eq!(at.key("e"), b"cc:!p{presence/room-1}:e");
        assert_eq!(at.events(), b"cc:presence/room-1");
        let plain = add(&at, ("ana", 1, None), (1000, 0, 100), "{}");
        assert!(!plain.windows(8).any(|w| w == b"SPUBLISH"));
        // A cluster: the sharded events channel is in the keys' slot, and
        // every script is told to SPUBLISH.
        at.mode = Pubsub::Sharded;
        assert_eq!(at.events(), b"cc:{presence/room-1}");
        let slot = |k: &[u8]| super::super::cluster::slot(k);
        assert_eq!(slot(&at.key("e")), slot(&at.events()));
        for cmd in [
            add(&at, ("ana", 1, None), (1000, 0, 100), "{}"),
            remove(&at, "ana", 100, "{}"),
            prune(&at, 100, ("{", LeaveUser::Plain), false),
        ] {
            assert!(cmd.ends_with(b"$8\r\nSPUBLISH\r\n"), "{cmd:?}");
        }
        assert_eq!(at.entry("ana"), "00000000000000ab:ana");
        let m = at.message("{}");
        assert_eq!(m.len(), envelope::HEADER_LEN + 2);
        let env = envelope::decode(Bytes::from(m));
        assert_eq!(&env.payload[..], b"{}");
    }

    #[test]
    fn prune_replies_sum_connections_per_user() {
        let b = |s: &str| Reply::BulkString(Bytes::copy_from_slice(s.as_bytes()));
        let reply = Reply::Array(vec![
            Reply::Integer(3),
            Reply::Integer(1),
            Reply::Integer(2),
            b("00000000000000ab:ana"),
            b(r#"2 {"n":1}"#),
            b("00000000000000cd:ana"),
            b(r#"1 {"n":1}"#),
            b("00000000000000cd:bo:x"),
            b("1 "),
        ]);
        let p = parse_prune(&reply).unwrap();
        assert_eq!((p.expired, p.left, p.users), (3, 1, 2));
        assert_eq!(p.members.len(), 2);
        assert_eq!(p.members[0].connections, 3);
        assert_eq!(p.members[1].user, "bo:x");
        assert_eq!(p.members[1].info, None);
        assert!(parse_prune(&Reply::Integer(1)).is_none());
        // Shapes the script never returns are refused, not trusted.
        let negative = Reply::Array(vec![
            Reply::Integer(-1),
            Reply::Integer(0),
            Reply::Integer(0),
        ]);
        assert!(parse_prune(&negative).is_none());
        let odd = Reply::Array(vec![
            Reply::Integer(0),
            Reply::Integer(0),
            Reply::Integer(1),
            b("00000000000000ab:ana"),
        ]);
        assert!(parse_prune(&odd).is_none());
        let short_entry = Reply::Array(vec![
            Reply::Integer(0),
            Reply::Integer(0),
            Reply::Integer(1),
            b("ab"),
            b("1 "),
        ]);
        assert!(parse_prune(&short_entry).is_none());
    }

    #[test]
    fn a_full_read_merges_every_user_s_entries() {
        // 20,000 entries (the read's bound): 10,000 users on 2 instances,
        // in Redis's hash order (not sorted). One lookup per entry: this
        // was a linear search per entry, 10^8 comparisons.
        let b = |s: &str| Reply::BulkString(Bytes::copy_from_slice(s.as_bytes()));
        let mut parts = vec![Reply::Integer(0), Reply::Integer(0), Reply::Integer(10_000)];
        for instance in [0xb_u64, 0xa] {
            for u in (0..10_000).rev() {
                parts.push(b(&format!("{instance:016x}:u{u:05}")));
                parts.push(b("2 "));
            }
        }
        let p = parse_prune(&Reply::Array(parts)).unwrap();
        assert_eq!(p.members.len(), 10_000);
        assert!(p.members.windows(2).all(|m| m[0].user < m[1].user));
        assert!(p.members.iter().all(|m| m.connections == 4));
    }
}
