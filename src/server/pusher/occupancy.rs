//! Which Pusher channels are occupied, for the HTTP API's listings and
//! the `channel_occupied` / `channel_vacated` webhooks.
//!
//! Embedded, this instance's hub is the whole truth: a channel's first
//! subscriber occupies it, its last vacates it, at once. In Redis mode the
//! truth is the app's across instances (`redis::occupancy`): each instance
//! keeps its subscriptions per channel in Redis — at once when a channel
//! gains its first or loses its last subscriber here, coalesced to the
//! next tick otherwise — and refreshes them every `--presence-refresh`,
//! so a crashed instance's expire after `--presence-ttl`. Redis's scripts
//! decide when the app's channel is occupied, and when, after
//! `--pusher-vacated-grace` with no subscriber anywhere, it is vacated;
//! the instance whose script saw it sends the webhook, so each is sent
//! once per app. Listings read Redis. With several workers and no Redis,
//! each channel's owner worker decides (`pusher::owner`) and listings
//! gather every worker's counts.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::hub::Hub;
use crate::log;
use crate::pusher::webhook::Event;
use crate::pusher::{internal_channel, App, ChannelKind};
use crate::redis::occupancy::{self as ro, Place, Timing};
use crate::redis::resp::Reply;
use crate::server::endpoints::GATHER_WAIT;
use crate::server::mesh::{Asked, Told};
use crate::server::pusher::owner as pusher_owner;
use crate::server::redis::{RedisLink, ReplyWaiter};
use crate::server::worker::Worker;

/// Longest wait between two settles (graces ending, expired entries) and
/// two flushes of coalesced counts.
const MAX_TICK: Duration = Duration::from_secs(1);

/// A subscriber of app `app`'s `channel` (hub name `internal`) arrived
/// (`joined`) or left; the hub already counts it.
pub fn changed(
    w: &Rc<Worker>,
    hub: &mut Hub,
    app: usize,
    (channel, internal): (&str, &str),
    joined: bool,
) {
    if ChannelKind::of(channel) == ChannelKind::User {
        return; // users' own channels are not the app's channels
    }
    if pusher_owner::mesh(w).is_some() {
        // The owner decides, hearing other workers' interest.
        return pusher_owner::settle(w, hub, internal);
    }
    let n = hub.subscriber_count(internal);
    let edge = if joined { n == 1 } else { n == 0 };
    let Some(link) = w.redis.as_deref() else {
        let ev = if joined {
            Event::ChannelOccupied { channel }
        } else {
            Event::ChannelVacated { channel }
        };
        if edge {
            w.webhooks.emit(app, ev, &mut hub.stats);
        }
        return;
    };
    let key = (app, channel.to_string());
    if !edge {
        w.pusher.borrow_mut().occupancy_dirty.insert(key);
        return;
    }
    track(w, key, n);
    push_set(w, link, app, channel, n);
}

/// Notes whether this instance has an entry for `key` in Redis (refreshed
/// until its count is 0).
fn track(w: &Worker, key: (usize, String), n: usize) {
    let mut p = w.pusher.borrow_mut();
    if n == 0 {
        p.occupancy_tracked.remove(&key);
    } else {
        p.occupancy_tracked.insert(key);
    }
}

fn timing(w: &Worker) -> Timing {
    Timing {
        ttl_ms: w.cfg.presence.ttl_ms,
        grace_ms: w.cfg.pusher.vacated_grace_ms,
    }
}

fn place<'a>(w: &'a Worker, link: &'a RedisLink, app: usize) -> Place<'a> {
    link.occupancy_place(&w.cfg.pusher.apps[app].id)
}

/// Sets this instance's `n` subscriptions to `channel` in Redis; the
/// reply says whether the app's channel became occupied (its webhook) or
/// could not be tracked. False when the pipeline is full.
fn push_set(w: &Rc<Worker>, link: &RedisLink, app: usize, channel: &str, n: usize) -> bool {
    let at = place(w, link, app);
    let cmd = ro::set(&at, channel, n, timing(w), w.cfg.pusher.max_channels);
    let Ok(waiter) = link.command_encoded(&at.route_key(), cmd) else {
        log!(Warn, "pusher occupancy not sent: redis pipeline full");
        return false;
    };
    let (limit, channel) = (link.command_timeout(), channel.to_string());
    let w = w.clone();
    monoio::spawn(async move {
        let reply = wait(limit, &waiter).await;
        let stats = &mut w.hub.borrow_mut().stats;
        match reply
            .as_ref()
            .and_then(crate::redis::presence::parse_number)
        {
            Some(2) => {
                let ev = Event::ChannelOccupied { channel: &channel };
                w.webhooks.emit(app, ev, stats);
            }
            Some(-1) => stats.pusher_channels_untracked += 1,
            _ => {}
        }
    });
    true
}

async fn wait(limit: Duration, waiter: &ReplyWaiter) -> Option<Reply> {
    match monoio::time::timeout(limit, waiter.wait()).await {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            log!(Warn, "redis refused a pusher occupancy script", error = e);
            None
        }
        Err(_) => None,
    }
}

/// Redis mode, for as long as the worker runs: every tick, the coalesced
/// counts are written and each app is settled (expired entries pruned,
/// graces ended: their `channel_vacated`); every `--presence-refresh`,
/// every tracked channel's count is written again (its expiry renewed, or
/// re-added after Redis lost it).
pub async fn settle_loop(w: Rc<Worker>, link: Rc<RedisLink>) {
    let refresh = Duration::from_millis(w.cfg.presence.refresh_ms);
    let grace = Duration::from_millis(w.cfg.pusher.vacated_grace_ms);
    let tick = MAX_TICK
        .min(refresh)
        .min(grace / 2)
        .max(Duration::from_millis(20));
    let mut refreshed = Instant::now();
    loop {
        monoio::time::sleep(tick).await;
        let all = refreshed.elapsed() >= refresh;
        if all {
            refreshed = Instant::now();
        }
        flush(&w, &link, all);
        for app in 0..w.cfg.pusher.apps.len() {
            settle(&w, &link, app).await;
        }
    }
}

/// Writes the counts of the channels changed since the last tick (with
/// `all`, of every tracked channel).
fn flush(w: &Rc<Worker>, link: &RedisLink, all: bool) {
    let keys: Vec<(usize, String)> = {
        let mut p = w.pusher.borrow_mut();
        let mut keys: Vec<_> = std::mem::take(&mut p.occupancy_dirty).into_iter().collect();
        if all {
            keys.extend(p.occupancy_tracked.iter().cloned());
        }
        keys
    };
    for (app, channel) in keys {
        let internal = internal_channel(&w.cfg.pusher.apps[app].id, &channel);
        let n = w.hub.borrow().subscriber_count(&internal);
        if !push_set(w, link, app, &channel, n) {
            return; // the rest are tracked: the next refresh writes them
        }
        track(w, (app, channel), n);
    }
}

/// Settles app `app`: announces the channels whose grace ended.
async fn settle(w: &Worker, link: &RedisLink, app: usize) {
    let at = place(w, link, app);
    let cmd = ro::settle(&at, timing(w));
    let Ok(waiter) = link.command_encoded(&at.route_key(), cmd) else {
        return;
    };
    let reply = wait(link.command_timeout(), &waiter).await;
    let Some((_, vacated)) = reply.as_ref().and_then(ro::parse_settle) else {
        return;
    };
    let stats = &mut w.hub.borrow_mut().stats;
    for channel in &vacated {
        w.webhooks
            .emit(app, Event::ChannelVacated { channel }, stats);
    }
}

/// App `app`'s occupied channels (Pusher names) with their subscriptions:
/// this instance's embedded, every instance's in Redis mode (`None`:
/// Redis did not answer).
pub async fn channels(w: &Worker, app: &App) -> Option<Vec<(String, u64)>> {
    if pusher_owner::mesh(w).is_some() {
        let prefix = internal_channel(&app.id, "");
        let all = every_worker(w, &prefix).await?;
        let named = all
            .into_iter()
            .map(|(c, n)| (c[prefix.len()..].to_string(), n));
        return Some(named.collect());
    }
    let Some(link) = &w.redis else {
        let prefix = internal_channel(&app.id, "");
        let listed = w.hub.borrow().channels_with_prefix(&prefix);
        let named = listed.into_iter().map(|(internal, n)| {
            let name = internal[prefix.len()..].to_string();
            (name, n as u64)
        });
        return Some(named.filter(|(_, n)| *n > 0).collect());
    };
    let at = link.occupancy_place(&app.id);
    let waiter = link
        .command_encoded(&at.route_key(), ro::read_all(&at))
        .ok()?;
    ro::parse_all(&wait(link.command_timeout(), &waiter).await?)
}

/// The subscriptions to app `app`'s `channel`, as [`channels`].
pub async fn subscriptions(w: &Worker, app: &App, channel: &str) -> Option<u64> {
    if pusher_owner::mesh(w).is_some() {
        let internal = internal_channel(&app.id, channel);
        let all = every_worker(w, &internal).await?;
        return Some(all.get(&internal).copied().unwrap_or(0));
    }
    let Some(link) = &w.redis else {
        let internal = internal_channel(&app.id, channel);
        return Some(w.hub.borrow().subscriber_count(&internal) as u64);
    };
    let at = link.occupancy_place(&app.id);
    let cmd = ro::read_one(&at, channel);
    let waiter = link.command_encoded(&at.route_key(), cmd).ok()?;
    ro::parse_one(&wait(link.command_timeout(), &waiter).await?)
}

/// This worker's channels named `prefix…` with subscribers, and how many
/// (its answer to another worker's gathering).
pub fn here(w: &Worker, prefix: &str) -> Vec<(String, u64)> {
    let listed = w.hub.borrow().channels_with_prefix(prefix);
    let occupied = listed.into_iter().filter(|(_, n)| *n > 0);
    occupied.map(|(c, n)| (c.to_string(), n as u64)).collect()
}

/// Several workers without Redis: every worker's channels named
/// `prefix…`, their subscribers summed (`None`: a worker did not answer
/// within `GATHER_WAIT`).
async fn every_worker(w: &Worker, prefix: &str) -> Option<BTreeMap<String, u64>> {
    let mesh = pusher_owner::mesh(w)?;
    let id = mesh.ask_all(Asked::Channels(Arc::from(prefix)));
    let gathered = std::future::poll_fn(|cx| mesh.poll_gathered(id, cx));
    let complete = monoio::time::timeout(GATHER_WAIT, gathered).await.is_ok();
    let told = mesh.take_gathered(id);
    if !complete {
        return None;
    }
    let mut all = BTreeMap::new();
    let lists = told.into_iter().filter_map(|(_, t)| match t {
        Told::Channels(list) => Some(list),
        Told::Counters(_) => None,
    });
    for (c, n) in lists.flatten().chain(here(w, prefix)) {
        *all.entry(c).or_insert(0) += n;
    }
    Some(all)
}
