//! One Redis server as a link uses it: its address, the queue of commands
//! for its command connection, the interest changes for its subscriber
//! connection, both sockets, and the health of both. With `--redis-url` a
//! link has one shard; with `--redis-cluster` one per master, behind the
//! slot map (`topology`).

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::reply::CmdKind;
use crate::redis::resp::{Pipeline, PipelineFull};
use crate::redis::RedisUrl;
use crate::server::resolve::{Resolver, REDIS_DNS_TTL};
use crate::server::sys;
use crate::stats::ShardStats;

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

/// A queued command: what its reply is for, and how often a cluster node
/// redirected it (`MOVED`/`ASK`) already.
pub(crate) type Queued = (CmdKind, u8);

/// One Redis server: address, command queue, connection state.
pub struct Shard {
    /// Where it is (a cluster shard is re-pointed to the replica that
    /// took over its slots).
    pub(super) url: RefCell<RedisUrl>,
    /// Its host name's addresses, looked up off the worker.
    pub(super) resolver: RefCell<Rc<Resolver>>,
    /// Commands not yet written or not yet answered (byte-bounded).
    pub(super) pipeline: RefCell<Pipeline<Queued>>,
    /// The command connection's writer, asleep until there is work.
    pub(super) cmd_waker: RefCell<Option<Waker>>,
    /// Both connections' state.
    pub(super) health: RefCell<Health>,
    /// The subscriber connection's socket while it is up (the canary
    /// cuts it when messages stop arriving).
    pub(super) sub_fd: Cell<Option<i32>>,
    /// The command connection's socket while it is up (cut when the
    /// shard is re-pointed).
    pub(super) cmd_fd: Cell<Option<i32>>,
    /// Interest changes routed here, not yet written: at most one per
    /// channel (a later change replaces an earlier one), none while the
    /// subscriber connection is down (its restore subscribes afresh).
    pub(super) interest: RefCell<Vec<(Rc<str>, bool)>>,
    /// The subscriber connection's writer, asleep until there is work.
    pub(super) sub_waker: RefCell<Option<Waker>>,
    /// The canary asks the subscriber writer for a `PING` (cluster).
    pub(super) ping_due: RefCell<Option<Bytes>>,
    /// Channels subscribed on this shard (cluster): a `sunsubscribe`
    /// for one of them that we did not ask for is a slot that moved.
    pub(super) subscribed: RefCell<HashSet<Rc<str>>>,
    /// Not a master any more (its slots went elsewhere): no connections.
    pub(super) retired: Cell<bool>,
    /// Counters of this shard.
    pub(super) stats: RefCell<ShardStats>,
}

impl Shard {
    pub(super) fn new(url: RedisUrl, publish_buffer: usize, cache_write_buffer: usize) -> Shard {
        Shard {
            resolver: RefCell::new(Resolver::new("redis", &url.host, url.port, REDIS_DNS_TTL)),
            url: RefCell::new(url),
            pipeline: RefCell::new(Pipeline::new(publish_buffer, cache_write_buffer)),
            cmd_waker: RefCell::new(None),
            health: RefCell::new(Health::default()),
            sub_fd: Cell::new(None),
            cmd_fd: Cell::new(None),
            interest: RefCell::new(Vec::new()),
            sub_waker: RefCell::new(None),
            ping_due: RefCell::new(None),
            subscribed: RefCell::new(HashSet::new()),
            retired: Cell::new(false),
            stats: RefCell::new(ShardStats::default()),
        }
    }

    /// `host:port`, as the cluster names its nodes.
    pub(super) fn addr(&self) -> String {
        let u = self.url.borrow();
        format!("{}:{}", u.host, u.port)
    }

    /// Moves the shard to another server (a promoted replica): both
    /// connections are cut and reopen there, with the queue and the
    /// subscriptions they hold.
    pub(super) fn repoint(&self, url: RedisUrl) {
        *self.resolver.borrow_mut() = Resolver::new("redis", &url.host, url.port, REDIS_DNS_TTL);
        *self.url.borrow_mut() = url;
        self.cut();
    }

    /// Cuts both connections (their loops reconnect, or stop if retired).
    pub(super) fn cut(&self) {
        for fd in [self.sub_fd.get(), self.cmd_fd.get()].into_iter().flatten() {
            sys::shutdown(fd);
        }
    }

    /// Queues a command and wakes the command connection's writer.
    pub(super) fn push(&self, cmd: Bytes, kind: CmdKind) -> Result<(), PipelineFull> {
        self.pipeline.borrow_mut().push(cmd, (kind, 0))?;
        self.wake_writer();
        Ok(())
    }

    /// Queues a cache store write (its own byte budget) and wakes the writer.
    pub(super) fn push_cache(&self, cmd: Bytes, kind: CmdKind) -> Result<(), PipelineFull> {
        self.pipeline.borrow_mut().push_cache(cmd, (kind, 0))?;
        self.wake_writer();
        Ok(())
    }

    pub(super) fn wake_writer(&self) {
        if let Some(w) = self.cmd_waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Queues an interest change for the subscriber connection; `true`
    /// when it will not be sent as such (it replaced a change still
    /// queued, or the connection is down and its restore will subscribe
    /// what is wanted then): a change that no command answers.
    pub(super) fn want(&self, channel: Rc<str>, gained: bool) -> bool {
        if !self.health.borrow().sub_connected {
            return true;
        }
        let mut q = self.interest.borrow_mut();
        // Linear: the queue is drained on every write, so it is short.
        if let Some(e) = q.iter_mut().find(|(c, _)| *c == channel) {
            e.1 = gained;
            return true;
        }
        q.push((channel, gained));
        drop(q);
        self.wake_subscriber();
        false
    }

    pub(super) fn wake_subscriber(&self) {
        if let Some(w) = self.sub_waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Takes the queued interest changes (and a due canary `PING`);
    /// pending while there are none.
    pub(super) fn poll_interest(
        &self,
        cx: &mut Context<'_>,
        out: &mut Vec<(Rc<str>, bool)>,
        ping: &mut Option<Bytes>,
    ) -> Poll<()> {
        let mut q = self.interest.borrow_mut();
        *ping = self.ping_due.borrow_mut().take();
        if q.is_empty() && ping.is_none() {
            *self.sub_waker.borrow_mut() = Some(cx.waker().clone());
            return Poll::Pending;
        }
        out.append(&mut q);
        Poll::Ready(())
    }

    /// Its counters with the gauges filled in.
    pub(super) fn snapshot(&self) -> ShardStats {
        let mut s = self.stats.borrow().clone();
        s.addr = self.addr();
        s.connected = u64::from(self.is_up() && self.health.borrow().sub_connected);
        s.subscriptions = self.subscribed.borrow().len() as u64;
        s
    }

    /// Whether this shard is up for commands and subscriptions.
    pub(super) fn is_up(&self) -> bool {
        let h = self.health.borrow();
        h.cmd_connected && h.restored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard() -> Shard {
        let url: RedisUrl = "redis://127.0.0.1:7000".parse().unwrap();
        Shard::new(url, 1 << 20, 1 << 20)
    }

    #[test]
    fn the_interest_queue_holds_one_change_per_channel_and_none_while_down() {
        let s = shard();
        let (a, b): (Rc<str>, Rc<str>) = ("a".into(), "b".into());
        assert!(s.want(a.clone(), true), "down: left to the restore");
        assert!(s.interest.borrow().is_empty());
        s.health.borrow_mut().sub_connected = true;
        assert!(!s.want(a.clone(), true));
        assert!(!s.want(b.clone(), true));
        // A subscriber churning on `a` while the writer is busy: one entry.
        for i in 0..1000 {
            assert!(s.want(a.clone(), i % 2 == 1), "replaces, never grows");
        }
        assert_eq!(*s.interest.borrow(), [(a, true), (b, true)]);
    }
}
