//! What a consumer thread and the worker it publishes through say to
//! each other over their socket pair: a [`Request`] per row, a [`Reply`]
//! per request (by `seq`, possibly out of order), each a 4-byte
//! big-endian length and JSON. Bounded: a frame over the limit the reader
//! gives is an error that drops the pair.

use bytes::{Buf, BufMut, BytesMut};
use serde::{Deserialize, Serialize};

/// Bytes a frame may hold beyond the message itself (channel, tags, id).
pub const OVERHEAD: usize = 64 * 1024;

/// Publish this row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Matches the reply.
    pub seq: u64,
    pub channel: String,
    pub data: String,
    /// A JSON object of strings (checked by `row::check`).
    pub tags: Option<String>,
    /// The idempotency key (`CONSUMER:ROW_ID`).
    pub id: String,
}

/// What became of a request: the server API's status (`200` published,
/// `202` buffered, `4xx` refused, `5xx` not now) and its error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub seq: u64,
    pub status: u16,
    pub error: Option<String>,
}

impl Reply {
    /// Published, not just buffered: the row may go.
    pub fn accepted(&self) -> bool {
        self.status == 200
    }

    /// Refused for what the row is (a namespace's rule, a bad key):
    /// trying again cannot help.
    pub fn poison(&self) -> bool {
        (400..500).contains(&self.status) && self.status != 429
    }
}

/// Appends `msg` as one frame.
pub fn encode<T: Serialize>(msg: &T, out: &mut BytesMut) {
    let json = serde_json::to_vec(msg).expect("bridge messages serialize");
    out.put_u32(json.len() as u32);
    out.extend_from_slice(&json);
}

/// The next whole frame of `buf`, if one is there; an error for a frame
/// over `max` bytes or one that is not the expected JSON.
pub fn decode<T: for<'de> Deserialize<'de>>(
    buf: &mut BytesMut,
    max: usize,
) -> Result<Option<T>, String> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    if len > max {
        return Err(format!("a bridge frame of {len} bytes (limit {max})"));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    buf.advance(4);
    let frame = buf.split_to(len);
    serde_json::from_slice(&frame)
        .map(Some)
        .map_err(|e| format!("a bridge frame that is not a message: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_pieces_and_are_bounded() {
        let req = Request {
            seq: 7,
            channel: "orders".into(),
            data: "{\"a\":1}".into(),
            tags: Some("{\"k\":\"v\"}".into()),
            id: "orders:42".into(),
        };
        let mut wire = BytesMut::new();
        encode(&req, &mut wire);
        encode(&req, &mut wire);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(r) = decode::<Request>(&mut buf, 1024).unwrap() {
                got.push(r);
            }
        }
        assert_eq!(got, [req.clone(), req.clone()]);
        let mut big = BytesMut::new();
        encode(&req, &mut big);
        assert!(decode::<Request>(&mut big, 10).is_err());
        let mut junk = BytesMut::from(&b"\0\0\0\x02{}"[..]);
        assert!(decode::<Request>(&mut junk, 100).is_err());
        let r = |status| Reply {
            seq: 1,
            status,
            error: None,
        };
        assert!(r(200).accepted() && !r(202).accepted());
        assert!(r(403).poison() && r(400).poison() && !r(429).poison() && !r(503).poison());
    }
}
