//! How a corecast message travels through Redis.
//!
//! `0xCC 0x01 opcode instance(8, BE) sender(8, BE) payload…`: a 19-byte
//! header carrying the frame type (text or binary) and the origin, so that
//! `--exclude-sender` holds across the Redis hop. A message without the
//! magic (published by another application with a plain `PUBLISH`) is
//! delivered as text when it is UTF-8, else as binary.
//!
//! A message with tags or a key uses `0xCC 0x03` and the same fields,
//! then the length (2 bytes, BE) of their JSON text (`Meta::wire`) and
//! the text, then the payload. A meta that does not parse (or breaks its
//! bounds) makes the message rejected, never delivered without it: a
//! filter must not be passed by a message whose tags were lost.
//!
//! With history, the publish script (`redis::stream`) wraps that in a
//! second envelope carrying the position Redis assigned:
//! `0xCC 0x02 offset(ASCII decimal) ' ' epoch ' '` followed by the first
//! envelope, as stored in the channel's stream.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::meta::Meta;
use crate::ws::OpCode;

const MAGIC: [u8; 2] = [0xCC, 0x01];
const MAGIC_AT: [u8; 2] = [0xCC, 0x02];
const MAGIC_TAGGED: [u8; 2] = [0xCC, 0x03];
/// Longest epoch accepted in a positioned envelope.
pub const MAX_EPOCH_LEN: usize = 64;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 19;

/// Where a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The publishing instance.
    pub instance: u64,
    /// The publishing connection's serial on that instance (0 = HTTP).
    pub sender: u64,
}

/// A message decoded from Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Text or binary.
    pub opcode: OpCode,
    /// Origin, when published by corecast.
    pub origin: Option<Origin>,
    /// The message bytes (a view into the read buffer).
    pub payload: Bytes,
    /// Its position in the channel's history, when history is on.
    pub at: Option<StreamPos>,
    /// Its tags and key, if it carries any.
    pub meta: Option<Arc<Meta>>,
    /// A tagged envelope whose meta is malformed ([`accept`] rejects it).
    pub bad_meta: bool,
}

/// A position Redis assigned to a message (history on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPos {
    /// The channel's epoch (ASCII, at most [`MAX_EPOCH_LEN`] bytes).
    pub epoch: Bytes,
    /// The message's offset (from 1).
    pub offset: u64,
}

/// Splits `CC 02 offset ' ' epoch ' '` off a positioned envelope; `None`
/// when `raw` is not one (or is malformed: then it is foreign bytes).
fn split_position(raw: &Bytes) -> Option<(StreamPos, Bytes)> {
    if raw.len() < 2 || raw[..2] != MAGIC_AT {
        return None;
    }
    let rest = &raw[2..];
    let sp1 = rest.iter().take(21).position(|&b| b == b' ')?;
    let offset: u64 = std::str::from_utf8(&rest[..sp1]).ok()?.parse().ok()?;
    let after = &rest[sp1 + 1..];
    let sp2 = after
        .iter()
        .take(MAX_EPOCH_LEN + 1)
        .position(|&b| b == b' ')?;
    let epoch = &after[..sp2];
    if offset == 0 || epoch.is_empty() || !epoch.iter().all(u8::is_ascii_graphic) {
        return None;
    }
    let start = 2 + sp1 + 1;
    let epoch = raw.slice(start..start + sp2);
    let inner = raw.slice(start + sp2 + 1..);
    Some((StreamPos { epoch, offset }, inner))
}

/// Writes the header for `opcode` from `origin`.
pub fn put_header(out: &mut BytesMut, opcode: OpCode, origin: Origin) {
    put_head(out, (opcode, origin), None);
}

/// Bytes before the payload of a message with `meta` (its wire text).
pub fn head_len(meta: Option<&str>) -> usize {
    meta.map_or(HEADER_LEN, |t| HEADER_LEN + 2 + t.len())
}

/// Writes the header for `opcode` from `origin`, with `meta` (its wire
/// text: tags of at most [`crate::filter::MAX_TAG_BYTES`] and a key of
/// [`crate::meta::MAX_KEY`], plus quoting: far under the 2-byte length)
/// when it has one.
pub fn put_head(out: &mut BytesMut, (opcode, origin): (OpCode, Origin), meta: Option<&str>) {
    out.put_slice(if meta.is_some() {
        &MAGIC_TAGGED
    } else {
        &MAGIC
    });
    out.put_u8(opcode as u8);
    out.put_u64(origin.instance);
    out.put_u64(origin.sender);
    if let Some(t) = meta {
        out.put_u16(t.len() as u16);
        out.put_slice(t.as_bytes());
    }
}

/// Decodes a message received from Redis.
pub fn decode(raw: Bytes) -> Envelope {
    match split_position(&raw) {
        Some((at, inner)) => Envelope {
            at: Some(at),
            ..decode_plain(inner)
        },
        None => decode_plain(raw),
    }
}

fn decode_plain(mut raw: Bytes) -> Envelope {
    let magic = raw.get(..2);
    let tagged = magic == Some(&MAGIC_TAGGED[..]);
    let ours = raw.len() >= HEADER_LEN && (magic == Some(&MAGIC[..]) || tagged);
    let opcode = if ours { OpCode::from_u8(raw[2]) } else { None };
    match opcode {
        Some(op @ (OpCode::Text | OpCode::Binary)) => {
            let header = raw.split_to(HEADER_LEN);
            let instance = u64::from_be_bytes(header[3..11].try_into().expect("8 bytes"));
            let sender = u64::from_be_bytes(header[11..19].try_into().expect("8 bytes"));
            let (meta, bad_meta) = match tagged {
                true => match split_meta(&mut raw) {
                    Some(m) => (Some(Arc::new(m)), false),
                    None => (None, true),
                },
                false => (None, false),
            };
            Envelope {
                opcode: op,
                origin: Some(Origin { instance, sender }),
                payload: raw,
                at: None,
                meta,
                bad_meta,
            }
        }
        _ => {
            let opcode = if std::str::from_utf8(&raw).is_ok() {
                OpCode::Text
            } else {
                OpCode::Binary
            };
            Envelope {
                opcode,
                origin: None,
                payload: raw,
                at: None,
                meta: None,
                bad_meta: false,
            }
        }
    }
}

/// Takes a tagged envelope's meta off the front of `rest`; `None` when
/// it is cut short or does not parse within its bounds.
fn split_meta(rest: &mut Bytes) -> Option<Meta> {
    let len = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
    let text = rest.get(2..2 + len)?;
    let meta = Meta::from_wire(text).ok()?;
    let _ = rest.split_to(2 + len);
    Some(meta)
}

/// Why a message from Redis is not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The payload is over `--max-message-size` (a WebSocket client could
    /// not have published it through us).
    TooLarge {
        /// Payload bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A corecast text envelope whose payload is not UTF-8: delivered, it
    /// would make every subscriber's client close with 1007.
    InvalidUtf8,
    /// A channel outside our prefix, or not UTF-8.
    UnknownChannel,
    /// A tagged envelope whose tags or key are malformed.
    BadMeta,
}

impl Rejected {
    /// A short reason for the log line.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejected::TooLarge { .. } => "message over --max-message-size",
            Rejected::InvalidUtf8 => "text message is not UTF-8",
            Rejected::UnknownChannel => "message on a channel we do not serve",
            Rejected::BadMeta => "message with malformed tags or key",
        }
    }
}

/// Decodes a message received from Redis and checks it may be delivered:
/// its payload at most `max_payload` bytes, and UTF-8 when it is text.
pub fn accept(raw: Bytes, max_payload: usize) -> Result<Envelope, Rejected> {
    let env = decode(raw);
    if env.bad_meta {
        return Err(Rejected::BadMeta);
    }
    if env.payload.len() > max_payload {
        return Err(Rejected::TooLarge {
            size: env.payload.len(),
            max: max_payload,
        });
    }
    // Foreign messages are already text only when UTF-8; ours claim it.
    if env.opcode == OpCode::Text
        && env.origin.is_some()
        && std::str::from_utf8(&env.payload).is_err()
    {
        return Err(Rejected::InvalidUtf8);
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_and_invalid_text_envelopes_are_rejected() {
        let origin = Origin {
            instance: 1,
            sender: 2,
        };
        let with = |op, payload: &[u8]| {
            let mut b = BytesMut::new();
            put_header(&mut b, op, origin);
            b.put_slice(payload);
            b.freeze()
        };
        assert_eq!(
            accept(with(OpCode::Text, b"\xff\xfe"), 100),
            Err(Rejected::InvalidUtf8)
        );
        assert!(accept(with(OpCode::Binary, b"\xff\xfe"), 100).is_ok());
        assert!(accept(with(OpCode::Text, "h\u{e9}".as_bytes()), 100).is_ok());
        assert_eq!(
            accept(with(OpCode::Binary, &[0; 101]), 100),
            Err(Rejected::TooLarge {
                size: 101,
                max: 100
            })
        );
        assert!(accept(with(OpCode::Binary, &[0; 100]), 100).is_ok());
        // Foreign bytes: the limit applies, non-UTF-8 becomes binary.
        assert!(accept(Bytes::from(vec![b'a'; 101]), 100).is_err());
        assert_eq!(
            accept(Bytes::from_static(b"\xff"), 100).unwrap().opcode,
            OpCode::Binary
        );
    }

    #[test]
    fn round_trip_and_foreign_messages() {
        let origin = Origin {
            instance: 0xDEAD_BEEF,
            sender: 42,
        };
        let mut b = BytesMut::new();
        put_header(&mut b, OpCode::Binary, origin);
        b.put_slice(b"\x00\xff");
        let e = decode(b.freeze());
        assert_eq!(e.opcode, OpCode::Binary);
        assert_eq!(e.origin, Some(origin));
        assert_eq!(&e.payload[..], b"\x00\xff");
        let plain = decode(Bytes::from_static(b"hello from redis-cli"));
        assert_eq!((plain.opcode, plain.origin), (OpCode::Text, None));
        assert_eq!(
            decode(Bytes::from_static(b"\xff\xfe")).opcode,
            OpCode::Binary
        );
        // Positioned: offset and epoch, then the plain envelope.
        let mut p = BytesMut::from(&b"\xcc\x0242 ep0ch "[..]);
        put_header(&mut p, OpCode::Text, origin);
        p.put_slice(b"hi");
        let e = decode(p.freeze());
        let at = e.at.clone().unwrap();
        assert_eq!((&at.epoch[..], at.offset), (&b"ep0ch"[..], 42));
        assert_eq!((e.opcode, &e.payload[..]), (OpCode::Text, &b"hi"[..]));
        for bad in [
            &b"\xcc\x020 e x"[..],
            b"\xcc\x02x e x",
            b"\xcc\x021  x",
            b"\xcc\x021 e",
        ] {
            assert_eq!(decode(Bytes::copy_from_slice(bad)).at, None, "{bad:?}");
        }
        // A truncated header is foreign bytes, not a panic.
        assert_eq!(decode(Bytes::from_static(b"\xcc\x01\x01")).origin, None);
    }

    #[test]
    fn meta_travels_and_a_malformed_one_is_rejected_not_dropped() {
        let origin = Origin {
            instance: 3,
            sender: 4,
        };
        let tagged = |meta: &str, payload: &[u8]| {
            let mut b = BytesMut::new();
            put_head(&mut b, (OpCode::Text, origin), Some(meta));
            b.put_slice(payload);
            b.freeze()
        };
        let wire = r#"{"key":"k1","tags":{"a":"1","b":"x"}}"#;
        let raw = tagged(wire, b"hi");
        assert_eq!(raw.len(), head_len(Some(wire)) + 2);
        let e = accept(raw.clone(), 100).unwrap();
        assert_eq!(
            (e.opcode, e.origin, &e.payload[..]),
            (OpCode::Text, Some(origin), &b"hi"[..])
        );
        let m = e.meta.unwrap();
        assert_eq!(
            (m.tags().unwrap().get("b"), m.key()),
            (Some("x"), Some("k1"))
        );
        // Positioned (history): the meta survives the second envelope.
        let mut p = BytesMut::from(&b"\xcc\x027 ep "[..]);
        p.put_slice(&raw);
        let e = accept(p.freeze(), 100).unwrap();
        assert_eq!(e.at.unwrap().offset, 7);
        assert_eq!(e.meta.unwrap().wire(), wire);
        // A meta that does not parse, or a length past the end: rejected.
        for bad in [
            tagged("{not json", b"x"),
            tagged(r#"{"tags":{"a":1}}"#, b"x"),
        ] {
            assert_eq!(accept(bad, 100), Err(Rejected::BadMeta));
        }
        let cut = tagged(wire, b"").slice(..HEADER_LEN + 4);
        assert_eq!(accept(cut, 100), Err(Rejected::BadMeta));
        // Plain messages are as before.
        let mut b = BytesMut::new();
        put_head(&mut b, (OpCode::Binary, origin), None);
        assert_eq!(b.len(), HEADER_LEN);
        assert_eq!(decode(b.freeze()).meta, None);
    }
}
