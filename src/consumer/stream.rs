//! A Redis stream consumer's commands and replies, sans-I/O. Entries
//! carry the fields `channel`, `data`, and optionally `tags` (a JSON
//! object of strings) and `idempotency-key` (else `NAME:ENTRY-ID`). They
//! are read with a consumer group (`XREADGROUP`), acknowledged (`XACK`)
//! once published, and claimed from a consumer that died before its
//! acknowledgement (`XAUTOCLAIM`); poison goes to a dead-letter stream.

use bytes::Bytes;
use redis_protocol::resp2::types::BytesFrame;

use crate::redis::resp;

/// Most entries a dead-letter stream keeps (`MAXLEN ~`).
pub const DEAD_LETTER_MAX: &str = "100000";

/// One stream entry: its id and its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub fields: Vec<(Bytes, Bytes)>,
}

impl Entry {
    /// A field's value as text (`None`: absent or not UTF-8).
    pub fn text(&self, name: &str) -> Option<&str> {
        let (_, v) = self
            .fields
            .iter()
            .find(|(k, _)| &k[..] == name.as_bytes())?;
        std::str::from_utf8(v).ok()
    }

    /// Whether the field is there (UTF-8 or not).
    pub fn has(&self, name: &str) -> bool {
        self.fields.iter().any(|(k, _)| &k[..] == name.as_bytes())
    }
}

/// `XGROUP CREATE stream group 0 MKSTREAM`: the group reads the stream
/// from its start (entries written before the first consumer came are
/// published too). `BUSYGROUP` (it exists) is fine.
pub fn create_group(stream: &str, group: &str) -> Bytes {
    resp::command(&[
        b"XGROUP",
        b"CREATE",
        stream.as_bytes(),
        group.as_bytes(),
        b"0",
        b"MKSTREAM",
    ])
}

/// `XREADGROUP`: new entries (`>`, blocking up to `block_ms`), or this
/// consumer's own pending ones (`0`, not blocking: after a retry).
pub fn read(stream: &str, group: &str, me: &str, count: usize, block_ms: Option<u64>) -> Bytes {
    let count = count.to_string();
    let block = block_ms.map(|b| b.to_string());
    let mut args: Vec<&[u8]> = vec![b"XREADGROUP", b"GROUP", group.as_bytes(), me.as_bytes()];
    args.extend([&b"COUNT"[..], count.as_bytes()]);
    if let Some(b) = &block {
        args.extend([&b"BLOCK"[..], b.as_bytes()]);
    }
    let from: &[u8] = if block_ms.is_some() { b">" } else { b"0" };
    args.extend([&b"STREAMS"[..], stream.as_bytes(), from]);
    resp::command(&args)
}

/// `XAUTOCLAIM stream group me min_idle start COUNT n`.
pub fn autoclaim(
    stream: &str,
    group: &str,
    me: &str,
    min_idle_ms: u64,
    start: &str,
    count: usize,
) -> Bytes {
    let (idle, count) = (min_idle_ms.to_string(), count.to_string());
    resp::command(&[
        b"XAUTOCLAIM",
        stream.as_bytes(),
        group.as_bytes(),
        me.as_bytes(),
        idle.as_bytes(),
        start.as_bytes(),
        b"COUNT",
        count.as_bytes(),
    ])
}

/// `XACK stream group id…`.
pub fn ack(stream: &str, group: &str, ids: &[String]) -> Bytes {
    let mut args: Vec<&[u8]> = vec![b"XACK", stream.as_bytes(), group.as_bytes()];
    args.extend(ids.iter().map(|i| i.as_bytes()));
    resp::command(&args)
}

/// `XADD dead MAXLEN ~ N * id … reason …` plus the entry's fields.
pub fn dead_letter(dead: &str, e: &Entry, reason: &str) -> Bytes {
    let mut args: Vec<&[u8]> = vec![b"XADD", dead.as_bytes(), b"MAXLEN", b"~"];
    args.extend([DEAD_LETTER_MAX.as_bytes(), b"*", b"id", e.id.as_bytes()]);
    args.extend([&b"reason"[..], reason.as_bytes()]);
    for (k, v) in &e.fields {
        args.extend([&k[..], &v[..]]);
    }
    resp::command(&args)
}

/// `XREADGROUP`'s reply: `nil` (nothing in time) or
/// `[[stream, [[id, [field, value, …]], …]]]`.
pub fn read_reply(reply: &BytesFrame) -> Result<Vec<Entry>, String> {
    match reply {
        BytesFrame::Null => Ok(Vec::new()),
        BytesFrame::Array(streams) => match streams.first() {
            None => Ok(Vec::new()),
            Some(BytesFrame::Array(s)) if s.len() == 2 => entries(&s[1]),
            _ => Err("an XREADGROUP reply that is not [[stream, entries]]".into()),
        },
        BytesFrame::Error(e) => Err(e.to_string()),
        _ => Err("an XREADGROUP reply that is not an array".into()),
    }
}

/// `XAUTOCLAIM`'s reply: the cursor to go on from, the entries claimed,
/// and (Redis 7) the ids no longer in the stream.
pub fn autoclaim_reply(reply: &BytesFrame) -> Result<(String, Vec<Entry>, Vec<String>), String> {
    let BytesFrame::Array(parts) = reply else {
        return Err(match reply {
            BytesFrame::Error(e) => e.to_string(),
            _ => "an XAUTOCLAIM reply that is not an array".into(),
        });
    };
    let cursor = parts
        .first()
        .and_then(text)
        .ok_or("XAUTOCLAIM: no cursor")?;
    let claimed = entries(parts.get(1).ok_or("XAUTOCLAIM: no entries")?)?;
    let deleted = match parts.get(2) {
        Some(BytesFrame::Array(ids)) => ids.iter().filter_map(text).collect(),
        _ => Vec::new(),
    };
    Ok((cursor, claimed, deleted))
}

fn text(f: &BytesFrame) -> Option<String> {
    match f {
        BytesFrame::BulkString(b) | BytesFrame::SimpleString(b) => {
            std::str::from_utf8(b).ok().map(str::to_string)
        }
        _ => None,
    }
}

fn entries(f: &BytesFrame) -> Result<Vec<Entry>, String> {
    let BytesFrame::Array(list) = f else {
        return Err("stream entries that are not an array".into());
    };
    let mut out = Vec::with_capacity(list.len());
    for e in list {
        let BytesFrame::Array(pair) = e else {
            return Err("a stream entry that is not [id, fields]".into());
        };
        let id = pair
            .first()
            .and_then(text)
            .ok_or("a stream entry without an id")?;
        let mut fields = Vec::new();
        // A deleted entry still pending comes as [id, nil]: no fields.
        if let Some(BytesFrame::Array(kv)) = pair.get(1) {
            for chunk in kv.chunks(2) {
                if let [BytesFrame::BulkString(k), BytesFrame::BulkString(v)] = chunk {
                    fields.push((k.clone(), v.clone()));
                }
            }
        }
        out.push(Entry { id, fields });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> BytesFrame {
        BytesFrame::BulkString(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn entry(id: &str, kv: &[&str]) -> BytesFrame {
        BytesFrame::Array(vec![
            bulk(id),
            BytesFrame::Array(kv.iter().map(|s| bulk(s)).collect()),
        ])
    }

    #[test]
    fn replies_are_read_into_entries() {
        let reply = BytesFrame::Array(vec![BytesFrame::Array(vec![
            bulk("outbox"),
            BytesFrame::Array(vec![
                entry("1-0", &["channel", "orders", "data", "{}"]),
                entry(
                    "2-0",
                    &["channel", "q", "data", "1", "tags", "{\"a\":\"b\"}"],
                ),
            ]),
        ])]);
        let got = read_reply(&reply).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[1].id.as_str(), got[1].text("tags")),
            ("2-0", Some("{\"a\":\"b\"}"))
        );
        assert_eq!(got[0].text("tags"), None);
        assert_eq!(read_reply(&BytesFrame::Null).unwrap(), []);
        assert!(read_reply(&BytesFrame::Integer(1)).is_err());
        let claim = BytesFrame::Array(vec![
            bulk("0-0"),
            BytesFrame::Array(vec![entry("3-0", &["channel", "c", "data", "x"])]),
            BytesFrame::Array(vec![bulk("4-0")]),
        ]);
        let (cursor, claimed, deleted) = autoclaim_reply(&claim).unwrap();
        assert_eq!(
            (cursor.as_str(), claimed[0].id.as_str(), deleted),
            ("0-0", "3-0", vec!["4-0".to_string()])
        );
        let cmd = read("s", "g", "me", 10, Some(500));
        assert_eq!(
            &cmd[..],
            &b"*11\r\n$10\r\nXREADGROUP\r\n$5\r\nGROUP\r\n$1\r\ng\r\n$2\r\nme\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n$5\r\nBLOCK\r\n$3\r\n500\r\n$7\r\nSTREAMS\r\n$1\r\ns\r\n$1\r\n>\r\n"[..],
            "ends with >"
        );
    }
}
