//! Presence in Redis mode: this instance's members are entries in Redis
//! (`redis::presence`), added when a user's first connection here joins,
//! removed when its last one leaves, refreshed every `--presence-refresh`
//! and pruned by every instance — the scripts decide joins and leaves
//! across instances and publish them, so they reach every instance's
//! subscribers through Redis like messages. Reads (the query,
//! `GET /presence`, Pusher's member lists) prune first, then list.
//!
//! Two styles share it: the JSON protocol's channels (events on
//! `presence/{channel}`, `join`/`leave`) and Pusher presence channels
//! (hub name `pusher/{app}/{name}`, events on the channel itself as
//! `pusher_internal:member_added`/`member_removed`).

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use crate::control::ErrorCode;
use crate::hub::ConnId;
use crate::log;
use crate::presence::{self, event};
use crate::pusher::presence as pp;
use crate::pusher::protocol;
use crate::redis::presence::{self as rp, LeaveUser, Place, Pruned};
use crate::server::pusher::occupancy as pusher_occupancy;
use crate::server::redis::{RedisLink, ReplyWaiter};
use crate::server::worker::Worker;

/// Most prunes one refresh waits for at once (the rest wait their turn).
const PRUNE_WINDOW: usize = 256;

/// What runs once Redis answered a join (Pusher's `subscription_succeeded`).
pub type AfterJoin = Box<dyn FnOnce(&Rc<Worker>)>;

/// How one channel's presence is announced.
struct Style {
    /// The hub channel its events go to.
    events: String,
    /// The Pusher channel name (`None`: the JSON protocol's channel).
    pusher: Option<String>,
    max_members: usize,
    max_events: usize,
}

impl Style {
    /// The style of hub channel `channel`.
    fn of(w: &Worker, channel: &str) -> Style {
        let pusher = channel
            .strip_prefix("pusher/")
            .and_then(|rest| rest.split_once('/'))
            .map(|(_, name)| name.to_string());
        match pusher {
            Some(name) => Style {
                events: channel.to_string(),
                pusher: Some(name),
                max_members: w.cfg.pusher.max_presence_members,
                // Pusher announces every member (its bound is the cap).
                max_events: usize::MAX,
            },
            None => {
                let (max_members, max_events) = w.cfg.presence_limits(channel);
                Style {
                    events: presence::events_channel(channel),
                    pusher: None,
                    max_members,
                    max_events,
                }
            }
        }
    }

    fn place<'a>(&'a self, link: &'a RedisLink, channel: &'a str, sender: u64) -> Place<'a> {
        let mut at = link.presence_place(channel, &self.events);
        at.sender = sender;
        at
    }

    fn join_text(&self, channel: &str, user: &str, info: Option<&str>) -> String {
        match &self.pusher {
            None => event::join(channel, user, info),
            Some(name) => {
                let m = pp::Member {
                    user_id: user.to_string(),
                    user_info: info.map(str::to_string),
                };
                let data = pp::member_added(&m);
                protocol::event("pusher_internal:member_added", Some(name), &data)
            }
        }
    }

    fn leave_text(&self, channel: &str, user: &str) -> String {
        match &self.pusher {
            None => event::leave(channel, user),
            Some(name) => {
                let data = pp::member_removed(user);
                protocol::event("pusher_internal:member_removed", Some(name), &data)
            }
        }
    }

    fn leave_head(&self, channel: &str) -> (String, LeaveUser) {
        match &self.pusher {
            None => (event::leave_head(channel), LeaveUser::Plain),
            Some(name) => (pp::member_removed_head(name), LeaveUser::PusherData),
        }
    }
}

/// A connection joined hub channel `channel` (JSON or Pusher presence):
/// adds this instance's entry for its user (first connection here) or
/// updates its count. `sender`: the envelope's sender (Pusher: the
/// member's serial with `EXCLUDE_ALWAYS`, so its own `member_added` skips
/// it). A full channel (only Redis knows all its users) refuses the
/// connection after the fact. With `then`, runs it after the add's reply
/// (Pusher's `subscription_succeeded`, which must list the member).
pub fn joined(
    w: &Rc<Worker>,
    link: &RedisLink,
    (id, sender): (ConnId, u64),
    channel: &str,
    who: (&str, Option<&str>),
    then: Option<AfterJoin>,
) {
    let style = Style::of(w, channel);
    let first = w.presence.borrow().connections(channel, who.0) == 1;
    let max = if first { style.max_members } else { 0 };
    let Some(waiter) = push_add(w, link, (channel, &style, sender), who, max) else {
        return;
    };
    let (w, channel, user) = (w.clone(), channel.to_string(), who.0.to_string());
    monoio::spawn(async move {
        match wait(&w, &waiter).await.as_ref().and_then(rp::parse_number) {
            Some(2) => {
                w.presence.borrow_mut().stats.presence_joins += 1;
                // This instance's script made the user a member: its
                // webhook, exactly once across instances.
                let stats = &mut w.hub.borrow_mut().stats;
                w.webhooks
                    .member(&w.cfg.pusher, &channel, &user, true, stats);
            }
            Some(-1) => return refuse(&w, id, &channel, &style),
            _ => {}
        }
        if let Some(then) = then {
            then(&w);
        }
    });
}

/// Queues an add of this instance's entry for `user` with its current
/// connection count (`max` 0: never refused).
fn push_add(
    w: &Worker,
    link: &RedisLink,
    (channel, style, sender): (&str, &Style, u64),
    (user, info): (&str, Option<&str>),
    max: usize,
) -> Option<Rc<ReplyWaiter>> {
    let n = w.presence.borrow().connections(channel, user);
    let at = style.place(link, channel, sender);
    let join = style.join_text(channel, user, info);
    let limits = (w.cfg.presence.ttl_ms, max, style.max_events);
    let cmd = rp::add(&at, (user, n, info), limits, &join);
    let waiter = link.command_encoded(&at.route_key(), cmd).ok();
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
fn refuse(w: &Rc<Worker>, id: ConnId, channel: &str, style: &Style) {
    if w.presence.borrow_mut().leave(id as u64, channel).is_none() {
        return; // gone already
    }
    w.presence.borrow_mut().stats.presence_refused += 1;
    let mut hub = w.hub.borrow_mut();
    hub.unsubscribe(id, channel);
    let reply = match &style.pusher {
        None => {
            hub.unsubscribe(id, &style.events);
            crate::control::error(ErrorCode::PresenceFull, presence::FULL_MESSAGE, None)
        }
        Some(name) => {
            let app = w.pusher_sessions.borrow_mut().get_mut(&id).map(|s| {
                s.channels.remove(name);
                s.app
            });
            if let Some(app) = app {
                // The app's count across instances drops now, not at the
                // next refresh.
                pusher_occupancy::changed(w, &mut hub, app, (name, channel), false);
            }
            hub.stats.pusher_subscriptions_refused += 1;
            let text = protocol::subscription_error(name, 403, "presence channel full");
            crate::ws::frame::encode_server_frame(crate::ws::OpCode::Text, text.as_bytes())
        }
    };
    hub.send_to(id, reply);
}

/// A connection left `l.channel`: removes this instance's entry after the
/// user's last connection here, else updates its count.
pub fn left(w: &Rc<Worker>, link: &RedisLink, l: &presence::Left) {
    let style = Style::of(w, &l.channel);
    if !l.last {
        let info = w
            .presence
            .borrow()
            .members(&l.channel)
            .and_then(|m| m.get(&l.user))
            .and_then(|m| m.info.clone());
        let who = (l.user.as_str(), info.as_deref());
        push_add(w, link, (&l.channel, &style, 0), who, 0);
        return;
    }
    let at = style.place(link, &l.channel, 0);
    let leave = style.leave_text(&l.channel, &l.user);
    let cmd = rp::remove(&at, &l.user, style.max_events, &leave);
    let Ok(waiter) = link.command_encoded(&at.route_key(), cmd) else {
        log!(
            Warn,
            "presence remove not sent: redis pipeline full",
            channel = l.channel.as_str()
        );
        return;
    };
    let (w, channel, user) = (w.clone(), l.channel.clone(), l.user.clone());
    monoio::spawn(async move {
        if wait(&w, &waiter).await.as_ref().and_then(rp::parse_number) == Some(2) {
            w.presence.borrow_mut().stats.presence_leaves += 1;
            let stats = &mut w.hub.borrow_mut().stats;
            w.webhooks
                .member(&w.cfg.pusher, &channel, &user, false, stats);
        }
    });
}

/// Prunes hub channel `channel` and lists its members; `None` when Redis
/// did not answer in time.
pub async fn members(w: &Worker, link: &RedisLink, channel: &str) -> Option<Pruned> {
    let waiter = push_prune(w, link, channel, true)?;
    let p = rp::parse_prune(&wait(w, &waiter).await?)?;
    count_pruned(w, &p);
    Some(p)
}

fn push_prune(w: &Worker, link: &RedisLink, channel: &str, read: bool) -> Option<Rc<ReplyWaiter>> {
    let style = Style::of(w, channel);
    let at = style.place(link, channel, 0);
    let (head, how) = style.leave_head(channel);
    let cmd = rp::prune(&at, style.max_events, (&head, how), read);
    link.command_encoded(&at.route_key(), cmd).ok()
}

fn count_pruned(w: &Worker, p: &Pruned) {
    let mut pr = w.presence.borrow_mut();
    pr.stats.presence_expired = pr.stats.presence_expired.saturating_add(p.left);
    pr.stats.presence_leaves = pr.stats.presence_leaves.saturating_add(p.left);
}

fn command_timeout(w: &Worker) -> Duration {
    w.redis
        .as_ref()
        .map_or(Duration::from_secs(5), |l| l.command_timeout())
}

async fn wait(w: &Worker, waiter: &ReplyWaiter) -> Option<crate::redis::resp::Reply> {
    wait_for(command_timeout(w), waiter).await
}

/// Waits at most `limit` for a script's reply.
async fn wait_for(limit: Duration, waiter: &ReplyWaiter) -> Option<crate::redis::resp::Reply> {
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
    let p = w.presence.borrow();
    for (channel, user, m) in p.entries() {
        let style = Style::of(w, channel);
        let at = style.place(link, channel, 0);
        let join = style.join_text(channel, user, m.info.as_deref());
        let limits = (w.cfg.presence.ttl_ms, 0, style.max_events);
        let cmd = rp::add(&at, (user, m.connections, m.info.as_deref()), limits, &join);
        // A refresh announces a join only when Redis had lost the entry
        // (see the book's Presence page).
        if link.command_encoded(&at.route_key(), cmd).is_err() {
            return;
        }
    }
}

/// The channels to prune: where this instance has members, or JSON
/// presence subscribers, or Pusher presence subscribers.
fn watched(w: &Worker) -> Vec<String> {
    // A set: one lookup per channel (a channel is often in all three).
    let mut channels: BTreeSet<String> =
        w.presence.borrow().channels().map(str::to_string).collect();
    let hub = w.hub.borrow();
    let json = hub.channels_with_prefix(presence::EVENTS_PREFIX);
    let json = json
        .iter()
        .map(|(n, _)| n[presence::EVENTS_PREFIX.len()..].to_string());
    let pusher = hub.channels_with_prefix("pusher/");
    let pusher = pusher
        .iter()
        .filter(|(n, _)| {
            n.split('/')
                .nth(2)
                .is_some_and(|c| c.starts_with("presence-"))
        })
        .map(|(n, _)| n.to_string());
    channels.extend(json.chain(pusher));
    channels.into_iter().collect()
}

/// Prunes every watched channel, waiting for the replies at most one
/// `--redis-command-timeout` in all (not per reply), so a slow or absent
/// Redis cannot hold back the next refresh.
async fn prune_all(w: &Worker, link: &RedisLink) {
    let channels = watched(w);
    let deadline = std::time::Instant::now() + command_timeout(w);
    for chunk in channels.chunks(PRUNE_WINDOW) {
        let mut waiters = Vec::with_capacity(chunk.len());
        for c in chunk {
            match push_prune(w, link, c, false) {
                Some(waiter) => waiters.push(waiter),
                None => return,
            }
        }
        for waiter in waiters {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if let Some(p) = wait_for(left, &waiter)
                .await
                .as_ref()
                .and_then(rp::parse_prune)
            {
                count_pruned(w, &p);
            }
        }
    }
}
