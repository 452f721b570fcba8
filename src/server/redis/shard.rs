//! One Redis server as a link uses it: its address, the queue of commands
//! for its command connection, the subscriber connection's socket, and
//! the health of both. Today a link has one shard; Redis Cluster will
//! hold one per master behind a slot map.

use std::cell::{Cell, RefCell};
use std::task::Waker;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::reply::CmdKind;
use crate::redis::resp::{Pipeline, PipelineFull};
use crate::redis::RedisUrl;

/// What `/readyz` and `/stats` report about a shard's connections.
#[derive(Debug, Default)]
pub struct Health {
    /// The command connection is up.
    pub cmd_connected: bool,
    /// The subscriber connection is up.
    pub sub_connected: bool,
    /// Every channel with local subscribers is subscribed again.
    pub restored: bool,
    /// When `restored` last became true.
    pub restored_at: Option<Instant>,
    /// When the last canary came back.
    pub last_canary: Option<Instant>,
    /// Its round trip.
    pub canary_rtt: Option<Duration>,
    /// The last connection error, for `/readyz`.
    pub last_error: Option<String>,
}

/// One Redis server: address, command queue, connection state.
pub struct Shard {
    pub(super) url: RedisUrl,
    /// Commands not yet written or not yet answered (byte-bounded).
    pub(super) pipeline: RefCell<Pipeline<CmdKind>>,
    /// The command connection's writer, asleep until there is work.
    pub(super) cmd_waker: RefCell<Option<Waker>>,
    /// Both connections' state.
    pub(super) health: RefCell<Health>,
    /// The subscriber connection's socket while it is up (the canary
    /// cuts it when messages stop arriving).
    pub(super) sub_fd: Cell<Option<i32>>,
}

impl Shard {
    pub(super) fn new(url: RedisUrl, publish_buffer: usize, cache_write_buffer: usize) -> Shard {
        Shard {
            url,
            pipeline: RefCell::new(Pipeline::new(publish_buffer, cache_write_buffer)),
            cmd_waker: RefCell::new(None),
            health: RefCell::new(Health::default()),
            sub_fd: Cell::new(None),
        }
    }

    /// Queues a command and wakes the command connection's writer.
    pub(super) fn push(&self, cmd: Bytes, kind: CmdKind) -> Result<(), PipelineFull> {
        self.pipeline.borrow_mut().push(cmd, kind)?;
        self.wake_writer();
        Ok(())
    }

    /// Queues a cache store write (its own byte budget) and wakes the writer.
    pub(super) fn push_cache(&self, cmd: Bytes, kind: CmdKind) -> Result<(), PipelineFull> {
        self.pipeline.borrow_mut().push_cache(cmd, kind)?;
        self.wake_writer();
        Ok(())
    }

    pub(super) fn wake_writer(&self) {
        if let Some(w) = self.cmd_waker.borrow_mut().take() {
            w.wake();
        }
    }
}
