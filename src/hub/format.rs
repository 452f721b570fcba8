//! Wire formats, seen from the hub: a connection carries a [`Format`] id,
//! and the network edge supplies one encoder per id ([`Encoders`], built
//! in `server::formats`). The hub never knows what a format looks like on
//! the wire, so a new protocol (or compressed frames) adds an encoder, not
//! a hub edit.
//!
//! A publish encodes lazily, at most once per format in use among the
//! channel's subscribers (`FrameCache`), and every subscriber of one
//! format gets a reference-counted clone of the same frame.

use std::sync::Arc;

use bytes::Bytes;

use crate::meta::Meta;
use crate::ws::OpCode;

/// Most wire formats (encoder slots) a hub can serve.
pub const MAX_FORMATS: usize = 16;

/// A wire format id: an index into the edge's [`Encoders`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format(u8);

impl Format {
    /// Format number `n`; panics unless `n < MAX_FORMATS` (ids are
    /// constants of the edge, so that is a programming error).
    pub const fn new(n: u8) -> Format {
        assert!((n as usize) < MAX_FORMATS, "format id out of range");
        Format(n)
    }

    /// The encoder slot. The mask is a no-op (`new` checks the range) that
    /// lets the compiler drop the bounds check on the fan-out path.
    fn slot(self) -> usize {
        self.0 as usize & (MAX_FORMATS - 1)
    }
}

/// A message as a publish hands it to the fan-out: its channel, frame
/// type, bytes, and tags and key.
pub type Message<'a> = (&'a str, OpCode, &'a [u8], Option<&'a Arc<Meta>>);

/// One published message, as an encoder sees it.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    /// The channel it was published to.
    pub channel: &'a str,
    /// Text or binary.
    pub opcode: OpCode,
    /// The message as published.
    pub payload: &'a [u8],
    /// Its offset in the channel's history (0: the channel has none).
    pub offset: u64,
    /// The channel's history epoch at `offset` (empty: none, or not
    /// known where it was published; Server-Sent Events name it in
    /// their event ids).
    pub epoch: &'a str,
    /// The publication's meta, if it has any (the JSON protocol shows
    /// its tags and idempotency key: [`Meta::head`]).
    pub meta: Option<&'a Meta>,
    /// The Fossil delta (`crate::delta`, UTF-8) that turns the channel's
    /// previous publication into this one, for a subscriber that has the
    /// previous one: the JSON protocol sends it as `data` with
    /// `"delta":true` (`None`: the payload itself).
    pub patch: Option<&'a str>,
}

/// Encodes a delivery into one complete server frame (or several frames
/// back to back) for one wire format.
pub type Encoder = Box<dyn Fn(&Delivery<'_>) -> Bytes>;

/// The edge's encoders, one slot per [`Format`].
pub struct Encoders {
    slots: [Option<Encoder>; MAX_FORMATS],
    /// Close code each format's connections get at graceful shutdown
    /// (`None`: the hub's 1001).
    going_away: [Option<u16>; MAX_FORMATS],
    /// Keepalive frame of each format (`None`: a WebSocket ping).
    keepalive: [Option<Bytes>; MAX_FORMATS],
    /// Close code of each format's idle connections (`None`: the socket
    /// is shut without a close frame).
    idle_close: [Option<u16>; MAX_FORMATS],
    /// Formats whose peers send nothing after their request (Server-Sent
    /// Events): their keepalive is a heartbeat sent every so many ms
    /// (0: none), answered by nothing, and they have no idle deadline.
    one_way: [Option<u64>; MAX_FORMATS],
}

impl Default for Encoders {
    fn default() -> Self {
        Encoders {
            slots: std::array::from_fn(|_| None),
            going_away: [None; MAX_FORMATS],
            keepalive: std::array::from_fn(|_| None),
            idle_close: [None; MAX_FORMATS],
            one_way: [None; MAX_FORMATS],
        }
    }
}

impl std::fmt::Debug for Encoders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set: Vec<usize> = (0..MAX_FORMATS)
            .filter(|&i| self.slots[i].is_some())
            .collect();
        f.debug_struct("Encoders").field("formats", &set).finish()
    }
}

impl Encoders {
    /// No encoders.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `format` with `encode` (replacing any earlier encoder).
    pub fn with(
        mut self,
        format: Format,
        encode: impl Fn(&Delivery<'_>) -> Bytes + 'static,
    ) -> Self {
        self.slots[format.slot()] = Some(Box::new(encode));
        self
    }

    /// Closes `format`'s connections with `code` at graceful shutdown
    /// instead of 1001 (a protocol whose clients decide on reconnecting
    /// from their own codes, as Pusher's 4200 "reconnect now").
    pub fn going_away_code(mut self, format: Format, code: u16) -> Self {
        self.going_away[format.slot()] = Some(code);
        self
    }

    /// The close code of `format`'s connections at graceful shutdown, if
    /// it has its own.
    pub fn going_away(&self, format: Format) -> Option<u16> {
        self.going_away[format.slot()]
    }

    /// Closes `format`'s connections quiet for `--idle-timeout` with
    /// `code` (then shuts them after the close timeout) instead of shutting
    /// the socket: a protocol whose clients reconnect on their own code,
    /// as Pusher's 4201 "pong reply not received".
    pub fn idle_close_code(mut self, format: Format, code: u16) -> Self {
        self.idle_close[format.slot()] = Some(code);
        self
    }

    /// The close code of `format`'s idle connections, if it has one.
    pub fn idle_close(&self, format: Format) -> Option<u16> {
        self.idle_close[format.slot()]
    }

    /// Sends `frame` (a complete server frame) instead of a WebSocket
    /// ping as `format`'s keepalive: a protocol with its own ping (Pusher's
    /// `pusher:ping`, answered with `pusher:pong`).
    pub fn keepalive_frame(mut self, format: Format, frame: Bytes) -> Self {
        self.keepalive[format.slot()] = Some(frame);
        self
    }

    /// Makes `format` one-way: its peers send nothing after their request
    /// (Server-Sent Events), so its keepalive frame is a heartbeat sent
    /// every `every_ms` (0: never) whether or not anything answered, and
    /// no idle deadline applies (a gone peer fails a write, or its socket
    /// reports the end of stream).
    pub fn one_way(mut self, format: Format, every_ms: u64) -> Self {
        self.one_way[format.slot()] = Some(every_ms);
        self
    }

    /// The heartbeat interval of a one-way `format` (`None`: two-way).
    pub fn heartbeat_of(&self, format: Format) -> Option<u64> {
        self.one_way[format.slot()]
    }

    /// Whether connections of `format` (`None`: plain HTTP) are one-way
    /// streams (Server-Sent Events, counted apart from WebSockets).
    pub fn is_one_way(&self, format: Option<Format>) -> bool {
        format.is_some_and(|f| self.heartbeat_of(f).is_some())
    }

    /// Whether `format` has an encoder.
    pub fn serves(&self, format: Format) -> bool {
        self.slots[format.slot()].is_some()
    }

    fn encode(&self, format: Format, d: &Delivery<'_>) -> Bytes {
        // `Hub::upgrade` refuses formats without an encoder.
        let encode = self.slots[format.slot()]
            .as_ref()
            .expect("upgrade checked the format has an encoder");
        encode(d)
    }
}

/// One sweep's keepalive frames: a WebSocket ping, or a format's own,
/// each copied fresh on first use so the outbound budget charges it
/// once however many connections share it.
pub(super) struct Keepalives<'a> {
    encoders: &'a Encoders,
    ping: Bytes,
    frames: [Option<Bytes>; MAX_FORMATS],
}

impl<'a> Keepalives<'a> {
    pub(super) fn new(encoders: &'a Encoders, ping: Bytes) -> Self {
        Keepalives {
            encoders,
            ping,
            frames: Default::default(),
        }
    }

    /// The keepalive for a connection of `format` (`None`: no format).
    pub(super) fn frame_for(&mut self, format: Option<Format>) -> &Bytes {
        let Some(f) = format else {
            return &self.ping;
        };
        match &self.encoders.keepalive[f.slot()] {
            None => &self.ping,
            Some(t) => self.frames[f.slot()].get_or_insert_with(|| Bytes::copy_from_slice(t)),
        }
    }
}

/// One publish's frames: encoded on first use, per format.
/// The frames one publish was encoded into, by format slot (what the
/// channel's owner worker hands to the others, so a format is encoded
/// once per publish, not once per worker).
pub type Frames = [Option<Bytes>; MAX_FORMATS];

/// Copies of `frames` that share no buffer with them (one per worker a
/// message goes to: a memcpy per format, far less than an encoding).
pub fn copy_frames(frames: &Frames) -> Frames {
    std::array::from_fn(|i| frames[i].as_deref().map(Bytes::copy_from_slice))
}

pub(super) struct FrameCache<'a> {
    delivery: Delivery<'a>,
    encoders: &'a Encoders,
    frames: [Option<Bytes>; MAX_FORMATS],
    /// The frames of the delivery as a delta (`Delivery::patch`), for
    /// subscribers that have its base; never shared with other workers
    /// (each has its own base).
    patched: Option<Box<Frames>>,
}

impl<'a> FrameCache<'a> {
    pub(super) fn new(delivery: Delivery<'a>, encoders: &'a Encoders) -> Self {
        FrameCache {
            delivery,
            encoders,
            frames: Default::default(),
            patched: None,
        }
    }

    /// A cache that starts with `frames` (another worker's encodings,
    /// copies this hub alone holds: the memory budget charges a frame
    /// when the cache's reference is its only other one).
    pub(super) fn seeded(delivery: Delivery<'a>, encoders: &'a Encoders, frames: Frames) -> Self {
        FrameCache {
            delivery,
            encoders,
            frames,
            patched: None,
        }
    }

    /// What was encoded (or seeded).
    pub(super) fn into_frames(self) -> Frames {
        self.frames
    }

    /// The frame for `format`, encoded now if this is its first subscriber.
    pub(super) fn frame_for(&mut self, format: Format) -> &Bytes {
        let (d, enc) = (&self.delivery, self.encoders);
        self.frames[format.slot()].get_or_insert_with(|| enc.encode(format, d))
    }

    /// The frame for `format` carrying `patch` (the delivery as a delta),
    /// encoded now if this is its first subscriber.
    pub(super) fn patched_for(&mut self, format: Format, patch: &'a str) -> &Bytes {
        let d = Delivery {
            patch: Some(patch),
            ..self.delivery
        };
        let enc = self.encoders;
        let frames = self.patched.get_or_insert_with(Default::default);
        frames[format.slot()].get_or_insert_with(|| enc.encode(format, &d))
    }
}
