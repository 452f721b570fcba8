//! The wire formats this server speaks to subscribers, as encoders for the
//! hub (which only knows format ids): a new protocol (Pusher, compressed
//! frames) is a new id and a new encoder here.
//!
//! Compressed formats (permessage-deflate, RFC 7692) are formats too: a
//! connection that negotiated it carries `PATH_DEFLATE` or `JSON_DEFLATE`
//! (or their small-window twins), so the hub compresses a publish at most
//! once per window size in use, lazily, and shares the frame like any
//! other. The server always agrees `server_no_context_takeover`, which is
//! what makes one frame right for every subscriber.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;

use crate::control;
use crate::hub::{Delivery, Encoders, Format};
use crate::meta::Meta;
use crate::sse;
use crate::stats::CompressionStats;
use crate::ws::deflate::{Deflater, Settings, MIN_WINDOW_BITS};
use crate::ws::extension::Agreed;
use crate::ws::frame::{encode_server_frame, encode_server_frame_parts};
use crate::ws::OpCode;

/// Path mode (`GET /ws/{channel}`, the status feed): the frame as it was
/// published.
pub const PATH: Format = Format::new(0);
/// The control protocol (`GET /ws`): a JSON envelope naming the channel
/// (`control::encode_delivery`).
pub const JSON: Format = Format::new(1);
/// [`PATH`], compressed with the full 32 KiB window.
pub const PATH_DEFLATE: Format = Format::new(2);
/// [`JSON`], compressed with the full 32 KiB window.
pub const JSON_DEFLATE: Format = Format::new(3);
/// [`PATH`] for clients that limited our window (`server_max_window_bits`
/// 9 to 14): compressed with the smallest window zlib has (512 bytes),
/// which every one of them can read, so they too share one frame.
pub const PATH_DEFLATE_SMALL: Format = Format::new(4);
/// [`JSON`] for clients that limited our window.
pub const JSON_DEFLATE_SMALL: Format = Format::new(5);

/// The Pusher protocol (`GET /app/{key}`): what is published on a Pusher
/// channel is already the event's JSON (`pusher::protocol`), so this only
/// frames it — once per publish for every Pusher subscriber.
pub const PUSHER: Format = Format::new(6);

/// Server-Sent Events (`GET /sse`): each delivery an `event: message`
/// whose data is the JSON protocol's envelope and whose id names its
/// position (`crate::sse`), as one HTTP chunk — once per publish for every
/// SSE subscriber. One-way: a heartbeat comment every `--sse-heartbeat`,
/// no idle deadline.
pub const SSE: Format = Format::new(7);

/// Whether `f` is the JSON protocol's format, compressed or not.
pub fn is_json(f: Format) -> bool {
    f == JSON || f == JSON_DEFLATE || f == JSON_DEFLATE_SMALL
}

/// Shared by the counters of every compressed format and the edge.
pub type SharedCompressionStats = Rc<RefCell<CompressionStats>>;

/// The format a connection of `base` ([`PATH`] or [`JSON`]) speaks
/// after agreeing `agreed`. A window of 256 bytes
/// (`server_max_window_bits=8`) is one zlib cannot produce: such a
/// connection gets uncompressed frames, which RFC 7692 always allows.
pub fn negotiated(base: Format, agreed: Option<Agreed>) -> Format {
    if base != PATH && base != JSON {
        // Pusher frames stay plain (RFC 7692 allows it): its keepalive
        // and going-away code belong to its own format.
        return base;
    }
    let json = base == JSON;
    match agreed.map(|a| a.server_max_window_bits) {
        Some(15) if json => JSON_DEFLATE,
        Some(15) => PATH_DEFLATE,
        Some(bits) if bits >= MIN_WINDOW_BITS && json => JSON_DEFLATE_SMALL,
        Some(bits) if bits >= MIN_WINDOW_BITS => PATH_DEFLATE_SMALL,
        _ => base,
    }
}

/// Every format's encoder, for `Hub::new`; the compressed ones only with
/// `--compression`. SSE's heartbeat: [`with_sse`].
pub fn encoders(settings: &Settings, stats: &SharedCompressionStats) -> Encoders {
    with_sse(encoders_with(settings, stats, Vec::new()), 0)
}

/// `encoders` with [`SSE`], its heartbeat every `heartbeat_ms` (0: none).
pub fn with_sse(encoders: Encoders, heartbeat_ms: u64) -> Encoders {
    encoders
        .with(SSE, sse_message)
        .keepalive_frame(SSE, sse::comment_chunk("heartbeat"))
        .one_way(SSE, heartbeat_ms)
}

/// A delivery as an SSE `message` event (one chunk): the JSON protocol's
/// envelope as its data, its position as its id when it has one.
pub fn sse_message(d: &Delivery<'_>) -> Bytes {
    let (head, body) = control::delivery_parts(d.channel, d.opcode, d.payload, at_of(d));
    let id = (d.offset != 0 && !d.epoch.is_empty()).then_some((d.channel, d.epoch, d.offset));
    sse::event_chunk(&sse::Event {
        id,
        name: "message",
        data: &[head.as_bytes(), body.as_bytes()],
    })
}

/// The WebSocket formats' encoders, where the channels of the namespaces in `plain`
/// (`compression = false`) are sent uncompressed to every connection:
/// one check per publish and compressed format in use, none without
/// such namespaces.
pub fn encoders_with(
    settings: &Settings,
    stats: &SharedCompressionStats,
    plain: Vec<Box<str>>,
) -> Encoders {
    let plain: Rc<[Box<str>]> = plain.into();
    let mut encoders = Encoders::new()
        .with(PATH, |d: &Delivery<'_>| {
            encode_server_frame(d.opcode, d.payload)
        })
        .with(JSON, |d: &Delivery<'_>| {
            if is_presence_event(d) {
                return encode_server_frame(OpCode::Text, d.payload);
            }
            let (head, body) = json_parts(d);
            encode_server_frame_parts(OpCode::Text, &[head.as_bytes(), body.as_bytes()])
        })
        .with(PUSHER, |d: &Delivery<'_>| {
            encode_server_frame(OpCode::Text, d.payload)
        })
        // pusher-js reconnects at once on 4200 ("generic reconnect").
        .going_away_code(PUSHER, crate::pusher::protocol::code::RECONNECT)
        .idle_close_code(PUSHER, crate::pusher::protocol::code::PONG_NOT_RECEIVED)
        // Pusher clients answer `pusher:ping` with `pusher:pong`.
        .keepalive_frame(PUSHER, pusher_ping());
    if !settings.enabled {
        return encoders;
    }
    let windows = [
        (15, PATH_DEFLATE, JSON_DEFLATE),
        (MIN_WINDOW_BITS, PATH_DEFLATE_SMALL, JSON_DEFLATE_SMALL),
    ];
    for (bits, path, json) in windows {
        let c = Rc::new(Compressor::new(settings, bits, stats.clone()));
        let c2 = c.clone();
        let (plain, plain2) = (plain.clone(), plain.clone());
        encoders = encoders
            .with(path, move |d: &Delivery<'_>| {
                if is_plain(&plain, d.channel) {
                    return encode_server_frame(d.opcode, d.payload);
                }
                c.frame(d.opcode, &[d.payload])
            })
            .with(json, move |d: &Delivery<'_>| {
                if is_presence_event(d) {
                    return c2.frame(OpCode::Text, &[d.payload]);
                }
                let (head, body) = json_parts(d);
                if is_plain(&plain2, d.channel) {
                    return encode_server_frame_parts(
                        OpCode::Text,
                        &[head.as_bytes(), body.as_bytes()],
                    );
                }
                c2.frame(OpCode::Text, &[head.as_bytes(), body.as_bytes()])
            });
    }
    encoders
}

/// A delivery as the JSON protocol's message, in two pieces: as a delta
/// when it carries one (`Delivery::patch`), else its payload.
fn json_parts(d: &Delivery<'_>) -> (String, String) {
    match d.patch {
        Some(p) => control::delta_parts(d.channel, p, at_of(d)),
        None => control::delivery_parts(d.channel, d.opcode, d.payload, at_of(d)),
    }
}

/// A delivery's offset and meta fields (tags, idempotency key: their
/// JSON text), as the JSON protocol's message shows them.
fn at_of<'a>(d: &Delivery<'a>) -> (u64, Option<&'a str>) {
    (d.offset, d.meta.map(Meta::head).filter(|h| !h.is_empty()))
}

/// Whether `channel` is in a namespace of `plain` (`compression = false`).
fn is_plain(plain: &[Box<str>], channel: &str) -> bool {
    if plain.is_empty() {
        return false;
    }
    let ns = channel.split_once(':').map(|(ns, _)| ns);
    ns.is_some_and(|ns| plain.iter().any(|p| **p == *ns))
}

/// A join/leave event (`crate::presence`): already the JSON text the
/// client reads, on the internal channel `presence/{channel}`.
fn is_presence_event(d: &Delivery<'_>) -> bool {
    d.channel.starts_with(crate::presence::EVENTS_PREFIX)
}

/// One window size's compressor, shared by its path and JSON formats
/// (one publish is encoded by one of them at a time).
struct Compressor {
    /// Made at the first message it compresses: a deflate state is about
    /// 350 KB (window and hash tables, zeroed), two of them most of a
    /// fresh server's heap, and most servers never see a client that
    /// negotiates this window size.
    deflater: RefCell<Option<Deflater>>,
    level: u32,
    bits: u8,
    min_size: usize,
    stats: SharedCompressionStats,
}

impl Compressor {
    fn new(settings: &Settings, bits: u8, stats: SharedCompressionStats) -> Self {
        Compressor {
            deflater: RefCell::new(None),
            level: settings.level,
            bits,
            min_size: settings.min_size,
            stats,
        }
    }

    /// The message as one frame: compressed (RSV1) unless it is short or
    /// does not shrink, then plain.
    fn frame(&self, opcode: OpCode, parts: &[&[u8]]) -> Bytes {
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        let compressed = if len >= self.min_size {
            let started = Instant::now();
            let mut deflater = self.deflater.borrow_mut();
            let deflater = deflater.get_or_insert_with(|| Deflater::new(self.level, self.bits));
            let frame = deflater.frame(opcode, parts);
            let mut stats = self.stats.borrow_mut();
            stats.time_us += started.elapsed().as_micros() as u64;
            frame
        } else {
            None
        };
        let mut stats = self.stats.borrow_mut();
        match compressed {
            Some(frame) => {
                stats.messages += 1;
                stats.bytes_in += len as u64;
                stats.bytes_out += frame.len() as u64;
                frame
            }
            None => {
                stats.skipped += 1;
                encode_server_frame_parts(opcode, parts)
            }
        }
    }
}

fn pusher_ping() -> bytes::Bytes {
    let ping = crate::pusher::protocol::bare("pusher:ping");
    encode_server_frame(OpCode::Text, ping.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::{ConnKind, Hub, HubLimits, SlowConsumerPolicy};
    use bytes::Bytes;

    fn hub() -> Hub {
        let limits = HubLimits {
            max_outbound_queue: 1 << 20,
            slow_consumer: SlowConsumerPolicy::Disconnect,
            slow_grace_ms: 1_000,
            write_stall_timeout_ms: 10_000,
            max_subscriptions: 64,
            max_connections: 100,
            max_total_outbound: 1 << 30,
            histograms: true,
            exclude_sender: false,
            fanout_window: 256,
            ping_interval_ms: 0,
            idle_timeout_ms: 0,
            handshake_timeout_ms: 10_000,
            close_timeout_ms: 5_000,
            history: Default::default(),
            ns_history: Default::default(),
            conflated: Vec::new(),
            delta_publish: Vec::new(),
        };
        let stats = SharedCompressionStats::default();
        Hub::new(limits, encoders(&Settings::default(), &stats))
    }

    fn subscriber(hub: &mut Hub, format: Format) -> usize {
        let id = hub.register(-1).unwrap();
        hub.upgrade(id, ConnKind::Ws(format));
        hub.subscribe(id, "room").unwrap();
        id
    }

    fn first_frame(hub: &mut Hub, id: usize) -> Bytes {
        let mut out = Vec::new();
        hub.take_batch(id, &mut out);
        out.remove(0)
    }

    #[test]
    fn path_mode_gets_the_frame_as_published() {
        let mut hub = hub();
        let id = subscriber(&mut hub, PATH);
        hub.publish("room", OpCode::Text, b"hi", None);
        assert_eq!(&first_frame(&mut hub, id)[..], b"\x81\x02hi");
    }

    #[test]
    fn json_mode_gets_an_envelope_naming_the_channel() {
        let mut hub = hub();
        let id = subscriber(&mut hub, JSON);
        hub.publish("room", OpCode::Text, b"x\"y", None);
        let f = first_frame(&mut hub, id);
        let json: serde_json::Value = serde_json::from_slice(&f[2..]).unwrap();
        assert_eq!(json["type"], "message");
        assert_eq!(json["channel"], "room");
        assert_eq!(json["data"], "x\"y");
    }

    #[test]
    fn a_publish_is_compressed_once_per_window_and_the_frame_shared() {
        let mut hub = hub();
        let formats = [
            PATH_DEFLATE,
            PATH,
            PATH_DEFLATE,
            PATH_DEFLATE_SMALL,
            JSON_DEFLATE,
        ];
        let ids = formats.map(|f| subscriber(&mut hub, f));
        let msg = "{\"price\":42000,\"side\":\"buy\"} ".repeat(40);
        assert_eq!(hub.publish("room", OpCode::Text, msg.as_bytes(), None), 5);
        let frames = ids.map(|id| first_frame(&mut hub, id));
        assert_eq!(frames[0].as_ptr(), frames[2].as_ptr(), "one shared frame");
        assert_eq!(frames[0][0], 0xC1, "FIN + RSV1 + text");
        assert_eq!(frames[1][0], 0x81, "plain subscribers get the plain frame");
        assert_eq!(frames[3][0], 0xC1);
        assert_eq!(frames[4][0], 0xC1);
        assert!(frames[0].len() < msg.len() / 4);
        // A short message goes plain to compressed subscribers too.
        hub.publish("room", OpCode::Text, b"short", None);
        assert_eq!(&first_frame(&mut hub, ids[0])[..], b"\x81\x05short");
    }

    #[test]
    fn an_sse_event_is_encoded_once_and_shared_by_every_stream() {
        let mut hub = hub();
        let ids = [SSE, JSON, SSE].map(|f| subscriber(&mut hub, f));
        assert_eq!(hub.publish("room", OpCode::Text, b"a\nb", None), 3);
        let frames = ids.map(|id| first_frame(&mut hub, id));
        assert_eq!(frames[0].as_ptr(), frames[2].as_ptr(), "one shared chunk");
        // Without history: no id; the JSON envelope as the data line.
        let body = "event: message\ndata: {\"type\":\"message\",\"channel\":\"room\",\"data\":\"a\\nb\"}\n\n";
        assert_eq!(
            &frames[0][..],
            format!("{:x}\r\n{body}\r\n", body.len()).as_bytes()
        );
        // With a position: the id names it.
        let d = Delivery {
            channel: "a:b",
            opcode: OpCode::Binary,
            payload: &[1, 2],
            offset: 9,
            epoch: "e",
            meta: None,
            patch: None,
        };
        let chunk = sse_message(&d);
        let text = std::str::from_utf8(&chunk).unwrap();
        assert!(
            text.contains("\r\nid: a:b:e:9\nevent: message\ndata: {"),
            "{text}"
        );
        assert!(
            text.contains(r#""offset":9,"data_base64":"AQI="}"#),
            "{text}"
        );
    }

    #[test]
    fn negotiated_formats_follow_the_server_window() {
        let agreed = |b| {
            Some(Agreed {
                server_max_window_bits: b,
            })
        };
        assert_eq!(negotiated(PATH, None), PATH);
        assert_eq!(negotiated(PATH, agreed(15)), PATH_DEFLATE);
        assert_eq!(negotiated(JSON, agreed(15)), JSON_DEFLATE);
        assert_eq!(negotiated(PATH, agreed(9)), PATH_DEFLATE_SMALL);
        assert_eq!(negotiated(JSON, agreed(14)), JSON_DEFLATE_SMALL);
        assert_eq!(
            negotiated(JSON, agreed(8)),
            JSON,
            "zlib cannot do 256 bytes"
        );
    }

    #[test]
    fn both_formats_in_one_channel_share_one_frame_each() {
        let mut hub = hub();
        let ids = [PATH, JSON, PATH, JSON].map(|f| subscriber(&mut hub, f));
        assert_eq!(hub.publish("room", OpCode::Binary, &[1, 2], None), 4);
        let frames = ids.map(|id| first_frame(&mut hub, id));
        assert_eq!(frames[0].as_ptr(), frames[2].as_ptr());
        assert_eq!(frames[1].as_ptr(), frames[3].as_ptr());
        assert_ne!(frames[0], frames[1]);
    }
}
