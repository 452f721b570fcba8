//! Redis mode's network edge: a worker's connections to Redis and their
//! upkeep, around a [`Shard`](shard::Shard) (one Redis server: address,
//! command queue, two connections, health). The RESP, the commands and the
//! envelope are sans-I/O in `crate::redis`.
//!
//! # Layout
//! - `link`: [`RedisLink`], what the worker sees (publish, commands,
//!   readiness, counters) and [`Local`], what the link needs from the
//!   worker (delivery and the interest log) — a narrow handle.
//! - `shard`: one Redis server's queue and connection state.
//! - `reply`: what a queued command's reply is for; [`ReplyWaiter`].
//! - `conn`: connect + handshake, reads, the reconnect loop shared by
//!   both connections.
//! - `command`: the pipelined command connection.
//! - `subscriber`: the subscriber connection and the interest follower.
//! - `canary`: the readiness canary.
//! - `backfill`: reads of a channel's history stream (resume, gaps).
//!
//! Imports go one way: `command`, `subscriber`, `canary` → `backfill`, `link`,
//! `shard`, `reply`, `conn`; nothing here imports the worker.

mod backfill;
mod canary;
mod command;
mod conn;
mod link;
mod reply;
mod shard;
mod subscriber;

use std::rc::Rc;

pub use backfill::{read as read_history, read_if_any as read_history_if_any};
pub use link::{Local, RedisLink};
pub use reply::ReplyWaiter;

/// Starts the link's connection tasks on the current worker.
pub fn spawn(link: &Rc<RedisLink>, local: Rc<dyn Local>) {
    local.track_interest();
    monoio::spawn(command::keep_up(link.clone()));
    monoio::spawn(subscriber::keep_up(link.clone(), local));
    monoio::spawn(canary::run(link.clone()));
}
