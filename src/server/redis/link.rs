//! The Redis side of a worker as the rest of the worker sees it: publish
//! and command queues, readiness, counters. The connections that serve
//! it are driven by `command`, `subscriber` and `canary`.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rustls::ClientConfig;

use super::reply::{CmdKind, ReplyWaiter};
use super::sentinels::Sentinels;
use super::shard::Shard;
use super::slots::Cluster;
use crate::config::Config;
use crate::history::relay::{Fetch, Snapshot};
use crate::history::{HistoryLimits, NamespaceLimits};
use crate::hub::Message;
use crate::log;
use crate::redis::cluster;
use crate::redis::commands::{self, Pubsub};
use crate::redis::envelope::{Envelope, Origin, Rejected};
use crate::redis::inbound::Inbound;
use crate::redis::resp::{self, Limits, PipelineFull};
use crate::redis::stream::{self, Keeping};
use crate::stats::RedisStats;
use crate::ws::OpCode;

/// What the Redis link needs from the worker it serves: a narrow handle,
/// so the link never sees the worker's other state.
pub trait Local {
    /// Delivers a message that came back from Redis to local subscribers
    /// (`skip`: the serial of a local publisher to leave out).
    fn deliver(&self, msg: Message<'_>, skip: Option<u64>);
    /// Starts logging interest changes (channels gaining their first or
    /// losing their last local subscriber).
    fn track_interest(&self);
    /// Every channel with local subscribers now; clears the change log.
    fn interest_snapshot(&self) -> Vec<Rc<str>>;
    /// The channels with local subscribers `keep` selects (one cluster
    /// shard's), each owing one answer; the change log is kept.
    fn interest_resend(&self, keep: &dyn Fn(&str) -> bool) -> Vec<Rc<str>>;
    /// A cluster shard's subscriber connection is gone: its `channels`
    /// count as confirmed and their waiting acknowledgements are sent.
    fn interest_reset(&self, channels: &[Rc<str>]);
    /// Waits for interest changes and moves them into `out`.
    fn poll_interest(&self, cx: &mut Context<'_>, out: &mut Vec<(Rc<str>, bool)>) -> Poll<()>;
    /// Redis answered a subscribe or unsubscribe for `channel` (the
    /// subscriptions it confirms may now be acknowledged).
    fn interest_answered(&self, channel: &str);
    /// The subscriber connection is gone (acknowledgements waiting for it
    /// are due: publishes wait for the next connection's restore).
    fn interest_lost(&self);
    /// Delivers a message that carries its history position (history
    /// on): in offset order, exactly once; a skipped range is held back
    /// and returned as a read to make.
    fn deliver_at(&self, channel: &str, env: Envelope, skip: Option<u64>) -> Option<Fetch>;
    /// A read made for a [`Fetch`] came back (`None`: it failed); the
    /// next read to make when it was cut short.
    fn fetched(&self, fetch: &Fetch, snap: Option<Snapshot>) -> Option<Fetch>;
    /// The subscriber connection is back: the reads that find what it
    /// missed while it was down (one per channel with history and local
    /// subscribers).
    fn catch_up(&self) -> Vec<Fetch>;
    /// Redis confirmed our subscription to `channel`: the read that finds
    /// what was published since its first local subscriber's read.
    fn confirmed(&self, channel: &str) -> Vec<Fetch>;
}

/// Least time between two "redis message dropped" log lines.
const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The Redis side of a worker: settings, its shard and counters.
pub struct RedisLink {
    pub(super) prefix: String,
    pub(super) canary_key: String,
    pub(super) instance: u64,
    pub(super) connect_timeout: Duration,
    pub(super) command_timeout: Duration,
    pub(super) canary_interval: Duration,
    pub(super) resume_delay: Duration,
    pub(super) started: Instant,
    /// Bounds of every reply read from Redis.
    pub(super) limits: Limits,
    /// How subscriber-connection bytes become events.
    pub(super) inbound: Inbound,
    /// When a dropped message was last logged, and how many since.
    drop_log: Cell<(Option<Instant>, u64)>,
    /// The Redis servers this link talks to: one with `--redis-url`, one
    /// per master with `--redis-cluster` (only appended to; a shard that
    /// lost its slots is retired, not removed).
    pub(super) shards: RefCell<Vec<Rc<Shard>>>,
    /// The slot map and its upkeep (`--redis-cluster`).
    pub(super) cluster: Option<Cluster>,
    /// The Sentinels and the master they name (`redis+sentinel://`).
    pub(super) sentinel: Option<Sentinels>,
    /// Plain or sharded pub/sub.
    pub(super) mode: Pubsub,
    /// Byte bounds of a shard's pipeline (publishes, cache writes).
    pub(super) buffers: (usize, usize),
    /// Counters, read by `/stats` and `/metrics`.
    pub stats: RefCell<RedisStats>,
    /// How channel history is kept in Redis: the default limits, the
    /// namespaces' (see [`RedisLink::keeping_of`]), and the read budget.
    history: (HistoryLimits, NamespaceLimits, usize),
    /// Largest payload read back from a stream (`--max-message-size`).
    pub(super) max_message: usize,
    /// Epochs minted for channels Redis has no history for.
    minted: Cell<u64>,
    /// Whether presence is on (its scripts are loaded on connect).
    pub(super) presence: bool,
    /// The process's TLS client configuration, for `rediss://` (set
    /// whenever the URL or the seeds are `rediss://`).
    pub(super) tls: Option<Arc<ClientConfig>>,
}

impl RedisLink {
    /// The link for `cfg`, if Redis mode is on; `tls`: the process's TLS
    /// client configuration (needed for `rediss://`).
    pub fn new(cfg: &Config, tls: Option<Arc<ClientConfig>>) -> Option<Rc<RedisLink>> {
        let url = cfg.redis.first_url()?;
        let cluster = cfg.redis.cluster.clone().map(Cluster::new);
        let mode = match cluster {
            Some(_) => Pubsub::Sharded,
            None => Pubsub::Plain,
        };
        let buffers = (cfg.redis.publish_buffer, cfg.redis.cache_write_buffer);
        let shards = match cluster {
            // Known once the topology is read.
            Some(_) => Vec::new(),
            None => vec![Rc::new(Shard::new(url, buffers.0, buffers.1))],
        };
        let sentinel = cfg.redis.sentinel.clone().map(Sentinels::new);
        if sentinel.is_some() {
            // No connection until the Sentinels name the master.
            shards[0].retired.set(true);
        }
        let instance = RandomState::new().build_hasher().finish() | 1;
        // `!` is not allowed in channel names: no client can collide.
        let canary_key = format!("{}!canary:{instance:016x}", cfg.redis.prefix);
        let limits = Limits {
            max_len: cfg.redis.max_reply_size,
            ..Limits::default()
        };
        Some(Rc::new(RedisLink {
            prefix: cfg.redis.prefix.clone(),
            inbound: Inbound {
                prefix: cfg.redis.prefix.clone(),
                canary_key: canary_key.clone(),
                limits,
                max_message: cfg.ws.max_message_size,
                mode,
            },
            canary_key,
            limits,
            drop_log: Cell::new((None, 0)),
            instance,
            connect_timeout: cfg.redis.connect_timeout,
            command_timeout: cfg.redis.command_timeout,
            canary_interval: cfg.redis.canary_interval,
            resume_delay: cfg.redis.resume_delay,
            started: Instant::now(),
            shards: RefCell::new(shards),
            cluster,
            sentinel,
            mode,
            buffers,
            stats: RefCell::new(RedisStats::default()),
            history: (
                cfg.history,
                cfg.history_namespaces(),
                cfg.redis.max_reply_size / 2,
            ),
            max_message: cfg.ws.max_message_size,
            minted: Cell::new(0),
            // Pusher presence channels use the same scripts.
            presence: cfg.presence.enabled() || !cfg.pusher.apps.is_empty(),
            tls,
        }))
    }

    /// Queues a PUBLISH of `payload` to `channel`; with `want_reply`, a
    /// waiter that resolves when Redis confirms it. Counted either way.
    pub fn publish(
        &self,
        channel: &str,
        opcode: OpCode,
        payload: &[u8],
        sender: u64,
        want_reply: bool,
    ) -> Result<Option<Rc<ReplyWaiter>>, PipelineFull> {
        self.publish_tagged((channel, opcode, payload, None), sender, want_reply)
    }

    /// [`RedisLink::publish`] of a message that may carry tags.
    pub fn publish_tagged(
        &self,
        (channel, opcode, payload, meta): Message<'_>,
        sender: u64,
        want_reply: bool,
    ) -> Result<Option<Rc<ReplyWaiter>>, PipelineFull> {
        let origin = Origin {
            instance: self.instance,
            sender,
        };
        let Some(shard) = self.route_channel(channel) else {
            // Cluster topology not known yet: nowhere to hold it.
            self.stats.borrow_mut().publishes_rejected += 1;
            return Err(PipelineFull);
        };
        let msg = (opcode, origin, payload, meta.map(|m| m.wire()));
        // Pusher's channels are published plainly: nothing reads their
        // history back (see `channel::keeps_history`).
        let keeping = self
            .keeping_of(channel)
            .filter(|_| crate::channel::keeps_history(channel));
        let cmd = match keeping {
            Some(k) => {
                let epoch = self.mint_epoch();
                stream::publish((self.mode, &self.prefix, channel), msg, &k, &epoch)
            }
            None => commands::publish_as(self.mode, &self.prefix, channel, msg),
        };
        let waiter = want_reply.then(|| Rc::new(ReplyWaiter::default()));
        let pushed = shard.push(cmd, CmdKind::Publish(waiter.clone()));
        let mut stats = self.stats.borrow_mut();
        match pushed {
            Ok(()) => {
                stats.publishes += 1;
                shard.stats.borrow_mut().publishes += 1;
            }
            Err(_) => stats.publishes_rejected += 1,
        }
        pushed.map(|()| waiter)
    }

    /// An epoch for a channel Redis has no history for (used only if
    /// Redis has none when the script runs): unique per instance and call.
    fn mint_epoch(&self) -> String {
        let n = self.minted.get() + 1;
        self.minted.set(n);
        // The instance id is random per process; the counter makes every
        // call's candidate differ (a channel recreated by the same
        // instance must not get its old epoch back).
        format!("{:016x}{n:x}", self.instance)
    }

    /// Whether channel history is kept in Redis (for some channel).
    pub fn keeps_history(&self) -> bool {
        self.history.0.enabled() || self.history.1.any_enabled()
    }

    /// Whether `channel` keeps history (its namespace's `history-size`).
    pub fn keeps_history_of(&self, channel: &str) -> bool {
        self.keeping_of(channel).is_some()
    }

    /// How `channel`'s history is kept (its namespace's limits, else the
    /// global ones); `None` when it keeps none.
    fn keeping_of(&self, channel: &str) -> Option<Keeping> {
        let (default, namespaces, read_bytes) = &self.history;
        let l = namespaces.of(channel, default);
        l.enabled().then(|| Keeping {
            size: l.size,
            ttl_s: l.ttl_ms.div_ceil(1000).max(1),
            read_bytes: *read_bytes,
        })
    }

    /// Queues a read of `channel`'s position and its stream from offset
    /// `from` (at most `--history-size` entries; none when `from` is 0).
    /// With `create`, a channel without history gets an epoch (a
    /// subscriber needs a position); without, it is left alone.
    pub fn read_history(
        &self,
        channel: &str,
        from: u64,
        create: bool,
    ) -> Result<Rc<ReplyWaiter>, PipelineFull> {
        // A channel without history (a backfill of one whose namespace
        // keeps none) reads its position and no entries.
        let k = self.keeping_of(channel).unwrap_or(Keeping {
            size: 0,
            ttl_s: self.history.0.ttl_ms.div_ceil(1000).max(1),
            read_bytes: self.history.2,
        });
        let count = if from == 0 { 0 } else { k.size };
        let epoch = if create {
            self.mint_epoch()
        } else {
            String::new()
        };
        let cmd = stream::read(&self.prefix, channel, &k, &epoch, from.max(1), count);
        let waiter = Rc::new(ReplyWaiter::default());
        let shard = self.route_channel(channel).ok_or(PipelineFull)?;
        shard.push(cmd, CmdKind::Command(waiter.clone()))?;
        Ok(waiter)
    }

    /// Queues any command (not a publish) and returns where to wait for
    /// its reply; refused while the pipeline is full. Callers bound their
    /// wait with a timeout: while Redis is down the command waits in the
    /// pipeline like a publish.
    /// In a cluster the command goes to the master of its first key (see
    /// `route_args`); a script's keys must share a hash tag.
    pub fn command(&self, args: &[&[u8]]) -> Result<Rc<ReplyWaiter>, PipelineFull> {
        let waiter = Rc::new(ReplyWaiter::default());
        self.route_args(args)?
            .push(resp::command(args), CmdKind::Command(waiter.clone()))?;
        Ok(waiter)
    }

    /// Where `channel`'s presence lives in Redis, as this instance.
    /// (`events`: the hub channel its events go to).
    pub fn presence_place<'a>(
        &'a self,
        channel: &'a str,
        events: &'a str,
    ) -> crate::redis::presence::Place<'a> {
        crate::redis::presence::Place {
            prefix: &self.prefix,
            channel,
            instance: self.instance,
            events,
            sender: 0,
            mode: self.mode,
        }
    }

    /// Where Pusher app `app`'s channel occupancy lives, as this instance.
    pub fn occupancy_place<'a>(&'a self, app: &'a str) -> crate::redis::occupancy::Place<'a> {
        crate::redis::occupancy::Place {
            prefix: &self.prefix,
            app,
            instance: self.instance,
        }
    }

    /// Queues a command already encoded (a presence script's `EVALSHA`)
    /// on the server of `key` (its first key); as [`RedisLink::command`].
    pub fn command_encoded(
        &self,
        key: &[u8],
        cmd: bytes::Bytes,
    ) -> Result<Rc<ReplyWaiter>, PipelineFull> {
        let shard = self.route(key).ok_or(PipelineFull)?;
        let waiter = Rc::new(ReplyWaiter::default());
        shard.push(cmd, CmdKind::Command(waiter.clone()))?;
        Ok(waiter)
    }

    /// How many servers a keyspace walk visits (`SCAN` sees one node's
    /// keys): 1 with `--redis-url`, the masters of a cluster.
    pub fn nodes(&self) -> usize {
        self.live_shards().len()
    }

    /// Whether keys of different slots must go in separate commands
    /// (`--redis-cluster`: a multi-key command across slots is CROSSSLOT).
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// Queues a command on server `node` of [`RedisLink::nodes`] (a walk
    /// whose topology changed midway goes on against another master: the
    /// caller bounds its walk).
    pub fn command_on(&self, node: usize, args: &[&[u8]]) -> Result<Rc<ReplyWaiter>, PipelineFull> {
        let shard = self.live_shards().get(node).cloned().ok_or(PipelineFull)?;
        let waiter = Rc::new(ReplyWaiter::default());
        shard.push(resp::command(args), CmdKind::Command(waiter.clone()))?;
        Ok(waiter)
    }

    /// Masters (not retired shards).
    pub(super) fn live_shards(&self) -> Vec<Rc<Shard>> {
        let shards = self.shards.borrow();
        shards
            .iter()
            .filter(|s| !s.retired.get())
            .cloned()
            .collect()
    }

    /// The shard serving `key` (`None`: cluster topology not known yet).
    pub(super) fn route(&self, key: &[u8]) -> Option<Rc<Shard>> {
        self.route_slot(cluster::slot(key))
    }

    /// The shard serving `slot` (any slot with one Redis).
    pub(super) fn route_slot(&self, slot: u16) -> Option<Rc<Shard>> {
        let i = match &self.cluster {
            None => 0,
            Some(c) => c.shard_of(slot)?,
        };
        self.shards.borrow().get(i).cloned()
    }

    /// The shard serving a channel: its sharded name's slot.
    pub(super) fn route_channel(&self, channel: &str) -> Option<Rc<Shard>> {
        match self.mode {
            Pubsub::Plain => self.route_slot(0),
            Pubsub::Sharded => self.route_slot(cluster::channel_slot(&self.prefix, channel)),
        }
    }

    /// The shard of a command's first key: `args[1]`, or for `EVAL` /
    /// `EVALSHA` (`sha numkeys key...`) `args[3]`.
    fn route_args(&self, args: &[&[u8]]) -> Result<Rc<Shard>, PipelineFull> {
        let verb = args.first().copied().unwrap_or_default();
        let script = verb.eq_ignore_ascii_case(b"EVALSHA") || verb.eq_ignore_ascii_case(b"EVAL");
        let key = args.get(if script { 3 } else { 1 }).copied();
        self.route(key.unwrap_or_default()).ok_or(PipelineFull)
    }

    /// Queues a cache store write; refused once cache writes hold
    /// `--cache-redis-write-buffer` bytes (publishes are unaffected).
    pub fn cache_write(&self, args: &[&[u8]]) -> Result<Rc<ReplyWaiter>, PipelineFull> {
        let waiter = Rc::new(ReplyWaiter::default());
        self.route_args(args)?
            .push_cache(resp::command(args), CmdKind::Command(waiter.clone()))?;
        Ok(waiter)
    }

    /// Whether commands are being written to Redis right now (connected,
    /// subscriptions restored).
    /// In a cluster: every master.
    pub fn is_up(&self) -> bool {
        let shards = self.live_shards();
        !shards.is_empty() && shards.iter().all(|s| s.is_up())
    }

    /// Commands waiting (unsent or unconfirmed).
    pub fn buffered(&self) -> usize {
        let shards = self.shards.borrow();
        shards.iter().map(|s| s.pipeline.borrow().len()).sum()
    }

    /// The command timeout (`--redis-command-timeout`).
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// `Ok` when this instance can deliver through Redis now, else why not.
    /// In a cluster: every master, each named in the answer.
    pub fn readiness(&self) -> Result<(), String> {
        let shards = self.live_shards();
        if let Some(c) = &self.cluster {
            if shards.is_empty() {
                let e = c.error.borrow();
                let e = e.as_deref().unwrap_or("reading the topology");
                return Err(format!("redis cluster topology unknown: {e}"));
            }
        }
        if let Some(s) = &self.sentinel {
            if shards.is_empty() {
                return Err(s.unknown_reason());
            }
        }
        for shard in &shards {
            if let Err(why) = self.shard_readiness(shard) {
                return Err(match &self.cluster {
                    Some(_) => format!("redis cluster node {}: {why}", shard.addr()),
                    None => why,
                });
            }
        }
        Ok(())
    }

    fn shard_readiness(&self, shard: &Shard) -> Result<(), String> {
        let h = shard.health.borrow();
        let why = if !h.cmd_connected || !h.sub_connected {
            let e = h.last_error.as_deref().unwrap_or("connecting");
            format!("redis not connected: {e}")
        } else if !h.restored {
            "redis subscriptions not yet restored".to_string()
        } else if h
            .last_canary
            .is_none_or(|t| t.elapsed() > self.canary_deadline())
        {
            "redis canary has not made the round trip in time".to_string()
        } else {
            return Ok(());
        };
        Err(why)
    }

    /// A snapshot of the counters with the gauges filled in.
    pub fn stats(&self) -> RedisStats {
        let mut s = self.stats.borrow().clone();
        s.publishes_buffered = self.buffered() as u64;
        if self.cluster.is_some() {
            let shards = self.shards.borrow();
            s.shards = shards.iter().map(|sh| sh.snapshot()).collect();
            // Every master's command connection, not the last one to move.
            let live = shards.iter().filter(|sh| !sh.retired.get());
            let up = live.clone().all(|sh| sh.health.borrow().cmd_connected);
            s.connected = u64::from(up && live.count() > 0);
        }
        s
    }

    /// Counts a message from Redis that was not delivered; logs at most
    /// one line per [`DROP_LOG_INTERVAL`] (with the number suppressed), so
    /// a hostile or broken publisher cannot flood the log.
    pub(super) fn dropped(&self, why: Rejected) {
        self.stats.borrow_mut().messages_dropped += 1;
        let (last, suppressed) = self.drop_log.get();
        if last.is_some_and(|t| t.elapsed() < DROP_LOG_INTERVAL) {
            self.drop_log.set((last, suppressed + 1));
            return;
        }
        self.drop_log.set((Some(Instant::now()), 0));
        log!(
            Warn,
            "redis message dropped",
            reason = why.reason(),
            suppressed = suppressed
        );
    }

    pub(super) fn canary_deadline(&self) -> Duration {
        (self.canary_interval * 3).max(Duration::from_secs(1))
    }
}
