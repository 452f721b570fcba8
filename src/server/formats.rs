//! The wire formats this server speaks to subscribers, as encoders for the
//! hub (which only knows format ids): a new protocol (Pusher, compressed
//! frames) is a new id and a new encoder here.

use crate::control;
use crate::hub::{Delivery, Encoders, Format};
use crate::ws::frame::encode_server_frame;
use crate::ws::OpCode;

/// Path mode (`GET /ws/{channel}`, the status feed): the frame as it was
/// published.
pub const PATH: Format = Format::new(0);
/// The control protocol (`GET /ws`): a JSON envelope naming the channel
/// (`control::encode_delivery`).
pub const JSON: Format = Format::new(1);

/// The Pusher protocol (`GET /app/{key}`): what is published on a Pusher
/// channel is already the event's JSON (`pusher::protocol`), so this only
/// frames it — once per publish for every Pusher subscriber.
pub const PUSHER: Format = Format::new(2);

/// Every format's encoder, for `Hub::new`.
pub fn encoders() -> Encoders {
    Encoders::new()
        .with(PATH, |d: &Delivery<'_>| {
            encode_server_frame(d.opcode, d.payload)
        })
        .with(JSON, |d: &Delivery<'_>| {
            control::encode_delivery(d.channel, d.opcode, d.payload)
        })
        .with(PUSHER, |d: &Delivery<'_>| {
            encode_server_frame(OpCode::Text, d.payload)
        })
        // pusher-js reconnects at once on 4200 ("generic reconnect").
        .going_away_code(PUSHER, crate::pusher::protocol::code::RECONNECT)
        // Pusher clients answer `pusher:ping` with `pusher:pong`.
        .keepalive_frame(PUSHER, pusher_ping())
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
        };
        Hub::new(limits, encoders())
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
