//! Pusher channel occupancy across instances, sans-I/O: which of an app's
//! channels have subscribers anywhere, how many, and when a channel
//! becomes occupied or (after a grace) vacated — decided once for the
//! app, however many instances share the Redis.
//!
//! Per app (hash-tagged on `pusher/{app id}`, so on a Redis Cluster every
//! key of the app is one slot and each script is atomic; `!` keeps the
//! keys apart from any channel's):
//! - `prefix!o{pusher/ID}:e` — a hash: entry → this instance's
//!   subscriptions to the channel, one entry per (instance, channel):
//!   `{instance:016x}:{channel}`;
//! - `…:x` — a sorted set: entry → expiry (Redis time, ms): an instance
//!   refreshes its entries, so a crashed one's expire;
//! - `…:c` — a hash: channel → how many instances have an entry;
//! - `…:s` — a hash: channel → subscriptions summed over instances;
//! - `…:v` — a sorted set: channel → when its grace ends: the channel's
//!   last entry went, and `channel_vacated` is due unless an entry comes
//!   back first (a reconnecting last subscriber then causes neither a
//!   `channel_vacated` nor a second `channel_occupied`).
//!
//! A channel is occupied (announced) while it is in `c` or `v`: it is
//! announced when it enters `c` from neither, vacated when it leaves `v`
//! for nothing. The scripts run on Redis's clock (`TIME`), so the
//! instances' clocks do not matter. At most `max channels` (`c` and `v`
//! together) are tracked per app: past it an instance's channel is not
//! listed and not announced (the script answers -1; the instance retries
//! at its next refresh).

use std::sync::LazyLock;

use bytes::Bytes;

use super::resp::{self, Reply};

/// Sets this instance's subscriptions to a channel (0: removes its
/// entry). KEYS: e, x, c, s, v. ARGV: entry, channel, subscriptions, ttl
/// ms, grace ms, most channels. Returns 2 (the channel became occupied:
/// announce it), 1 (set), 0 (removed, or nothing to remove), -1 (the app
/// is at its channel bound: not tracked).
pub const SET_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local entry, channel, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ttl, grace = tonumber(ARGV[4]), tonumber(ARGV[5])
local old = tonumber(redis.call('HGET', KEYS[1], entry) or '0')
local out = 1
if n == 0 then
  if old == 0 then
    return 0
  end
  redis.call('HDEL', KEYS[1], entry)
  redis.call('ZREM', KEYS[2], entry)
  if redis.call('HINCRBY', KEYS[4], channel, -old) <= 0 then
    redis.call('HDEL', KEYS[4], channel)
  end
  if redis.call('HINCRBY', KEYS[3], channel, -1) <= 0 then
    redis.call('HDEL', KEYS[3], channel)
    redis.call('ZADD', KEYS[5], now + grace, channel)
  end
  out = 0
else
  if old == 0 then
    local known = redis.call('HEXISTS', KEYS[3], channel) == 1
      or redis.call('ZSCORE', KEYS[5], channel)
    if not known and redis.call('HLEN', KEYS[3]) + redis.call('ZCARD', KEYS[5]) >= tonumber(ARGV[6]) then
      return -1
    end
    if redis.call('HINCRBY', KEYS[3], channel, 1) == 1 and redis.call('ZREM', KEYS[5], channel) == 0 then
      out = 2
    end
  end
  redis.call('HSET', KEYS[1], entry, n)
  redis.call('ZADD', KEYS[2], now + ttl, entry)
  redis.call('HINCRBY', KEYS[4], channel, n - old)
end
for i = 1, 5 do
  redis.call('PEXPIRE', KEYS[i], (ttl + grace) * 3)
end
return out
"#;

/// Removes expired entries (a crashed instance's), then ends the graces
/// that are over. KEYS: e, x, c, s, v. ARGV: most entries and channels
/// per call, key lifetime ms, grace ms. Returns `{expired entries, vacated
/// channel...}`: the caller announces those `channel_vacated` (each is
/// returned to one caller only).
pub const SETTLE_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local batch = tonumber(ARGV[1])
local grace = tonumber(ARGV[3])
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, batch)
for _, entry in ipairs(gone) do
  redis.call('ZREM', KEYS[2], entry)
  local old = tonumber(redis.call('HGET', KEYS[1], entry) or '0')
  if redis.call('HDEL', KEYS[1], entry) == 1 then
    local channel = string.sub(entry, 18)
    if redis.call('HINCRBY', KEYS[4], channel, -old) <= 0 then
      redis.call('HDEL', KEYS[4], channel)
    end
    if redis.call('HINCRBY', KEYS[3], channel, -1) <= 0 then
      redis.call('HDEL', KEYS[3], channel)
      redis.call('ZADD', KEYS[5], now + grace, channel)
    end
  end
end
local out = {#gone}
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, batch)
for _, channel in ipairs(due) do
  redis.call('ZREM', KEYS[5], channel)
  if redis.call('HEXISTS', KEYS[3], channel) == 0 then
    out[#out + 1] = channel
  end
end
for i = 1, 5 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]))
  end
end
return out
"#;

static SET_SHA: LazyLock<String> = LazyLock::new(|| super::stream::sha(SET_SCRIPT));
static SETTLE_SHA: LazyLock<String> = LazyLock::new(|| super::stream::sha(SETTLE_SCRIPT));

/// The scripts, for `SCRIPT LOAD` on every (re)connect.
pub const SCRIPTS: [&str; 2] = [SET_SCRIPT, SETTLE_SCRIPT];

/// Most expired entries and ended graces one settle handles (the next
/// settle goes on).
pub const SETTLE_BATCH: usize = 1000;

/// Where an app's occupancy lives and who this instance is.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// The key prefix (`--redis-prefix`).
    pub prefix: &'a str,
    /// The Pusher app id.
    pub app: &'a str,
    /// This instance's id.
    pub instance: u64,
}

/// How long entries live and how long a vacated channel waits.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// An entry's lifetime without a refresh (`--presence-ttl`).
    pub ttl_ms: u64,
    /// The grace before `channel_vacated` (`--pusher-vacated-grace`).
    pub grace_ms: u64,
}

impl Timing {
    /// How long the app's keys outlive their last change.
    fn keys_ms(&self) -> u64 {
        (self.ttl_ms + self.grace_ms).saturating_mul(3)
    }
}

impl Place<'_> {
    /// The key every command of the app is routed by (all of its keys
    /// share the slot).
    pub fn route_key(&self) -> Vec<u8> {
        self.key("s")
    }

    /// `prefix!o{pusher/ID}:suffix`.
    pub fn key(&self, suffix: &str) -> Vec<u8> {
        format!("{}!o{{pusher/{}}}:{suffix}", self.prefix, self.app).into_bytes()
    }

    /// This instance's entry for `channel`.
    pub fn entry(&self, channel: &str) -> String {
        format!("{:016x}:{channel}", self.instance)
    }

    fn script(&self, sha: &str, argv: &[&[u8]]) -> Bytes {
        let keys = ["e", "x", "c", "s", "v"].map(|k| self.key(k));
        let mut args: Vec<&[u8]> = vec![b"EVALSHA", sha.as_bytes(), b"5"];
        args.extend(keys.iter().map(Vec::as_slice));
        args.extend_from_slice(argv);
        resp::command(&args)
    }
}

/// Sets this instance's `subscriptions` to `channel` (0: it has none).
pub fn set(at: &Place<'_>, channel: &str, subscriptions: usize, t: Timing, max: usize) -> Bytes {
    let entry = at.entry(channel);
    let (n, ttl, grace, max) = (
        subscriptions.to_string(),
        t.ttl_ms.to_string(),
        t.grace_ms.to_string(),
        max.to_string(),
    );
    let argv: [&[u8]; 6] = [
        entry.as_bytes(),
        channel.as_bytes(),
        n.as_bytes(),
        ttl.as_bytes(),
        grace.as_bytes(),
        max.as_bytes(),
    ];
    at.script(&SET_SHA, &argv)
}

/// Prunes expired entries and ends the graces that are over.
pub fn settle(at: &Place<'_>, t: Timing) -> Bytes {
    let (batch, keys, grace) = (
        SETTLE_BATCH.to_string(),
        t.keys_ms().to_string(),
        t.grace_ms.to_string(),
    );
    at.script(
        &SETTLE_SHA,
        &[batch.as_bytes(), keys.as_bytes(), grace.as_bytes()],
    )
}

/// `HGETALL` of the app's summed subscriptions (its occupied channels).
pub fn read_all(at: &Place<'_>) -> Bytes {
    resp::command(&[b"HGETALL", &at.key("s")])
}

/// `HGET` of `channel`'s summed subscriptions.
pub fn read_one(at: &Place<'_>, channel: &str) -> Bytes {
    resp::command(&[b"HGET", &at.key("s"), channel.as_bytes()])
}

/// A settle's reply: expired entries and the channels vacated; `None`
/// when it is not the script's shape.
pub fn parse_settle(reply: &Reply) -> Option<(u64, Vec<String>)> {
    let Reply::Array(parts) = reply else {
        return None;
    };
    let [Reply::Integer(expired), channels @ ..] = parts.as_slice() else {
        return None;
    };
    let channels = channels.iter().map(text).collect::<Option<Vec<_>>>()?;
    Some((u64::try_from(*expired).ok()?, channels))
}

/// `HGETALL`'s reply: (channel, subscriptions) with a positive count,
/// sorted by channel.
pub fn parse_all(reply: &Reply) -> Option<Vec<(String, u64)>> {
    let Reply::Array(parts) = reply else {
        return None;
    };
    if parts.len() % 2 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(parts.len() / 2);
    for pair in parts.chunks(2) {
        let n = count(&pair[1])?;
        if n > 0 {
            out.push((text(&pair[0])?, n));
        }
    }
    out.sort();
    Some(out)
}

/// `HGET`'s reply: the subscriptions (0 when the channel is not there).
pub fn parse_one(reply: &Reply) -> Option<u64> {
    match reply {
        Reply::Null => Some(0),
        r => count(r),
    }
}

fn text(r: &Reply) -> Option<String> {
    match r {
        Reply::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_string),
        _ => None,
    }
}

/// A count as Redis writes a hash value; a negative one is not trusted.
fn count(r: &Reply) -> Option<u64> {
    let s = text(r)?;
    let n: i64 = s.parse().ok()?;
    Some(u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Place<'static> {
        Place {
            prefix: "cc:",
            app: "7",
            instance: 0xab,
        }
    }

    #[test]
    fn an_app_s_keys_share_one_slot() {
        let at = at();
        assert_eq!(at.key("e"), b"cc:!o{pusher/7}:e");
        let slot = |k: &[u8]| super::super::cluster::slot(k);
        for k in ["e", "x", "c", "s", "v"] {
            assert_eq!(slot(&at.key(k)), slot(&at.route_key()));
        }
        assert_eq!(at.entry("presence-a"), "00000000000000ab:presence-a");
        let t = Timing {
            ttl_ms: 1000,
            grace_ms: 3000,
        };
        let cmd = set(&at, "room", 2, t, 10);
        assert!(cmd.starts_with(b"*14\r\n$7\r\nEVALSHA\r\n"), "{cmd:?}");
        assert!(settle(&at, t).starts_with(b"*11\r\n"));
    }

    #[test]
    fn replies_are_parsed_and_not_trusted() {
        let b = |s: &str| Reply::BulkString(Bytes::copy_from_slice(s.as_bytes()));
        let settled = Reply::Array(vec![Reply::Integer(2), b("a"), b("b")]);
        assert_eq!(
            parse_settle(&settled),
            Some((2, vec!["a".into(), "b".into()]))
        );
        assert_eq!(parse_settle(&Reply::Integer(1)), None);
        let all = Reply::Array(vec![b("z"), b("3"), b("a"), b("1"), b("gone"), b("-1")]);
        assert_eq!(
            parse_all(&all),
            Some(vec![("a".into(), 1), ("z".into(), 3)])
        );
        assert_eq!(parse_all(&Reply::Array(vec![b("odd")])), None);
        assert_eq!(parse_one(&Reply::Null), Some(0));
        assert_eq!(parse_one(&b("4")), Some(4));
        assert_eq!(parse_one(&b("x")), None);
    }
}
