//! Server-Sent Events (sans-I/O): the wire of `GET /sse` — events
//! encoded as HTTP/1.1 chunks, their ids, and the request's query and
//! `Last-Event-ID` — for clients that cannot speak WebSocket (`curl -N`,
//! `EventSource`, proxies that strip `Upgrade`).
//!
//! The stream, after a `200` with `Content-Type: text/event-stream` and
//! `Transfer-Encoding: chunked` (one event per chunk):
//! ```text
//! event: subscribed
//! id: news:3f2a9c0d1b7e4a55:41
//! data: {"type":"subscribed","channel":"news","epoch":"3f2a9c0d1b7e4a55","offset":41}
//!
//! event: message
//! id: news:3f2a9c0d1b7e4a55:42
//! data: {"type":"message","channel":"news","offset":42,"data":"hello"}
//!
//! : heartbeat
//!
//! event: gap
//! id: news:3f2a9c0d1b7e4a55:60
//! data: {"type":"gap","channel":"news","epoch":"3f2a9c0d1b7e4a55","offset":60}
//!
//! event: close
//! data: {"type":"close","code":1008,"reason":"slow consumer"}
//! ```
//! Each event's `data` is the JSON protocol's message for it (the same
//! object a `GET /ws` client reads), one `data:` line per line of it
//! (JSON escapes line breaks, so one line). `id` is
//! `{channel}:{epoch}:{offset}` when the channel keeps history, and is
//! read back from the right (channel names may contain `:`; epochs and
//! offsets never do). Without history events carry no `id`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::channel::valid_channel_name;
use crate::filter::Filter;

/// `GET /sse` limits (`--sse-heartbeat`, `--sse-max-channels`), owned by
/// this layer; defaults come from the options table.
#[derive(Debug, Clone, Copy, Default)]
pub struct SseLimits {
    /// A heartbeat comment is sent this often (0: never).
    pub heartbeat_ms: u64,
    /// Most channels one request may name; more is answered 400.
    pub max_channels: usize,
}

/// The last chunk of a chunked body (RFC 9112 7.1): the stream ends.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Longest `Last-Event-ID` or `since` value read: a channel name, an
/// epoch and an offset fit with room to spare.
pub const MAX_ID_LEN: usize = 256;

/// One channel's position: where its last event was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventId {
    /// The channel.
    pub channel: String,
    /// Its history epoch.
    pub epoch: String,
    /// The offset of the last message seen.
    pub offset: u64,
}

/// Why a `GET /sse` request is refused (each answered 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestError {
    /// No `channel` parameter.
    NoChannel,
    /// More `channel` parameters than `--sse-max-channels`.
    TooManyChannels,
    /// A channel name outside the channel charset (or badly escaped).
    InvalidChannel,
    /// A `since` that is not `{channel}:{epoch}:{offset}`, or names a
    /// channel the request does not subscribe.
    InvalidSince,
    /// A `Last-Event-ID` that is not `{channel}:{epoch}:{offset}` of a
    /// channel the request subscribes.
    InvalidLastEventId,
    /// A `filter.{channel}` that is not a valid tag filter (JSON) of a
    /// channel the request subscribes, or one given twice.
    InvalidFilter,
}

impl RequestError {
    /// The reason sent with the 400.
    pub fn message(self) -> &'static str {
        match self {
            RequestError::NoChannel => "name at least one channel (?channel=a&channel=b)",
            RequestError::TooManyChannels => {
                "too many channels in one request (--sse-max-channels)"
            }
            RequestError::InvalidChannel => "invalid channel name",
            RequestError::InvalidSince => {
                "since must be {channel}:{epoch}:{offset} of a channel of this request"
            }
            RequestError::InvalidLastEventId => {
                "Last-Event-ID must be {channel}:{epoch}:{offset} of a channel of this request"
            }
            RequestError::InvalidFilter => {
                "filter.{channel} must be a valid tag filter (JSON) of a channel of this request"
            }
        }
    }
}

/// A parsed `GET /sse` request: its channels, in order and without
/// repeats, and the positions to resume them from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    /// The channels.
    pub channels: Vec<String>,
    /// Positions from `since` parameters, then `Last-Event-ID` (which
    /// wins for its channel).
    pub positions: Vec<EventId>,
    /// The request carried a `Last-Event-ID` (a reconnecting
    /// `EventSource`): channels it does not name get a `gap` event, their
    /// positions being unknown.
    pub reconnect: bool,
    /// `filter.{channel}=JSON`: a channel's own tag filter.
    pub filters: Vec<(String, Filter)>,
}

impl Subscription {
    /// The position to resume `channel` from, if the request gave one.
    pub fn since(&self, channel: &str) -> Option<&EventId> {
        self.positions.iter().find(|p| p.channel == channel)
    }
}

/// The `Last-Event-ID` header of a request head (the first, if repeated).
pub fn last_event_id(head: &[u8]) -> Option<&[u8]> {
    let mut headers = [httparse::EMPTY_HEADER; crate::http::MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    req.parse(head).ok()?;
    let found = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("last-event-id"));
    found.map(|h| h.value)
}

/// Parses an event id, from the right: `{channel}:{epoch}:{offset}`.
pub fn parse_event_id(id: &str) -> Option<EventId> {
    if id.len() > MAX_ID_LEN {
        return None;
    }
    let (rest, offset) = id.rsplit_once(':')?;
    let (channel, epoch) = rest.rsplit_once(':')?;
    let digits = !offset.is_empty() && offset.bytes().all(|b| b.is_ascii_digit());
    let offset = offset.parse().ok().filter(|_| digits)?;
    let epoch_ok = !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_alphanumeric());
    (epoch_ok && valid_channel_name(channel)).then(|| EventId {
        channel: channel.to_string(),
        epoch: epoch.to_string(),
        offset,
    })
}

/// Parses the query (`channel`, `since`; `token` is auth's) and the
/// `Last-Event-ID` header of a `GET /sse`.
pub fn parse_request(
    query: Option<&str>,
    last_event_id: Option<&[u8]>,
    max_channels: usize,
) -> Result<Subscription, RequestError> {
    let mut sub = Subscription::default();
    let (mut since, mut own) = (Vec::new(), Vec::new());
    for (k, v) in query
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
    {
        match k {
            "channel" => {
                let c = crate::http::percent_decode(v).filter(|c| valid_channel_name(c));
                let c = c.ok_or(RequestError::InvalidChannel)?;
                if !sub.channels.contains(&c) {
                    // Checked as they come: a flood is refused at the bound.
                    if sub.channels.len() == max_channels {
                        return Err(RequestError::TooManyChannels);
                    }
                    sub.channels.push(c);
                }
            }
            "since" => since.push(v),
            _ => {
                if let Some(c) = k.strip_prefix("filter.") {
                    own.push((c, v));
                }
            }
        }
    }
    if sub.channels.is_empty() {
        return Err(RequestError::NoChannel);
    }
    for (c, v) in own {
        let bad = RequestError::InvalidFilter;
        let c = crate::http::percent_decode(c).ok_or(bad)?;
        let text = crate::http::percent_decode(v).ok_or(bad)?;
        let f = Filter::parse(text.as_bytes()).map_err(|_| bad)?;
        if !sub.channels.contains(&c) || sub.filters.iter().any(|(d, _)| *d == c) {
            return Err(bad);
        }
        sub.filters.push((c, f));
    }
    for v in since.into_iter().take(max_channels.saturating_add(1)) {
        let p = crate::http::percent_decode(v).and_then(|v| parse_event_id(&v));
        let p = p.filter(|p| sub.channels.contains(&p.channel));
        sub.positions.push(p.ok_or(RequestError::InvalidSince)?);
    }
    if let Some(raw) = last_event_id {
        let id = std::str::from_utf8(raw.trim_ascii()).ok();
        let p = id.and_then(parse_event_id);
        let p = p.filter(|p| sub.channels.contains(&p.channel));
        let p = p.ok_or(RequestError::InvalidLastEventId)?;
        sub.positions.retain(|q| q.channel != p.channel);
        sub.positions.insert(0, p);
        sub.reconnect = true;
    }
    Ok(sub)
}

/// One event: its optional id (channel, epoch, offset), its name and its
/// data.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// `id:` — channel, epoch and offset (omitted when `None`).
    pub id: Option<(&'a str, &'a str, u64)>,
    /// `event:`.
    pub name: &'a str,
    /// `data:` — split into one line each at `\n`, `\r\n` or `\r`.
    pub data: &'a [&'a [u8]],
}

/// `event` as one HTTP/1.1 chunk: `{size:x}\r\n{event}\r\n`.
pub fn event_chunk(event: &Event<'_>) -> Bytes {
    let mut body = BytesMut::with_capacity(64 + event.data.iter().map(|d| d.len()).sum::<usize>());
    if let Some((c, e, o)) = event.id {
        body.put_slice(format!("id: {c}:{e}:{o}\n").as_bytes());
    }
    body.put_slice(b"event: ");
    body.put_slice(event.name.as_bytes());
    body.put_slice(b"\ndata: ");
    for part in event.data {
        put_data(&mut body, part);
    }
    body.put_slice(b"\n\n");
    chunk(&body)
}

/// Appends `data`, every line break starting a new `data: ` line (a
/// break is a field's end in the event-stream grammar).
fn put_data(body: &mut BytesMut, data: &[u8]) {
    let mut rest = data;
    while let Some(i) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
        body.put_slice(&rest[..i]);
        body.put_slice(b"\ndata: ");
        let crlf = rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n');
        rest = &rest[i + 1 + usize::from(crlf)..];
    }
    body.put_slice(rest);
}

/// A comment (`: {text}`), as a chunk: the heartbeat, which every
/// client ignores and every proxy sees as traffic.
pub fn comment_chunk(text: &str) -> Bytes {
    chunk(format!(": {text}\n\n").as_bytes())
}

/// `body` as one chunk of a chunked body.
fn chunk(body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + 12);
    out.put_slice(format!("{:x}\r\n", body.len()).as_bytes());
    out.put_slice(body);
    out.put_slice(b"\r\n");
    out.freeze()
}

/// The end of a stream the server closes: a `close` event with the code
/// and reason of the WebSocket close frame the hub queued for it
/// (`frame`: slow consumer 1008, shutdown 1001, token expired 4001...),
/// then the last chunk.
pub fn closing(frame: &[u8]) -> Bytes {
    // An unmasked server close frame: 0x88, a length under 126, the code,
    // the reason.
    let body = frame.get(2..).unwrap_or_default();
    let code = match body {
        [hi, lo, ..] => u16::from_be_bytes([*hi, *lo]),
        _ => 1005,
    };
    let reason = String::from_utf8_lossy(body.get(2..).unwrap_or_default());
    let reason = serde_json::to_string(&reason).expect("strings serialize");
    let data = format!("{{\"type\":\"close\",\"code\":{code},\"reason\":{reason}}}");
    let event = Event {
        id: None,
        name: "close",
        data: &[data.as_bytes()],
    };
    let mut out = BytesMut::from(&event_chunk(&event)[..]);
    out.put_slice(LAST_CHUNK);
    out.freeze()
}

/// A stream's position event, `subscribed` or `gap`: the JSON protocol's
/// object for it, with the channel's position as its id (`at`: epoch and
/// offset; `None` without history). `recovered`: whether a resume was
/// covered (`subscribed` only; `None` when none was asked).
pub fn position_event(
    name: &str,
    channel: &str,
    at: Option<(&str, u64)>,
    recovered: Option<bool>,
) -> Bytes {
    // Names, channels and epochs need no JSON escaping (their charsets);
    // the fields in the JSON protocol's order.
    let mut data = format!("{{\"type\":\"{name}\",\"channel\":\"{channel}\"");
    if let Some(r) = recovered {
        data.push_str(&format!(",\"recovered\":{r}"));
    }
    if let Some((epoch, offset)) = at {
        data.push_str(&format!(",\"epoch\":\"{epoch}\",\"offset\":{offset}"));
    }
    data.push('}');
    event_chunk(&Event {
        id: at.map(|(e, o)| (channel, e, o)),
        name,
        data: &[data.as_bytes()],
    })
}

/// The response head of an accepted `GET /sse`. `X-Accel-Buffering: no`
/// tells nginx not to buffer this response (as `proxy_buffering off`);
/// `origin`: a browser's allowed `Origin`, echoed for `EventSource`
/// across origins.
pub fn response_head(origin: Option<&[u8]>) -> Vec<u8> {
    let mut head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
        Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n"
        .to_vec();
    if let Some(o) = origin {
        head.extend_from_slice(b"Access-Control-Allow-Origin: ");
        head.extend_from_slice(o);
        head.extend_from_slice(b"\r\nVary: Origin\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

#[cfg(test)]
mod tests;
