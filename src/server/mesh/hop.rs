//! What crosses between workers: messages ([`Msg`]) and the other hops
//! ([`Hop`]), with the sizes the overflow queue and the in-flight window
//! count.

use std::sync::Arc;

use bytes::Bytes;

use crate::hub::Frames;
use crate::meta::Meta;
use crate::stats::Snapshot;
use crate::ws::OpCode;

/// A message crossing between workers; its payload is shared by every
/// worker it goes to.
#[derive(Debug)]
pub struct Msg {
    pub channel: Arc<str>,
    pub opcode: OpCode,
    pub payload: Bytes,
    /// The publishing connection (its worker's id, with the exclude
    /// flags), 0 for none.
    pub sender: u64,
    /// The worker it was published on.
    pub from: u8,
    /// Who waits for the number of deliveries (worker, count id): an
    /// HTTP publish's or a JSON publish's reply.
    pub ask: Option<(u8, u64)>,
    /// Copies of the frames its owner encoded (deliveries), this
    /// receiver's alone: it reuses them instead of encoding
    /// (compressing) the message again. Not cloned with the message.
    pub frames: Option<Box<Frames>>,
    /// The position (epoch, offset) its owner's history gave it: the
    /// receiver keeps it in its copy of the ring (`history::owner`).
    pub at: Option<(Arc<str>, u64)>,
    /// Kept out of history (a publish hook's `skip_history`).
    pub unrecorded: bool,
    /// Its tags and key, if it has any.
    pub meta: Option<Arc<Meta>>,
}

impl Clone for Msg {
    /// The message without its frames (each receiver gets its own copies).
    fn clone(&self) -> Msg {
        Msg {
            channel: self.channel.clone(),
            opcode: self.opcode,
            payload: self.payload.clone(),
            sender: self.sender,
            from: self.from,
            ask: self.ask,
            frames: None,
            at: self.at.clone(),
            unrecorded: self.unrecorded,
            meta: self.meta.clone(),
        }
    }
}

impl Msg {
    /// An owner's announcement on `channel` (a presence event): text,
    /// kept out of history, every subscriber but connection `sender` of
    /// worker `from` (0: none).
    pub fn announcement(channel: &str, text: String, (from, sender): (u8, u64)) -> Msg {
        Msg {
            channel: Arc::from(channel),
            opcode: OpCode::Text,
            payload: Bytes::from(text),
            sender,
            from,
            ask: None,
            frames: None,
            at: None,
            unrecorded: true,
            meta: None,
        }
    }

    /// Bytes it holds, its frames' copies included (what the overflow
    /// queue and the in-flight window count).
    pub(super) fn size(&self) -> usize {
        let frames = self.frames.iter().flat_map(|f| f.iter().flatten());
        let tags = self.meta.as_ref().map_or(0, |m| m.wire().len());
        self.payload.len() + self.channel.len() + tags + 64 + frames.map(|b| b.len()).sum::<usize>()
    }

    /// The sender to leave out on worker `at`: only the publisher's own
    /// worker knows the id.
    pub fn skip_at(&self, at: usize) -> Option<u64> {
        (at == self.from as usize && self.sender != 0).then_some(self.sender)
    }
}

/// What a gathering asks every other worker for.
#[derive(Debug, Clone)]
pub enum Asked {
    /// Its counters.
    Counters,
    /// Its channels whose names start with the prefix, with their
    /// subscribers (the Pusher HTTP API's listings).
    Channels(Arc<str>),
}

/// A worker's answer to a gathering.
#[derive(Debug)]
pub enum Told {
    Counters(Box<Snapshot>),
    Channels(Vec<(String, u64)>),
}

/// What crosses from one worker to another.
#[derive(Debug)]
pub enum Hop {
    /// A publish for the channel's owner to sequence and fan out.
    Publish(Msg),
    /// A sequenced message for the receiver's own subscribers.
    Deliver(Msg),
    /// Worker `from` gained (`on`) or lost its local subscribers of a
    /// channel the receiver owns.
    Interest {
        from: u8,
        channel: Arc<str>,
        on: bool,
    },
    /// The owner took an interest change of the receiver's: its waiting
    /// acknowledgements are due.
    Answered(Arc<str>),
    /// Worker `from` asks for the receiver's counters (`/stats`,
    /// `/metrics`) or channels, for its gathering `id`.
    Ask { from: u8, id: u64, what: Asked },
    /// The answer to an [`Hop::Ask`].
    Told { id: u64, worker: u8, told: Told },
    /// Deliveries of a publish the receiver counts (`ask`): `n` made by
    /// the sender; from the channel's owner, `more` says how many other
    /// workers were sent the message and will answer too.
    Counted { id: u64, n: u64, more: Option<u32> },
    /// A server API command (`/api/*`) for the receiver's connections,
    /// from worker `from`: answered with [`Hop::Counted`] (connections
    /// acted on) or, for a listing, [`Hop::Listed`], under `id`.
    Api {
        from: u8,
        id: u64,
        cmd: Box<crate::hooks::api::Command>,
    },
    /// The receiver's share of a `GET /api/connections` listing.
    Listed(Box<crate::hooks::api::ConnectionsAnswer>),
    /// Worker `from` has no copy of the history of a channel the
    /// receiver owns: its position, for wait `id` (with `create`, made
    /// if the channel has none, as a subscribe does).
    Locate {
        from: u8,
        id: u64,
        channel: Arc<str>,
        create: bool,
    },
    /// The answer to a [`Hop::Locate`]: the channel's position, `None`
    /// when it has no history.
    Located {
        id: u64,
        channel: Arc<str>,
        at: Option<(Arc<str>, u64)>,
    },
    /// A connection of worker `from` (its slot `conn`, its `serial`)
    /// joins (`Some(user, info)`) or leaves (`None`) the presence of a
    /// channel the receiver owns; a join with a wait `id` (not 0) is
    /// answered ([`Hop::Answer`]).
    Presence {
        from: u8,
        id: u64,
        conn: (u64, u64),
        channel: Arc<str>,
        join: Option<Box<(String, Option<String>)>>,
    },
    /// Worker `from` asks for the members of a channel the receiver
    /// owns, for its wait `id`.
    Members {
        from: u8,
        id: u64,
        channel: Arc<str>,
    },
    /// Worker's console summary, each second (`--admin-key`): a row of
    /// every worker's instances table.
    Summary(Box<crate::console::snapshot::Instance>),
    /// A worker's fetch of a cache key (claimed for the process) is over:
    /// the receiver's requests waiting for it read the store.
    CacheReleased(Arc<[u8]>),
    /// An owner's answer to wait `id` of the receiver's.
    Answer { id: u64, answer: Answer },
    /// An accepted connection handed to the receiver (the least loaded).
    Conn {
        stream: std::net::TcpStream,
        peer: std::net::IpAddr,
        admin: bool,
    },
}

/// What a channel's owner worker answers a request of this worker's.
#[derive(Debug)]
pub enum Answer {
    /// Its history's position arrived (`history::owner`).
    Located,
    /// The user joined its presence (`presence::owner`): whether the
    /// join was announced (to every watcher but the joiner, which its own
    /// worker tells after its reply); `None`: the channel is full.
    Joined(Option<bool>),
    /// Its members (user, info, connections), when asked for them.
    Members(Vec<(String, Option<String>, u32)>),
}

impl Hop {
    /// A message's bytes (publishes and deliveries: what the in-flight
    /// window counts).
    pub fn message_bytes(&self) -> Option<usize> {
        match self {
            Hop::Publish(m) | Hop::Deliver(m) => Some(m.size()),
            _ => None,
        }
    }

    pub(super) fn size(&self) -> usize {
        match self {
            Hop::Publish(m) | Hop::Deliver(m) => m.size(),
            _ => 64,
        }
    }
}
