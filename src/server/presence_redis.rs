//! Presence in Redis mode: this instance's members are entries in Redis
//! (`redis::presence`), added when a user's first connection here joins,
//! removed when its last one leaves, refreshed every `--presence-refresh`
//! and pruned by every instance — the scripts decide joins and leaves
//! across instances and publish them on the channel's events channel, so
//! they reach every instance's subscribers through Redis like messages.
//! Reads (the query, `GET /presence`) prune first, then list.

use std::rc::Rc;
use std::time::Duration;

use crate::control::ErrorCode;
use crate::hub::ConnId;
use crate::log;
use crate::presence;
use crate::redis::presence::{self as rp, Pruned};
use crate::server::redis::{RedisLink, ReplyWaiter};
use crate::server::worker::Worker;

/// Most prunes one refresh waits for at once (the rest wait their turn).
const PRUNE_WINDOW: usize = 256;

/// A connection joined `channel`: adds this instance's entry for its
/// user (first connection here) or updates its count. A full channel
/// (only Redis knows all its users) refuses the connection after the
/// fact: it leaves, is unsubscribed and gets `presence_full`.
pub fn joined(
    w: &Rc<Worker>,
    link: &RedisLink,
    id: ConnId,
    channel: &str,
    who: (&str, Option<&str>),
) {
    let first = w.presence.borrow().connections(channel, who.0) == 1;
    let max = if first { w.cfg.presence.max_members } else { 0 };
    let Some(waiter) = push_add(w, link, channel, who, max) else {
        return;
    };
    let (w, channel) = (w.clone(), channel.to_string());
    monoio::spawn(async move {
        match wait(&w, &waiter).await.as_ref().and_then(rp::parse_number) {
            Some(2) => w.presence.borrow_mut().stats.presence_joins += 1,
            Some(-1) => refuse(&w, id, &channel),
            _ => {}
        }
    });
}

/// Queues an add of this instance's entry for `user` with its current
/// connection count (`max` 0: never refused).
fn push_add(
    w: &Worker,
    link: &RedisLink,
    channel: &str,
    (user, info): (&str, Option<&str>),
    max: usize,
) -> Option<Rc<ReplyWaiter>> {
    let cfg = &w.cfg.presence;
    let n = w.presence.borrow().connections(channel, user);
    let at = link.presence_place(channel);
    let cmd = rp::add(&at, (user, n, info), (cfg.ttl_ms, max, cfg.max_events));
    let waiter = link.command_encoded(cmd).ok();
    if waiter.is_none() {
        log!(
            Warn,
            "presence update not sent: redis pipeline full",
            channel = channel
        );
    }
    waiter
}

/// The Redis channel was full when connection `id` joined.
fn refuse(w: &Worker, id: ConnId, channel: &str) {
    if w.presence.borrow_mut().leave(id as u64, channel).is_none() {
        return; // gone already
    }
    w.presence.borrow_mut().stats.presence_refused += 1;
    let mut hub = w.hub.borrow_mut();
    hub.unsubscribe(id, channel);
    hub.unsubscribe(id, &presence::events_channel(channel));
    hub.send_to(
        id,
        crate::control::error(ErrorCode::PresenceFull, presence::FULL_MESSAGE, None),
    );
}

/// A connection left `channel`: removes this instance's entry after the
/// user's last connection here, else updates its count.
pub fn left(w: &Rc<Worker>, link: &RedisLink, l: &presence::Left) {
    if !l.last {
        let info = w
            .presence
            .borrow()
            .members(&l.channel)
            .and_then(|m| m.get(&l.user))
            .and_then(|m| m.info.clone());
        push_add(w, link, &l.channel, (&l.user, info.as_deref()), 0);
        return;
    }
    let at = link.presence_place(&l.channel);
    let cmd = rp::remove(&at, &l.user, w.cfg.presence.max_events);
    let Ok(waiter) = link.command_encoded(cmd) else {
        log!(
            Warn,
            "presence remove not sent: redis pipeline full",
            channel = l.channel.as_str()
        );
        return;
    };
    let w = w.clone();
    monoio::spawn(async move {
        if wait(&w, &waiter).await.as_ref().and_then(rp::parse_number) == Some(2) {
            w.presence.borrow_mut().stats.presence_leaves += 1;
        }
    });
}

/// Prunes `channel` and lists its members; `None` when Redis did not
/// answer in time.
pub async fn members(w: &Worker, link: &RedisLink, channel: &str) -> Option<Pruned> {
    let at = link.presence_place(channel);
    let waiter = link
        .command_encoded(rp::prune(&at, w.cfg.presence.max_events, true))
        .ok()?;
    let p = rp::parse_prune(&wait(w, &waiter).await?)?;
    count_pruned(w, &p);
    Some(p)
}

fn count_pruned(w: &Worker, p: &Pruned) {
    let mut pr = w.presence.borrow_mut();
    pr.stats.presence_expired += p.left;
    pr.stats.presence_leaves += p.left;
}

async fn wait(w: &Worker, waiter: &ReplyWaiter) -> Option<crate::redis::resp::Reply> {
    let limit = w
        .redis
        .as_ref()
        .map_or(Duration::from_secs(5), |l| l.command_timeout());
    match monoio::time::timeout(limit, waiter.wait()).await {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            log!(Warn, "redis refused a presence script", error = e);
            None
        }
        Err(_) => None,
    }
}

/// Every `--presence-refresh`: refreshes this instance's entries (which
/// also re-adds them after Redis lost them) and prunes every channel this
/// instance has members or presence subscribers in.
pub async fn refresh_loop(w: Rc<Worker>, link: Rc<RedisLink>) {
    let every = Duration::from_millis(w.cfg.presence.refresh_ms);
    loop {
        monoio::time::sleep(every).await;
        refresh(&w, &link);
        prune_all(&w, &link).await;
    }
}

fn refresh(w: &Worker, link: &RedisLink) {
    let cfg = &w.cfg.presence;
    let p = w.presence.borrow();
    for (channel, user, m) in p.entries() {
        let at = link.presence_place(channel);
        let cmd = rp::add(
            &at,
            (user, m.connections, m.info.as_deref()),
            (cfg.ttl_ms, 0, cfg.max_events),
        );
        // The reply only matters for joins, which a refresh announces
        // only when Redis had lost the entry (see the README).
        if link.command_encoded(cmd).is_err() {
            return;
        }
    }
}

async fn prune_all(w: &Worker, link: &RedisLink) {
    let mut channels: Vec<String> = w.presence.borrow().channels().map(str::to_string).collect();
    let watched = w.hub.borrow().channels_with_prefix(presence::EVENTS_PREFIX);
    for (name, _) in watched {
        let c = &name[presence::EVENTS_PREFIX.len()..];
        if !channels.iter().any(|x| x == c) {
            channels.push(c.to_string());
        }
    }
    for chunk in channels.chunks(PRUNE_WINDOW) {
        let mut waiters = Vec::with_capacity(chunk.len());
        for c in chunk {
            let at = link.presence_place(c);
            let cmd = rp::prune(&at, w.cfg.presence.max_events, false);
            match link.command_encoded(cmd) {
                Ok(waiter) => waiters.push(waiter),
                Err(_) => return,
            }
        }
        for waiter in waiters {
            if let Some(p) = wait(w, &waiter).await.as_ref().and_then(rp::parse_prune) {
                count_pruned(w, &p);
            }
        }
    }
}
