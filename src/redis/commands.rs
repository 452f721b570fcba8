//! The commands corecast sends to Redis, encoded without the network:
//! `PUBLISH` with its envelope, `SUBSCRIBE`/`UNSUBSCRIBE` in bounded
//! groups, and the connection handshake (`AUTH`, `SELECT`). Pure
//! functions over byte buffers, so they are unit-tested and fuzzed.

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};

use super::envelope::{self, Origin};
use super::resp;
use super::url::RedisUrl;
use crate::ws::OpCode;

/// Channels per `SUBSCRIBE`/`UNSUBSCRIBE` command: Redis accepts more, but
/// a bounded command keeps one restore from building a huge buffer.
pub const SUBSCRIBE_CHUNK: usize = 1000;

/// Plain pub/sub (one Redis: `PUBLISH`, `SUBSCRIBE`) or sharded pub/sub
/// (Redis Cluster: `SPUBLISH`, `SSUBSCRIBE`, the channel routed like a key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pubsub {
    /// `PUBLISH`/`SUBSCRIBE`/`UNSUBSCRIBE` on `prefix + channel`.
    Plain,
    /// `SPUBLISH`/`SSUBSCRIBE`/`SUNSUBSCRIBE` on `prefix{channel}`: the
    /// channel name is the hash tag, as in the history keys, so a
    /// channel's keys and its sharded channel live in one slot.
    Sharded,
}

/// A message to publish: frame type, origin, bytes, and its tags' JSON
/// text if it has any.
pub type Outgoing<'a> = (OpCode, Origin, &'a [u8], Option<&'a str>);

/// `PUBLISH prefix+channel envelope`, encoded into one buffer of exact
/// size: the payload is copied once, not once per RESP layer.
pub fn publish(
    prefix: &str,
    channel: &str,
    opcode: OpCode,
    origin: Origin,
    payload: &[u8],
) -> Bytes {
    publish_as(
        Pubsub::Plain,
        prefix,
        channel,
        (opcode, origin, payload, None),
    )
}

/// [`publish`] in either mode (`SPUBLISH prefix{channel} envelope`).
pub fn publish_as(
    mode: Pubsub,
    prefix: &str,
    channel: &str,
    (opcode, origin, payload, tags): Outgoing<'_>,
) -> Bytes {
    let key = channel_key_as(mode, prefix, channel);
    let key_len = key.len();
    let val_len = envelope::head_len(tags) + payload.len();
    let mut out = BytesMut::with_capacity(64 + key_len + val_len);
    // `write!` into the buffer itself: no intermediate String.
    match mode {
        Pubsub::Plain => out.put_slice(b"*3\r\n$7\r\nPUBLISH\r\n"),
        Pubsub::Sharded => out.put_slice(b"*3\r\n$8\r\nSPUBLISH\r\n"),
    }
    let _ = write!(out, "${key_len}\r\n");
    out.put_slice(&key);
    let _ = write!(out, "\r\n${val_len}\r\n");
    envelope::put_head(&mut out, (opcode, origin), tags);
    out.put_slice(payload);
    out.put_slice(b"\r\n");
    out.freeze()
}

/// Whether a (un)subscribe adds or removes interest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// `SUBSCRIBE`.
    Gained,
    /// `UNSUBSCRIBE`.
    Lost,
}

/// Appends `SUBSCRIBE`/`UNSUBSCRIBE` commands for `keys` to `out`, at most
/// [`SUBSCRIBE_CHUNK`] keys per command; returns the number of commands.
pub fn subscribe<K: AsRef<[u8]>>(interest: Interest, keys: &[K], out: &mut BytesMut) -> usize {
    subscribe_as(Pubsub::Plain, interest, keys, out)
}

/// [`subscribe`] in either mode. Sharded: the caller groups `keys` by
/// slot (Redis refuses a command whose channels span slots: CROSSSLOT).
pub fn subscribe_as<K: AsRef<[u8]>>(
    mode: Pubsub,
    interest: Interest,
    keys: &[K],
    out: &mut BytesMut,
) -> usize {
    let verb: &[u8] = match (mode, interest) {
        (Pubsub::Plain, Interest::Gained) => b"SUBSCRIBE",
        (Pubsub::Plain, Interest::Lost) => b"UNSUBSCRIBE",
        (Pubsub::Sharded, Interest::Gained) => b"SSUBSCRIBE",
        (Pubsub::Sharded, Interest::Lost) => b"SUNSUBSCRIBE",
    };
    let mut args: Vec<&[u8]> = Vec::with_capacity(keys.len().min(SUBSCRIBE_CHUNK) + 1);
    let mut commands = 0;
    for chunk in keys.chunks(SUBSCRIBE_CHUNK) {
        args.clear();
        args.push(verb);
        args.extend(chunk.iter().map(AsRef::as_ref));
        resp::encode_command(&args, out);
        commands += 1;
    }
    commands
}

/// The Redis channel of a corecast channel: `prefix + channel`.
pub fn channel_key(prefix: &str, channel: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + channel.len());
    k.extend_from_slice(prefix.as_bytes());
    k.extend_from_slice(channel.as_bytes());
    k
}

/// The Redis channel of a corecast channel in either mode:
/// `prefix + channel` or `prefix{channel}`.
pub fn channel_key_as(mode: Pubsub, prefix: &str, channel: &str) -> Vec<u8> {
    match mode {
        Pubsub::Plain => channel_key(prefix, channel),
        Pubsub::Sharded => format!("{prefix}{{{channel}}}").into_bytes(),
    }
}

/// The commands that open a connection: `AUTH` when the URL has a
/// password, then (with `select`) `SELECT` when it names a database. Each
/// is answered with `+OK` or an error.
pub fn handshake(url: &RedisUrl, select: bool) -> Vec<Bytes> {
    let mut cmds = Vec::new();
    if let Some(pass) = &url.password {
        cmds.push(match &url.username {
            Some(user) => resp::command(&[b"AUTH", user.as_bytes(), pass.as_bytes()]),
            None => resp::command(&[b"AUTH", pass.as_bytes()]),
        });
    }
    if select && url.db != 0 {
        let db = url.db.to_string();
        cmds.push(resp::command(&[b"SELECT", db.as_bytes()]));
    }
    cmds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::resp::{decode, Limits, Reply};
    use redis_protocol::resp2::types::Resp2Frame as _;

    fn args_of(buf: &mut BytesMut) -> Vec<Vec<u8>> {
        match decode(buf, &Limits::default()).unwrap().unwrap() {
            Reply::Array(items) => items
                .into_iter()
                .map(|f| f.as_bytes().unwrap().to_vec())
                .collect(),
            other => panic!("not an array: {other:?}"),
        }
    }

    #[test]
    fn publish_is_a_well_formed_command_carrying_the_envelope() {
        let origin = Origin {
            instance: 7,
            sender: 9,
        };
        let cmd = publish("cc:", "news", OpCode::Binary, origin, b"\x00\x01");
        let mut buf = BytesMut::from(&cmd[..]);
        let args = args_of(&mut buf);
        assert!(buf.is_empty(), "exactly one command");
        assert_eq!(args[0], b"PUBLISH");
        assert_eq!(args[1], b"cc:news");
        let env = envelope::decode(Bytes::from(args[2].clone()));
        assert_eq!(env.opcode, OpCode::Binary);
        assert_eq!(env.origin, Some(origin));
        assert_eq!(&env.payload[..], b"\x00\x01");
    }

    #[test]
    fn sharded_publish_shares_the_slot_of_the_history_keys() {
        let origin = Origin {
            instance: 1,
            sender: 2,
        };
        let cmd = publish_as(
            Pubsub::Sharded,
            "cc:",
            "a}b",
            (OpCode::Text, origin, b"x", None),
        );
        let mut buf = BytesMut::from(&cmd[..]);
        let args = args_of(&mut buf);
        assert_eq!(args[0], b"SPUBLISH");
        assert_eq!(args[1], b"cc:{a}b}");
        use crate::redis::cluster::slot;
        for ch in ["news", "a}b", "{x}", "a{b}c"] {
            let key = channel_key_as(Pubsub::Sharded, "cc:", ch);
            assert_eq!(
                slot(&key),
                slot(&crate::redis::stream::stream_key("cc:", ch))
            );
        }
        let mut out = BytesMut::new();
        subscribe_as(Pubsub::Sharded, Interest::Lost, &[b"k"], &mut out);
        assert_eq!(args_of(&mut out)[0], b"SUNSUBSCRIBE");
    }

    #[test]
    fn subscribes_are_grouped_in_bounded_commands() {
        let keys: Vec<Vec<u8>> = (0..2500).map(|i| format!("k{i}").into_bytes()).collect();
        let mut out = BytesMut::new();
        assert_eq!(subscribe(Interest::Gained, &keys, &mut out), 3);
        let sizes: Vec<usize> = (0..3).map(|_| args_of(&mut out).len()).collect();
        assert_eq!(sizes, [1001, 1001, 501]);
        assert!(out.is_empty());
        assert_eq!(subscribe::<Vec<u8>>(Interest::Lost, &[], &mut out), 0);
    }

    #[test]
    fn the_handshake_follows_the_url() {
        let url: RedisUrl = "redis://u:p@h:1/3".parse().unwrap();
        let cmds = handshake(&url, true);
        assert_eq!(cmds.len(), 2);
        let mut a = BytesMut::from(&cmds[0][..]);
        assert_eq!(args_of(&mut a), [&b"AUTH"[..], b"u", b"p"]);
        let mut s = BytesMut::from(&cmds[1][..]);
        assert_eq!(args_of(&mut s), [&b"SELECT"[..], b"3"]);
        assert_eq!(handshake(&url, false).len(), 1, "subscribers do not SELECT");
        let plain: RedisUrl = "redis://h:1".parse().unwrap();
        assert!(handshake(&plain, true).is_empty());
    }
}
