//! History in Redis, sans-I/O: per channel a stream of its messages and a
//! small meta hash (epoch, latest offset), written by one Lua script that
//! also publishes, so the offset, the stream entry and the PUBLISH are one
//! atomic step and every instance sees the same offsets; read by a second
//! script that returns the position and a range in one consistent view.
//!
//! Keys carry the channel as a hash tag (`prefix!h{channel}:s` and `:m`),
//! so in Redis Cluster a channel's keys live in one slot. Stream entry ids
//! are `offset-0`, so a range of offsets is a range of ids. Scripts are
//! sent with `EVALSHA` (their SHA-1 is computed here); the edge loads
//! them with `SCRIPT LOAD` on every (re)connect and reconnects on
//! `NOSCRIPT` (a flushed script cache), resending what was unanswered.

use std::sync::LazyLock;

use bytes::{BufMut, Bytes, BytesMut};

use super::commands::Pubsub;
use super::envelope;
use super::resp::{self, Reply};
use crate::history::relay::Snapshot;
use crate::history::Entry;

/// KEYS: stream, meta. ARGV: pub/sub channel, MAXLEN, TTL seconds, the
/// plain envelope, an epoch for a channel without one, and in a cluster
/// `SPUBLISH` (the sharded channel shares the keys' hash tag, so it is in
/// their slot). Returns what PUBLISH returns (instances that received it).
pub const PUBLISH_SCRIPT: &str = r#"
local e = redis.call('HGET', KEYS[2], 'e')
if not e then
  e = ARGV[5]
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'e', e, 't', 0)
end
local t = redis.call('HINCRBY', KEYS[2], 't', 1)
redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[2], t .. '-0', 'd', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return redis.call(ARGV[6] or 'PUBLISH', ARGV[1], '\204\2' .. t .. ' ' .. e .. ' ' .. ARGV[4])
"#;

/// KEYS: stream, meta. ARGV: an epoch for a channel without one (empty:
/// do not create one, answer `{'', 0}`), TTL
/// seconds, first offset wanted, most entries (0: none), most bytes (at
/// least one entry is returned; fewer than asked means "read on").
/// Returns `{epoch, top, id, envelope, id, envelope, ...}`: flat, as
/// replies nested deeper than `scan::MAX_DEPTH` are refused.
pub const READ_SCRIPT: &str = r#"
local e = redis.call('HGET', KEYS[2], 'e')
if not e then
  if ARGV[1] == '' then
    return {'', 0}
  end
  e = ARGV[1]
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'e', e, 't', 0)
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
local t = tonumber(redis.call('HGET', KEYS[2], 't'))
local out = {e, t}
if tonumber(ARGV[4]) > 0 and tonumber(ARGV[3]) <= t then
  local r = redis.call('XRANGE', KEYS[1], ARGV[3] .. '-0', '+', 'COUNT', ARGV[4])
  local budget, used = tonumber(ARGV[5]), 0
  for _, x in ipairs(r) do
    local d = x[2][2]
    if used > 0 and used + #d > budget then
      break
    end
    used = used + #d + 32
    out[#out + 1] = x[1]
    out[#out + 1] = d
  end
end
return out
"#;

/// The SHA-1 (hex) `EVALSHA` names a script by.
pub fn sha(script: &str) -> String {
    sha1_smol::Sha1::from(script).digest().to_string()
}

// Computed once: every publish names the script.
static PUBLISH_SHA: LazyLock<String> = LazyLock::new(|| sha(PUBLISH_SCRIPT));
static READ_SHA: LazyLock<String> = LazyLock::new(|| sha(READ_SCRIPT));

/// `SCRIPT LOAD script`.
pub fn script_load(script: &str) -> Bytes {
    resp::command(&[b"SCRIPT", b"LOAD", script.as_bytes()])
}

/// Whether a reply is Redis saying it does not know the script.
pub fn is_noscript(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(e) if e.starts_with("NOSCRIPT"))
}

fn key(prefix: &str, channel: &str, suffix: &str) -> Vec<u8> {
    // `!` is outside the channel charset: no channel's key looks like it.
    format!("{prefix}!h{{{channel}}}:{suffix}").into_bytes()
}

/// A channel's stream key.
pub fn stream_key(prefix: &str, channel: &str) -> Vec<u8> {
    key(prefix, channel, "s")
}

/// A channel's meta hash key.
pub fn meta_key(prefix: &str, channel: &str) -> Vec<u8> {
    key(prefix, channel, "m")
}

/// How a channel's history is kept in Redis.
#[derive(Debug, Clone)]
pub struct Keeping {
    /// Entries per stream (`--history-size`).
    pub size: usize,
    /// Seconds the keys live after the last publish (`--history-ttl`).
    pub ttl_s: u64,
    /// Most payload bytes one read returns (half of
    /// `--redis-max-reply-size`, so a reply never trips that bound and
    /// drops the connection); a longer range is read in several parts.
    pub read_bytes: usize,
}

/// A publish that also records the message (`EVALSHA` of
/// [`PUBLISH_SCRIPT`]); `epoch` is used if the channel has none yet.
pub fn publish(
    (mode, prefix, channel): (Pubsub, &str, &str),
    (opcode, origin, payload, tags): super::commands::Outgoing<'_>,
    keeping: &Keeping,
    epoch: &str,
) -> Bytes {
    let mut env = BytesMut::with_capacity(envelope::head_len(tags) + payload.len());
    envelope::put_head(&mut env, (opcode, origin), tags);
    env.put_slice(payload);
    let (size, ttl) = (keeping.size.to_string(), keeping.ttl_s.to_string());
    let sha = &*PUBLISH_SHA;
    let (stream, meta) = (stream_key(prefix, channel), meta_key(prefix, channel));
    let chan = super::commands::channel_key_as(mode, prefix, channel);
    let mut args: Vec<&[u8]> = vec![b"EVALSHA", sha.as_bytes(), b"2", &stream, &meta, &chan];
    args.extend([size.as_bytes(), ttl.as_bytes(), &env, epoch.as_bytes()]);
    if mode == Pubsub::Sharded {
        args.push(b"SPUBLISH");
    }
    resp::command(&args)
}

/// A read of a channel's position and at most `count` entries from
/// offset `from` (`EVALSHA` of [`READ_SCRIPT`]).
pub fn read(
    prefix: &str,
    channel: &str,
    keeping: &Keeping,
    epoch: &str,
    from: u64,
    count: usize,
) -> Bytes {
    let (ttl, from, count) = (
        keeping.ttl_s.to_string(),
        from.to_string(),
        count.to_string(),
    );
    let budget = keeping.read_bytes.to_string();
    let sha = &*READ_SHA;
    resp::command(&[
        b"EVALSHA",
        sha.as_bytes(),
        b"2",
        &stream_key(prefix, channel),
        &meta_key(prefix, channel),
        epoch.as_bytes(),
        ttl.as_bytes(),
        from.as_bytes(),
        count.as_bytes(),
        budget.as_bytes(),
    ])
}

/// Why a read's reply could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// Redis answered with an error.
    Redis(String),
    /// Not the shape the read script returns.
    Malformed(&'static str),
}

/// Parses the read script's reply; entries larger than `max_payload` or
/// not in strictly increasing order are malformed. `Ok(None)`: the
/// channel has no history (a read that did not create one).
pub fn parse_read(reply: Reply, max_payload: usize) -> Result<Option<Snapshot>, ReadError> {
    if let Reply::Array(parts) = &reply {
        if let [Reply::BulkString(e), Reply::Integer(0)] = parts.as_slice() {
            if e.is_empty() {
                return Ok(None);
            }
        }
    }
    parse_snapshot(reply, max_payload).map(Some)
}

fn parse_snapshot(reply: Reply, max_payload: usize) -> Result<Snapshot, ReadError> {
    let bad = ReadError::Malformed;
    let parts = match reply {
        Reply::Array(parts) if parts.len() >= 2 && parts.len() % 2 == 0 => parts,
        Reply::Error(e) => return Err(ReadError::Redis(e.to_string())),
        _ => return Err(bad("not an even array of 2 or more")),
    };
    let mut it = parts.into_iter();
    let epoch = match it.next() {
        Some(Reply::BulkString(e)) if !e.is_empty() && e.len() <= envelope::MAX_EPOCH_LEN => {
            String::from_utf8(e.to_vec()).map_err(|_| bad("epoch not UTF-8"))?
        }
        _ => return Err(bad("epoch")),
    };
    let top = match it.next() {
        Some(Reply::Integer(t)) if t >= 0 => t as u64,
        _ => return Err(bad("top offset")),
    };
    let mut entries: Vec<Entry> = Vec::with_capacity(it.len() / 2);
    while let (Some(id), Some(raw)) = (it.next(), it.next()) {
        let e = parse_entry(id, raw, max_payload)?;
        if entries.last().is_some_and(|p| p.offset >= e.offset) || e.offset > top {
            return Err(bad("entries out of order"));
        }
        entries.push(e);
    }
    Ok(Snapshot {
        epoch,
        top,
        entries,
    })
}

/// An entry's id (`offset-0`) and stored envelope.
fn parse_entry(id: Reply, raw: Reply, max_payload: usize) -> Result<Entry, ReadError> {
    let bad = ReadError::Malformed;
    let (Reply::BulkString(id), Reply::BulkString(raw)) = (id, raw) else {
        return Err(bad("entry"));
    };
    let offset = std::str::from_utf8(&id)
        .ok()
        .and_then(|s| s.strip_suffix("-0"))
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&o| o > 0)
        .ok_or(bad("entry id"))?;
    let env = envelope::accept(raw, max_payload).map_err(|_| bad("entry payload"))?;
    Ok(Entry {
        offset,
        opcode: env.opcode,
        payload: env.payload,
        meta: env.meta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::envelope::Origin;
    use crate::redis::resp::{decode, Limits};
    use crate::ws::OpCode;
    use redis_protocol::resp2::types::Resp2Frame as _;

    fn args_of(cmd: &Bytes) -> Vec<Vec<u8>> {
        let mut buf = BytesMut::from(&cmd[..]);
        match decode(&mut buf, &Limits::default()).unwrap().unwrap() {
            Reply::Array(items) => items
                .iter()
                .map(|f| f.as_bytes().unwrap().to_vec())
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn commands_name_the_scripts_and_hash_tagged_keys() {
        let keeping = Keeping {
            size: 100,
            ttl_s: 300,
            read_bytes: 4096,
        };
        let origin = Origin {
            instance: 1,
            sender: 2,
        };
        let cmd = publish(
            (Pubsub::Plain, "cc:", "news"),
            (OpCode::Text, origin, b"hi", None),
            &keeping,
            "E1",
        );
        let args = args_of(&cmd);
        assert_eq!(args[0], b"EVALSHA");
        assert_eq!(args[1], sha(PUBLISH_SCRIPT).as_bytes());
        assert_eq!(args[1].len(), 40);
        assert_eq!(args[3], b"cc:!h{news}:s");
        assert_eq!(args[4], b"cc:!h{news}:m");
        assert_eq!(args[5], b"cc:news");
        assert_eq!(
            (&args[6][..], &args[7][..], &args[9][..]),
            (&b"100"[..], &b"300"[..], &b"E1"[..])
        );
        let env = envelope::decode(Bytes::from(args[8].clone()));
        assert_eq!((&env.payload[..], env.origin), (&b"hi"[..], Some(origin)));
        let r = args_of(&read("cc:", "news", &keeping, "E2", 11, 50));
        assert_eq!(r[1], sha(READ_SCRIPT).as_bytes());
        assert_eq!(&r[5..], [&b"E2"[..], b"300", b"11", b"50", b"4096"]);
        assert_ne!(sha(PUBLISH_SCRIPT), sha(READ_SCRIPT));
    }

    fn entry_reply(id: &str, payload: &[u8]) -> Vec<Reply> {
        let mut env = BytesMut::new();
        envelope::put_header(
            &mut env,
            OpCode::Binary,
            Origin {
                instance: 1,
                sender: 0,
            },
        );
        env.put_slice(payload);
        vec![
            Reply::BulkString(Bytes::copy_from_slice(id.as_bytes())),
            Reply::BulkString(env.freeze()),
        ]
    }

    fn read_reply(epoch: &str, top: i64, entries: Vec<Vec<Reply>>) -> Reply {
        let mut all = vec![
            Reply::BulkString(Bytes::copy_from_slice(epoch.as_bytes())),
            Reply::Integer(top),
        ];
        all.extend(entries.into_iter().flatten());
        Reply::Array(all)
    }

    #[test]
    fn read_replies_parse_and_bad_ones_are_refused() {
        let ok = read_reply(
            "E",
            5,
            vec![entry_reply("4-0", b"a"), entry_reply("5-0", b"\xff")],
        );
        let s = parse_read(ok, 10).unwrap().unwrap();
        assert_eq!((s.epoch.as_str(), s.top), ("E", 5));
        assert_eq!(
            s.entries.iter().map(|e| e.offset).collect::<Vec<_>>(),
            [4, 5]
        );
        assert_eq!(
            (s.entries[1].opcode, &s.entries[1].payload[..]),
            (OpCode::Binary, &b"\xff"[..])
        );
        let cases = [
            read_reply(
                "E",
                5,
                vec![entry_reply("5-0", b"a"), entry_reply("4-0", b"a")],
            ),
            read_reply("E", 3, vec![entry_reply("4-0", b"a")]),
            read_reply("E", 5, vec![entry_reply("4-1x", b"a")]),
            read_reply("E", 5, vec![entry_reply("4-0", &[0; 11])]),
            read_reply("", 5, vec![]),
            read_reply("E", -1, vec![]),
            Reply::Integer(1),
            Reply::Array(vec![
                Reply::BulkString(Bytes::from_static(b"E")),
                Reply::Integer(1),
                Reply::Integer(1),
            ]),
        ];
        for c in cases {
            assert!(
                matches!(parse_read(c.clone(), 10), Err(ReadError::Malformed(_))),
                "{c:?}"
            );
        }
        assert_eq!(
            parse_read(read_reply("", 0, vec![]), 10),
            Ok(None),
            "no history"
        );
        let noscript = Reply::Error("NOSCRIPT No matching script.".into());
        assert!(is_noscript(&noscript));
        assert!(matches!(parse_read(noscript, 10), Err(ReadError::Redis(_))));
    }
}
