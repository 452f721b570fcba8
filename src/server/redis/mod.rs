//! Redis mode's network edge: a worker's connections to Redis and their
//! upkeep, around a [`Shard`](shard::Shard) (one Redis server: address,
//! command queue, two connections, health). The RESP, the commands and the
//! envelope are sans-I/O in `crate::redis`.
//!
//! # Layout
//! - `link`: [`RedisLink`], what the worker sees (publish, commands,
//!   readiness, counters) and [`Local`], what the link needs from the
//!   worker (delivery and the interest log) — a narrow handle.
//! - `shard`: one Redis server's queue, interest queue and connection
//!   state.
//! - `slots`: Redis Cluster routing state — the shard per slot, refresh
//!   requests, what waits for a refresh.
//! - `topology`: the task that reads the cluster's topology and makes the
//!   shards follow it (created, re-pointed on failover, retired).
//! - `sentinels`: Redis Sentinel state — the URL, why no master is
//!   known, requests for a read.
//! - `sentinel`: the tasks that ask the Sentinels for the master, follow
//!   `+switch-master` and re-point the one shard.
//! - `redirect`: `MOVED`/`ASK` followed, moved channels and a retired
//!   shard's queue sent on.
//! - `reply`: what a queued command's reply is for; [`ReplyWaiter`].
//! - `conn`: connect + handshake, reads, the reconnect loop shared by
//!   both connections.
//! - `command`: the pipelined command connection.
//! - `subscriber`: the subscriber connection, and the router that sends
//!   the worker's interest changes to the shard serving each channel.
//! - `canary`: the readiness canary.
//! - `backfill`: reads of a channel's history stream (resume, gaps).
//!
//! Imports go one way: `topology`, `sentinel` → `command`, `subscriber`,
//! `canary` → `redirect`, `backfill` → `link` → `slots`, `sentinels`,
//! `shard`, `reply`; `conn` is shared by the connection tasks; nothing
//! here imports the worker.

mod backfill;
mod canary;
mod command;
mod conn;
mod link;
mod redirect;
mod reply;
mod sentinel;
mod sentinels;
mod shard;
mod slots;
mod subscriber;
mod topology;

use std::rc::Rc;

pub use backfill::{read as read_history, read_if_any as read_history_if_any};
pub use link::{Local, RedisLink};
pub use reply::ReplyWaiter;

/// Starts the link's connection tasks on the current worker.
pub fn spawn(link: &Rc<RedisLink>, local: Rc<dyn Local>) {
    local.track_interest();
    monoio::spawn(subscriber::router(link.clone(), local.clone()));
    if link.cluster.is_some() {
        // Shards come with the topology.
        monoio::spawn(topology::run(link.clone(), local));
        return;
    }
    let shard = link.shards.borrow()[0].clone();
    if link.sentinel.is_some() {
        // The shard connects once the Sentinels name the master.
        monoio::spawn(sentinel::run(link.clone()));
        monoio::spawn(sentinel::watch(link.clone()));
    }
    topology::spawn_shard(link, &shard, &local);
}
