//! What arrives on a subscriber connection, classified sans-I/O: bounded
//! reply decoding, pub/sub events, our channels and the canary, and the
//! checks a message passes before it may reach WebSocket clients. The
//! network edge (`server::redis::subscriber`) only acts on the result, so
//! the whole path from bytes to delivery is unit-tested and fuzzed.

use bytes::{Bytes, BytesMut};

use super::envelope::{self, Envelope, Rejected};
use super::resp::{self, Limits, PubSubEvent, RespError};

/// Settings of the classification.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// Prefix of our Redis channels.
    pub prefix: String,
    /// This instance's canary channel.
    pub canary_key: String,
    /// Bounds of one reply.
    pub limits: Limits,
    /// Largest payload delivered (`--max-message-size`).
    pub max_message: usize,
}

/// One event of a subscriber connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A message for local subscribers of `channel` (prefix removed,
    /// UTF-8 checked).
    Deliver {
        /// The corecast channel name.
        channel: Bytes,
        /// The message.
        envelope: Envelope,
    },
    /// Our readiness canary came back with this payload.
    Canary(Bytes),
    /// A message that must not be delivered, and why.
    Dropped(Rejected),
    /// A `SUBSCRIBE` of this Redis channel was confirmed.
    Subscribed(Bytes),
    /// Confirmations we need not act on (`UNSUBSCRIBE`, `PONG`).
    Other,
    /// Redis answered with an error (e.g. NOAUTH): the connection is done.
    Refused(String),
}

impl Inbound {
    /// Takes the next event from the front of `buf`; `Ok(None)` = need
    /// more bytes. An error means the connection cannot go on.
    pub fn next(&self, buf: &mut BytesMut) -> Result<Option<Event>, RespError> {
        let Some(reply) = resp::decode(buf, &self.limits)? else {
            return Ok(None);
        };
        Ok(Some(match resp::pubsub_event(reply)? {
            PubSubEvent::Message { channel, payload } => self.message(channel, payload),
            PubSubEvent::Subscribed(c) => Event::Subscribed(c),
            PubSubEvent::Unsubscribed(_) | PubSubEvent::Pong => Event::Other,
            PubSubEvent::Error(e) => Event::Refused(e),
        }))
    }

    fn message(&self, channel: Bytes, payload: Bytes) -> Event {
        if channel == self.canary_key.as_bytes() {
            return Event::Canary(payload);
        }
        let ours = channel.starts_with(self.prefix.as_bytes())
            && std::str::from_utf8(&channel[self.prefix.len()..]).is_ok();
        if !ours {
            return Event::Dropped(Rejected::UnknownChannel);
        }
        match envelope::accept(payload, self.max_message) {
            Ok(envelope) => Event::Deliver {
                channel: channel.slice(self.prefix.len()..),
                envelope,
            },
            Err(why) => Event::Dropped(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::envelope::{put_header, Origin};
    use crate::ws::OpCode;

    fn inbound() -> Inbound {
        Inbound {
            prefix: "cc:".into(),
            canary_key: "cc:!canary:1".into(),
            limits: Limits::default(),
            max_message: 8,
        }
    }

    fn message(channel: &str, payload: &[u8]) -> Vec<u8> {
        let mut out = format!(
            "*3\r\n$7\r\nmessage\r\n${}\r\n{channel}\r\n${}\r\n",
            channel.len(),
            payload.len()
        )
        .into_bytes();
        out.extend_from_slice(payload);
        out.extend_from_slice(b"\r\n");
        out
    }

    fn text_envelope(payload: &[u8]) -> Vec<u8> {
        let mut b = BytesMut::new();
        put_header(
            &mut b,
            OpCode::Text,
            Origin {
                instance: 3,
                sender: 4,
            },
        );
        b.extend_from_slice(payload);
        b.to_vec()
    }

    #[test]
    fn a_stream_of_events_is_classified_in_order() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(b"*3\r\n$9\r\nsubscribe\r\n$4\r\ncc:a\r\n:1\r\n");
        buf.extend_from_slice(&message("cc:a", b"hi"));
        buf.extend_from_slice(&message("cc:!canary:1", b"123"));
        buf.extend_from_slice(&message("other:a", b"hi"));
        buf.extend_from_slice(&message("cc:a", b"123456789"));
        buf.extend_from_slice(&message("cc:a", &text_envelope(b"\xff")));
        buf.extend_from_slice(b"-NOAUTH\r\n");
        let inb = inbound();
        let mut got = Vec::new();
        while let Some(e) = inb.next(&mut buf).unwrap() {
            got.push(e);
        }
        assert!(buf.is_empty());
        assert_eq!(got[0], Event::Subscribed(Bytes::from_static(b"cc:a")));
        match &got[1] {
            Event::Deliver { channel, envelope } => {
                assert_eq!(&channel[..], b"a");
                assert_eq!(&envelope.payload[..], b"hi");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(got[2], Event::Canary(Bytes::from_static(b"123")));
        assert_eq!(got[3], Event::Dropped(Rejected::UnknownChannel));
        assert_eq!(
            got[4],
            Event::Dropped(Rejected::TooLarge { size: 9, max: 8 })
        );
        assert_eq!(got[5], Event::Dropped(Rejected::InvalidUtf8));
        assert_eq!(got[6], Event::Refused("NOAUTH".into()));
    }

    #[test]
    fn hostile_replies_are_errors_not_crashes() {
        let inb = inbound();
        let mut deep = BytesMut::from(&b"*1\r\n".repeat(100_000)[..]);
        assert!(matches!(
            inb.next(&mut deep),
            Err(RespError::TooDeep { .. })
        ));
        let mut not_pubsub = BytesMut::from(&b":1\r\n"[..]);
        assert_eq!(inb.next(&mut not_pubsub), Err(RespError::NotPubSub));
    }
}
