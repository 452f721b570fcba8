//! The generator's protocol code, sans-I/O: splitting a read buffer into
//! server frames without copying, masking keys, and the HTTP/1.1 publish
//! request and response.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use corecast::pusher::sign::signed_query;
use corecast::ws::deflate::RSV1;
use corecast::ws::{FrameHeader, OpCode, ProtocolError};

use crate::args::PusherApp;

/// A complete frame borrowed from the read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A final text or binary frame.
    Data(OpCode, &'a [u8]),
    /// A final text or binary frame compressed with permessage-deflate
    /// (RSV1; only after the generator offered it).
    Deflated(OpCode, &'a [u8]),
    /// A ping, owed a pong with the same payload.
    Ping(&'a [u8]),
    /// A pong.
    Pong(&'a [u8]),
    /// A close frame (payload: code and reason).
    Close(&'a [u8]),
}

/// Server frames the generator cannot take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The header breaks RFC 6455.
    Protocol(ProtocolError),
    /// "A server MUST NOT mask any frames that it sends to the client" (5.1).
    MaskedServerFrame,
    /// A fragmented message: the benchmark server never fragments, and
    /// reassembly would cost the hot path a copy.
    Fragmented,
    /// A frame larger than the read buffer can hold.
    FrameTooLarge(u64),
    /// A Server-Sent Events chunk whose size line is not hex.
    BadChunk,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Protocol(e) => write!(f, "protocol error: {e}"),
            Self::MaskedServerFrame => f.write_str("server sent a masked frame"),
            Self::Fragmented => f.write_str("server sent a fragmented message"),
            Self::FrameTooLarge(n) => write!(f, "frame of {n} bytes exceeds the read buffer"),
            Self::BadChunk => write!(f, "an event-stream chunk size that is not hex"),
        }
    }
}

impl std::error::Error for WireError {}

/// Hands every complete frame at the front of `buf` to `on_frame` and
/// returns how many bytes they took; the rest (a partial frame) is for the
/// next read. `max_frame` bounds a frame's total size so that a partial
/// frame always fits the caller's buffer.
#[inline]
pub fn split_frames(
    buf: &[u8],
    max_frame: usize,
    mut on_frame: impl FnMut(Frame<'_>),
) -> Result<usize, WireError> {
    let mut at = 0usize;
    while let Some(rest) = buf.get(at..) {
        let parsed = FrameHeader::parse_allowing(rest, RSV1).map_err(WireError::Protocol)?;
        let Some((h, head_len)) = parsed else {
            break;
        };
        let total = usize::try_from(h.payload_len)
            .ok()
            .and_then(|p| p.checked_add(head_len))
            .filter(|&t| t <= max_frame)
            .ok_or(WireError::FrameTooLarge(h.payload_len))?;
        let Some(payload) = rest.get(head_len..total) else {
            break;
        };
        on_frame(classify(&h, payload)?);
        at += total;
    }
    Ok(at)
}

/// One Server-Sent Events chunk as the benchmark reads it (corecast
/// sends one event per chunk: `crate::sse` in corecast).
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A `message` event: its message as published (a text payload of
    /// the hex stamp, which needs no JSON unescaping).
    Data(&'a [u8]),
    /// The `subscribed` event: the stream is subscribed.
    Subscribed,
    /// Anything else (a heartbeat comment, a `gap`).
    Other,
    /// The last chunk: the stream ended.
    End,
}

/// Hands every complete chunk at the front of `buf` to `on_event` (as
/// [`split_frames`] does frames); returns the bytes they took.
pub fn split_events(
    buf: &[u8],
    max_chunk: usize,
    mut on_event: impl FnMut(Event<'_>),
) -> Result<usize, WireError> {
    let mut at = 0usize;
    while let Some(rest) = buf.get(at..) {
        let Some(line) = rest.windows(2).position(|w| w == b"\r\n") else {
            break;
        };
        let size = std::str::from_utf8(&rest[..line]).ok();
        let size = size.and_then(|s| usize::from_str_radix(s, 16).ok());
        let size = size.ok_or(WireError::BadChunk)?;
        let total = line + 2 + size + 2;
        if total > max_chunk {
            return Err(WireError::FrameTooLarge(total as u64));
        }
        let Some(body) = rest.get(line + 2..total - 2) else {
            break;
        };
        on_event(if size == 0 {
            Event::End
        } else {
            classify_event(body)
        });
        at += total;
    }
    Ok(at)
}

/// A chunk's event: `message` with its `"data":"..."` string, or another.
fn classify_event(body: &[u8]) -> Event<'_> {
    let has = |needle: &[u8]| body.windows(needle.len()).position(|w| w == needle);
    if has(b"event: subscribed\n").is_some() {
        return Event::Subscribed;
    }
    if has(b"event: message\n").is_none() {
        return Event::Other;
    }
    const KEY: &[u8] = b"\"data\":\"";
    let Some(start) = has(KEY).map(|i| i + KEY.len()) else {
        return Event::Other;
    };
    let rest = &body[start..];
    match rest.iter().position(|&b| b == b'"') {
        Some(end) => Event::Data(&rest[..end]),
        None => Event::Other,
    }
}

fn classify<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, WireError> {
    if h.mask.is_some() {
        return Err(WireError::MaskedServerFrame);
    }
    Ok(match h.opcode {
        OpCode::Text | OpCode::Binary if h.fin && h.rsv & RSV1 != 0 => {
            Frame::Deflated(h.opcode, payload)
        }
        OpCode::Text | OpCode::Binary if h.fin => Frame::Data(h.opcode, payload),
        OpCode::Text | OpCode::Binary | OpCode::Continuation => return Err(WireError::Fragmented),
        OpCode::Ping => Frame::Ping(payload),
        OpCode::Pong => Frame::Pong(payload),
        OpCode::Close => Frame::Close(payload),
    })
}

/// A fast, non-cryptographic generator (xorshift64*) for masking keys and
/// handshake nonces. RFC 6455 wants masks an intermediary cannot predict;
/// the generator talks to a server on the same host, and a CSPRNG per
/// frame would be measurable in its own CPU cost.
#[derive(Debug, Clone)]
pub struct FastRng(u64);

impl FastRng {
    /// Seeded from `seed` (0 is remapped: xorshift must not start at 0).
    pub fn new(seed: u64) -> Self {
        FastRng(seed | 1)
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A masking key.
    #[inline]
    pub fn mask(&mut self) -> [u8; 4] {
        (self.next_u64() as u32).to_ne_bytes()
    }

    /// A `Sec-WebSocket-Key`: 16 random bytes, base64-encoded.
    pub fn ws_key(&mut self) -> String {
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&self.next_u64().to_ne_bytes());
        nonce[8..].copy_from_slice(&self.next_u64().to_ne_bytes());
        STANDARD.encode(nonce)
    }
}

/// Appends a keep-alive `POST /publish/{channel}` request carrying `body`.
pub fn publish_request(host: &str, channel: &str, body: &[u8], out: &mut Vec<u8>) {
    use std::io::Write as _;
    let _ = write!(
        out,
        "POST /publish/{channel} HTTP/1.1\r\nHost: {host}\r\n\
         Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    out.extend_from_slice(body);
}

/// Appends a signed `POST /apps/{id}/events` carrying `data` as event `m`
/// on `channel` (what the Pusher server SDKs send for `trigger`).
pub fn pusher_event_request(
    host: &str,
    app: &PusherApp,
    channel: &str,
    data: &[u8],
    now_s: u64,
    out: &mut Vec<u8>,
) {
    use std::io::Write as _;
    let body = serde_json::json!({
        "name": "m",
        "channel": channel,
        "data": String::from_utf8_lossy(data),
    })
    .to_string();
    let path = format!("/apps/{}/events", app.id);
    let query = signed_query(&app.key, &app.secret, "POST", &path, body.as_bytes(), now_s);
    let _ = write!(
        out,
        "POST {path}?{query} HTTP/1.1\r\nHost: {host}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
}

/// The text of a Pusher event's `data` string, from its opening quote to
/// the end of the frame (the stamp at its front is all a reader needs);
/// `None` for events whose `data` is not a string.
pub fn pusher_event_data(frame: &[u8]) -> Option<&[u8]> {
    const KEY: &[u8] = b"\"data\":\"";
    let at = frame.windows(KEY.len()).position(|w| w == KEY)?;
    frame.get(at + KEY.len()..)
}

/// Why an HTTP response could not be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpResponseError {
    /// Not valid HTTP.
    Malformed(httparse::Error),
    /// A head over 8 KiB or a body length we cannot read.
    BadLength,
}

impl fmt::Display for HttpResponseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "malformed HTTP response: {e}"),
            Self::BadLength => f.write_str("HTTP response head too long or bad Content-Length"),
        }
    }
}

/// Parses one complete HTTP response (head + `Content-Length` body) at
/// the front of `buf`: `Ok(Some((status, total_len)))`, or `Ok(None)` if
/// more bytes are needed.
pub fn parse_http_response(buf: &[u8]) -> Result<Option<(u16, usize)>, HttpResponseError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf).map_err(HttpResponseError::Malformed)? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial if buf.len() > 8192 => return Err(HttpResponseError::BadLength),
        httparse::Status::Partial => return Ok(None),
    };
    let body_len = match resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
    {
        Some(h) => std::str::from_utf8(h.value)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .ok_or(HttpResponseError::BadLength)?,
        None => 0,
    };
    let total = head_len
        .checked_add(body_len)
        .ok_or(HttpResponseError::BadLength)?;
    Ok((buf.len() >= total).then_some((resp.code.unwrap_or(0), total)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use corecast::ws::frame::{encode_client_frame, encode_server_frame};

    /// Chunks as corecast sends them (its own encoder), split back.
    #[test]
    fn event_stream_chunks_split_into_events() {
        use corecast::sse::{comment_chunk, event_chunk, Event as Ev};
        let msg = event_chunk(&Ev {
            id: Some(("c", "e", 3)),
            name: "message",
            data: &[br#"{"type":"message","channel":"c","offset":3,"data":"00ff"}"#],
        });
        let sub = event_chunk(&Ev {
            id: None,
            name: "subscribed",
            data: &[br#"{"type":"subscribed","channel":"c"}"#],
        });
        let beat = comment_chunk("heartbeat");
        let mut buf = [&sub[..], &beat[..], &msg[..], b"0\r\n\r\n"].concat();
        let whole = buf.len();
        buf.extend_from_slice(&msg[..5]);
        let mut got = Vec::new();
        let used = split_events(&buf, 1 << 16, |e| got.push(format!("{e:?}"))).unwrap();
        assert_eq!(used, whole, "the partial chunk is left");
        assert_eq!(
            got,
            ["Subscribed", "Other", "Data([48, 48, 102, 102])", "End"]
        );
        assert!(matches!(
            split_events(b"zz\r\n", 1 << 16, |_| {}),
            Err(WireError::BadChunk)
        ));
    }

    fn collect(buf: &[u8]) -> (Vec<String>, Result<usize, WireError>) {
        let mut seen = Vec::new();
        let r = split_frames(buf, 1 << 16, |f| seen.push(format!("{f:?}")));
        (seen, r)
    }

    #[test]
    fn pusher_requests_are_signed_and_event_data_is_found() {
        let app = PusherApp {
            id: "7".into(),
            key: "k".into(),
            secret: "s".into(),
        };
        let mut out = Vec::new();
        pusher_event_request("h:1", &app, "news", b"0000abcd\"q\"", 1000, &mut out);
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let target = head.lines().next().unwrap().split(' ').nth(1).unwrap();
        let (path, query) = target.split_once('?').unwrap();
        assert_eq!(path, "/apps/7/events");
        let sig = query.rsplit_once("&auth_signature=").unwrap().1;
        let data = format!(
            "POST\n{path}\n{}",
            query.rsplit_once("&auth_signature=").unwrap().0
        );
        assert_eq!(sig, corecast::pusher::sign::sign("s", &data));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["data"], "0000abcd\"q\"");
        assert!(head.contains(&format!("Content-Length: {}", body.len())));

        let ev = br#"{"event":"m","channel":"news","data":"0000abcd..."}"#;
        assert_eq!(pusher_event_data(ev), Some(&b"0000abcd...\"}"[..]));
        assert_eq!(
            pusher_event_data(br#"{"event":"pusher:pong","data":{}}"#),
            None
        );
    }

    #[test]
    fn splits_back_to_back_frames_and_leaves_the_partial_one() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&encode_server_frame(OpCode::Binary, b"one"));
        buf.extend_from_slice(&encode_server_frame(OpCode::Ping, b"p"));
        buf.extend_from_slice(&encode_server_frame(OpCode::Text, &[b'x'; 300]));
        let full = buf.len();
        for cut in 0..=full {
            let mut n = 0;
            let used = split_frames(&buf[..cut], 1 << 16, |_| n += 1).unwrap();
            let expect = match cut {
                c if c < 5 => (0, 0),
                c if c < 8 => (1, 5),
                c if c < full => (2, 8),
                _ => (3, full),
            };
            assert_eq!((n, used), expect, "cut {cut}");
        }
        let (seen, _) = collect(&buf[..8]);
        assert_eq!(seen, ["Data(Binary, [111, 110, 101])", "Ping([112])"]);
    }

    #[test]
    fn refuses_what_a_server_must_not_send() {
        let mut masked = bytes::BytesMut::new();
        encode_client_frame(OpCode::Binary, b"x", [1, 2, 3, 4], &mut masked);
        assert_eq!(collect(&masked).1, Err(WireError::MaskedServerFrame));
        assert_eq!(collect(&[0x01, 0x00]).1, Err(WireError::Fragmented));
        assert_eq!(collect(&[0x80, 0x00]).1, Err(WireError::Fragmented));
        // RSV1 is permessage-deflate's (`--deflate`); the other two mean
        // nothing here.
        assert_eq!(
            collect(&[0xA2, 0x00]).1,
            Err(WireError::Protocol(ProtocolError::ReservedBitsSet))
        );
        assert_eq!(collect(&[0xC2, 0x00]).0, ["Deflated(Binary, [])"]);
        let big = encode_server_frame(OpCode::Binary, &[0; 70_000]);
        assert_eq!(collect(&big[..10]).1, Err(WireError::FrameTooLarge(70_000)));
    }

    #[test]
    fn ws_keys_are_16_bytes_and_differ() {
        let mut rng = FastRng::new(0);
        let (a, b) = (rng.ws_key(), rng.ws_key());
        assert_ne!(a, b);
        assert_eq!(STANDARD.decode(&a).unwrap().len(), 16);
    }

    #[test]
    fn publish_round_trip_shapes() {
        let mut out = Vec::new();
        publish_request("h:1", "news", b"hello", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("POST /publish/news HTTP/1.1\r\nHost: h:1\r\n"));
        assert!(text.ends_with("Content-Length: 5\r\n\r\nhello"));

        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n{}{}HTTP/1.1";
        assert_eq!(parse_http_response(resp), Ok(Some((200, 42))));
        assert_eq!(parse_http_response(&resp[..40]), Ok(None));
        assert_eq!(
            parse_http_response(b"HTTP/1.1 503 X\r\n\r\n"),
            Ok(Some((503, 18)))
        );
        assert!(parse_http_response(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
    }
}
