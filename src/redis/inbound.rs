//! What arrives on a subscriber connection, classified sans-I/O: bounded
//! reply decoding, pub/sub events, our channels and the canary, and the
//! checks a message passes before it may reach WebSocket clients. The
//! network edge (`server::redis::subscriber`) only acts on the result, so
//! the whole path from bytes to delivery is unit-tested and fuzzed.

use bytes::{Bytes, BytesMut};

use super::commands::Pubsub;
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
    /// Plain or sharded channel names (`prefix{channel}` in a cluster).
    pub mode: Pubsub,
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
    /// Our readiness canary came back with this payload (a message on
    /// the canary channel, or in a cluster the answer to a `PING` with an
    /// argument on the subscriber connection).
    Canary(Bytes),
    /// A message that must not be delivered, and why.
    Dropped(Rejected),
    /// Redis answered one channel of a `SUBSCRIBE` (`subscribed`) or an
    /// `UNSUBSCRIBE`: `channel` is the corecast channel name (prefix
    /// removed), `None` for the canary or a name that is not ours.
    Replied {
        /// The corecast channel, if it is one.
        channel: Option<Bytes>,
        /// A `SUBSCRIBE` confirmation (else an `UNSUBSCRIBE` one).
        subscribed: bool,
    },
    /// Replies we need not act on (`PONG`).
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
            PubSubEvent::Subscribed(c) => Event::Replied {
                channel: self.ours(c),
                subscribed: true,
            },
            PubSubEvent::Unsubscribed(c) => Event::Replied {
                channel: self.ours(c),
                subscribed: false,
            },
            PubSubEvent::Pong(p) if !p.is_empty() => Event::Canary(p),
            PubSubEvent::Pong(_) => Event::Other,
            PubSubEvent::Error(e) => Event::Refused(e),
        }))
    }

    fn message(&self, channel: Bytes, payload: Bytes) -> Event {
        if channel == self.canary_key.as_bytes() {
            return Event::Canary(payload);
        }
        let Some(channel) = self.ours(channel) else {
            return Event::Dropped(Rejected::UnknownChannel);
        };
        match envelope::accept(payload, self.max_message) {
            Ok(envelope) => Event::Deliver { channel, envelope },
            Err(why) => Event::Dropped(why),
        }
    }

    /// The corecast channel a Redis channel name stands for: ours when it
    /// has our prefix and a UTF-8 rest (the canary has the prefix too, but
    /// its rest starts with `!`, outside every channel name).
    fn ours(&self, redis_channel: Bytes) -> Option<Bytes> {
        let ours = redis_channel != self.canary_key.as_bytes()
            && redis_channel.starts_with(self.prefix.as_bytes())
            && std::str::from_utf8(&redis_channel[self.prefix.len()..]).is_ok();
        if !ours {
            return None;
        }
        let rest = redis_channel.slice(self.prefix.len()..);
        match self.mode {
            Pubsub::Plain => Some(rest),
            Pubsub::Sharded => (rest.len() >= 2 && rest.starts_with(b"{") && rest.ends_with(b"}"))
                .then(|| rest.slice(1..rest.len() - 1)),
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
            mode: Pubsub::Plain,
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
        buf.extend_from_slice(b"*3\r\n$11\r\nunsubscribe\r\n$4\r\ncc:b\r\n:0\r\n");
        buf.extend_from_slice(b"*3\r\n$9\r\nsubscribe\r\n$12\r\ncc:!canary:1\r\n:1\r\n");
        buf.extend_from_slice(b"-NOAUTH\r\n");
        let inb = inbound();
        let mut got = Vec::new();
        while let Some(e) = inb.next(&mut buf).unwrap() {
            got.push(e);
        }
        assert!(buf.is_empty());
        assert_eq!(
            got[0],
            Event::Replied {
                channel: Some(Bytes::from_static(b"a")),
                subscribed: true
            }
        );
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
        assert_eq!(
            got[6],
            Event::Replied {
                channel: Some(Bytes::from_static(b"b")),
                subscribed: false
            }
        );
        assert_eq!(
            got[7],
            Event::Replied {
                channel: None,
                subscribed: true
            }
        );
        assert_eq!(got[8], Event::Refused("NOAUTH".into()));
    }

    #[test]
    fn sharded_events_lose_their_braces_and_pongs_carry_the_canary() {
        let inb = Inbound {
            mode: Pubsub::Sharded,
            ..inbound()
        };
        let mut buf = BytesMut::new();
        buf.extend_from_slice(b"*3\r\n$10\r\nssubscribe\r\n$6\r\ncc:{a}\r\n:1\r\n");
        buf.extend_from_slice(b"*3\r\n$12\r\nsunsubscribe\r\n$4\r\ncc:b\r\n:0\r\n");
        buf.extend_from_slice(b"*2\r\n$4\r\npong\r\n$3\r\n123\r\n");
        buf.extend_from_slice(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
        let mut msg = b"*3\r\n$8\r\nsmessage\r\n$6\r\ncc:{a}\r\n".to_vec();
        let env = text_envelope(b"hi");
        msg.extend_from_slice(format!("${}\r\n", env.len()).as_bytes());
        msg.extend_from_slice(&env);
        msg.extend_from_slice(b"\r\n");
        buf.extend_from_slice(&msg);
        let mut got = Vec::new();
        while let Some(e) = inb.next(&mut buf).unwrap() {
            got.push(e);
        }
        let a = Some(Bytes::from_static(b"a"));
        assert_eq!(
            got[..4],
            [
                Event::Replied {
                    channel: a.clone(),
                    subscribed: true
                },
                Event::Replied {
                    channel: None,
                    subscribed: false
                },
                Event::Canary(Bytes::from_static(b"123")),
                Event::Other,
            ]
        );
        assert!(matches!(&got[4], Event::Deliver { channel, .. } if &channel[..] == b"a"));
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
