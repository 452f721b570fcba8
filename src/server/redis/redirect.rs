//! Redis Cluster redirects at the edge: a command answered `MOVED` or
//! `ASK` goes to the node named (bounded), a subscriber connection told a
//! slot moved sends its channels on, and a shard that lost its slots hands
//! its queue and channels to their new owners.

use std::rc::Rc;

use bytes::Bytes;

use super::link::RedisLink;
use super::reply::CmdKind;
use super::shard::{Queued, Shard};
use crate::redis::cluster::{self, Redirect};
use crate::redis::resp;

/// Most redirects one command follows before it fails. Between live
/// nodes one or two suffice; the rest covers a node that joined and is
/// not yet in the map the others gossip (the command waits for a topology
/// read each time, at least 50 ms apart: 16 allow ~1 s of lag).
pub(super) const MAX_REDIRECTS: u8 = 16;
/// Redirects a channel follows at once between two topology reads.
const MAX_BOUNCES: u8 = 2;

/// A retired shard's queued commands and subscribed channels go to the
/// masters that serve their slots now.
pub(super) fn hand_on(link: &RedisLink, shard: &Shard) {
    let queued = shard.pipeline.borrow_mut().drain();
    for (cmd, q, cache) in queued {
        let to = cluster::command_slot(&cmd).and_then(|s| link.route_slot(s));
        forward(link, to, (cmd, q, cache), false);
    }
    let channels: Vec<Rc<str>> = shard.subscribed.borrow_mut().drain().collect();
    for ch in channels {
        if let Some(s) = link.route_channel(&ch) {
            s.want(ch, true);
        }
    }
}

/// Queues a command on `to` (preceded by `ASKING` when `ask`), or fails it.
pub(super) fn forward(
    link: &RedisLink,
    to: Option<Rc<Shard>>,
    (cmd, q, cache): (Bytes, Queued, bool),
    ask: bool,
) {
    let Some(to) = to else {
        fail(link, q.0, "redis cluster: no master for the slot".into());
        return;
    };
    let mut p = to.pipeline.borrow_mut();
    if ask {
        let _ = p.push(resp::command(&[b"ASKING"]), (CmdKind::Canary, 0));
    }
    let pushed = if cache {
        p.push_cache(cmd, q)
    } else {
        p.push(cmd, q)
    };
    drop(p);
    match pushed {
        Ok(()) => to.wake_writer(),
        // The entry is gone with its waiter, if any: that task sees no
        // reply and times out.
        Err(_) => link.stats.borrow_mut().publish_errors += 1,
    }
}

/// Completes a command that cannot be sent with an error.
pub(super) fn fail(link: &RedisLink, kind: CmdKind, why: String) {
    match kind {
        CmdKind::Command(w) => w.complete(Err(why)),
        CmdKind::Publish(w) => {
            link.stats.borrow_mut().publish_errors += 1;
            if let Some(w) = w {
                w.complete(Err(why));
            }
        }
        CmdKind::Canary => {}
    }
}

/// A node answered a command with `MOVED` or `ASK`: it goes to the node
/// named (the map is corrected for `MOVED` and read again), at most
/// [`MAX_REDIRECTS`] times.
pub(super) fn redirected(
    link: &RedisLink,
    from: &Shard,
    r: Redirect,
    entry: (Bytes, Queued, bool),
) {
    let c = link.cluster.as_ref().expect("cluster mode");
    link.stats.borrow_mut().redirects += 1;
    from.stats.borrow_mut().moved += 1;
    let (cmd, (kind, tries), cache) = entry;
    if tries >= MAX_REDIRECTS {
        fail(link, kind, "redis cluster: too many redirects".into());
        return;
    }
    let (slot, node, ask) = match r {
        Redirect::Moved { slot, node } => (slot, node, false),
        Redirect::Ask { slot, node } => (slot, node, true),
    };
    let target = node.addr();
    let found = link
        .shards
        .borrow()
        .iter()
        .position(|s| s.addr() == target && !s.retired.get());
    if !ask {
        c.refresh();
    }
    let Some(i) = found else {
        c.refresh();
        // Parked bytes leave their pipeline's budget: bounded here by one
        // publish buffer (`--redis-publish-buffer`).
        let held: usize = c.parked.borrow().iter().map(|p| p.1.len()).sum();
        if held + cmd.len() > link.buffers.0 {
            fail(
                link,
                kind,
                "redis cluster: too much waiting for the topology".into(),
            );
            return;
        }
        c.parked
            .borrow_mut()
            .push((slot, cmd, (kind, tries + 1), cache));
        return;
    };
    if !ask {
        c.set_owner(slot, i);
    }
    let to = link.shards.borrow().get(i).cloned();
    forward(link, to, (cmd, (kind, tries + 1), cache), ask);
}

/// A subscriber connection was told a slot lives elsewhere (`MOVED` on
/// `SSUBSCRIBE`): the slot's channels go to the node named, or wait for
/// the refresh when it is new to us.
pub(super) fn channels_moved(link: &RedisLink, from: &Shard, r: &Redirect) {
    let c = link.cluster.as_ref().expect("cluster mode");
    let (Redirect::Moved { slot, node } | Redirect::Ask { slot, node }) = r;
    from.stats.borrow_mut().moved += 1;
    let moved: Vec<Rc<str>> = {
        let mut subs = from.subscribed.borrow_mut();
        let m: Vec<Rc<str>> = subs
            .iter()
            .filter(|ch| cluster::channel_slot(&link.prefix, ch) == *slot)
            .cloned()
            .collect();
        for ch in &m {
            subs.remove(ch);
        }
        m
    };
    c.refresh();
    // Nodes that disagree (a slot handed over without an epoch bump)
    // would bounce a channel between them: after MAX_BOUNCES it waits
    // for the next topology read instead (at most one per 50 ms).
    let (go, wait): (Vec<Rc<str>>, Vec<Rc<str>>) = moved
        .into_iter()
        .partition(|ch| c.bounced(ch) <= MAX_BOUNCES);
    c.parked_channels.borrow_mut().extend(wait);
    let target = node.addr();
    let found = link
        .shards
        .borrow()
        .iter()
        .position(|s| s.addr() == target && !s.retired.get());
    match found {
        Some(i) => {
            c.set_owner(*slot, i);
            let to = link.shards.borrow()[i].clone();
            for ch in go {
                to.want(ch, true);
            }
        }
        None => c.parked_channels.borrow_mut().extend(go),
    }
}
