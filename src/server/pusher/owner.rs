//! Pusher apps with several workers and no Redis: what a channel's owner
//! worker (`server::mesh::owner` of its hub name) decides for the whole
//! process, so that each webhook is sent once.
//!
//! - **Occupancy.** An app's channel is occupied while any worker has a
//!   subscriber of it — the owner's own count, and its interest table,
//!   which hears of every other worker's first and last subscriber — or
//!   its presence has a member. The owner sends `channel_occupied` and
//!   `channel_vacated` as that changes ([`settle`]). A member counts
//!   before its worker's interest arrives, so `channel_occupied` precedes
//!   its `member_added` webhook, as with one worker.
//! - **Presence.** Members are kept by the owner as JSON presence's are
//!   (`server::presence::owner`, which calls here for Pusher channels):
//!   `member_added` and `member_removed` are sequenced on the channel
//!   itself, the joining connection left out, and their webhooks sent.

use crate::hub::{Hub, EXCLUDE_ALWAYS};
use crate::pusher::presence::{self as pp, Member};
use crate::pusher::webhook::Event;
use crate::pusher::{protocol, ChannelKind};
use crate::server::mesh::{Mesh, Msg};
use crate::server::publish::sequence;
use crate::server::worker::Worker;

/// The mesh, when channels' owners keep Pusher state (several workers,
/// no Redis).
pub fn mesh(w: &Worker) -> Option<&Mesh> {
    w.mesh.get().filter(|_| w.redis.is_none())
}

/// The app (index) and Pusher name of hub channel `internal`, if it is
/// one of an app's channels (a user's own channel is not).
pub fn app_channel<'a>(w: &Worker, internal: &'a str) -> Option<(usize, &'a str)> {
    let (id, channel) = internal.strip_prefix("pusher/")?.split_once('/')?;
    if ChannelKind::of(channel) == ChannelKind::User {
        return None;
    }
    let (app, _) = w.cfg.pusher.by_id(id)?;
    Some((app, channel))
}

/// The most members of `internal`, when it is a Pusher presence channel.
pub fn max_members(w: &Worker, internal: &str) -> Option<usize> {
    let (_, channel) = app_channel(w, internal)?;
    (ChannelKind::of(channel) == ChannelKind::Presence).then_some(w.cfg.pusher.max_presence_members)
}

/// Sends `channel_occupied` or `channel_vacated` for `internal` when
/// this worker owns it and whether it is occupied changed.
pub fn settle(w: &Worker, hub: &mut Hub, internal: &str) {
    let (Some(mesh), Some((app, channel))) = (mesh(w), app_channel(w, internal)) else {
        return;
    };
    if mesh.owner(internal) != mesh.me() {
        return;
    }
    let now = hub.subscriber_count(internal) > 0
        || mesh.interested(internal) != 0
        || w.owned_presence.borrow().count(internal) > 0;
    let mut p = w.pusher.borrow_mut();
    if p.occupied.contains(internal) == now {
        return;
    }
    let ev = if now {
        p.occupied.insert(internal.to_string());
        Event::ChannelOccupied { channel }
    } else {
        p.occupied.remove(internal);
        Event::ChannelVacated { channel }
    };
    drop(p);
    w.webhooks.emit(app, ev, &mut hub.stats);
}

/// The owner took a join to presence `internal`: the channel occupied,
/// and for a new user (`announce`) `member_added` to every subscriber but
/// the joiner (`skip`: its worker and serial) and its webhook.
pub fn joined(
    w: &Worker,
    hub: &mut Hub,
    internal: &str,
    (user, info): (&str, Option<&str>),
    (announce, skip): (bool, (u8, u64)),
) {
    settle(w, hub, internal);
    if !announce {
        return;
    }
    let m = Member {
        user_id: user.to_string(),
        user_info: info.map(str::to_string),
    };
    let data = pp::member_added(&m);
    send_event(
        w,
        hub,
        internal,
        ("pusher_internal:member_added", &data),
        skip,
    );
    let cfg = &w.cfg.pusher;
    w.webhooks.member(cfg, internal, user, true, &mut hub.stats);
}

/// The owner took a leave from presence `internal`: for a user's last
/// connection (`user`), `member_removed` and its webhook; then the
/// channel's occupancy.
pub fn left(w: &Worker, hub: &mut Hub, internal: &str, user: Option<&str>) {
    if let Some(user) = user {
        let data = pp::member_removed(user);
        send_event(
            w,
            hub,
            internal,
            ("pusher_internal:member_removed", &data),
            (0, 0),
        );
        let cfg = &w.cfg.pusher;
        w.webhooks
            .member(cfg, internal, user, false, &mut hub.stats);
    }
    settle(w, hub, internal);
}

/// Sequences a presence event on `internal` itself (as one worker
/// publishes it), to every worker with subscribers but `skip`'s
/// connection.
fn send_event(
    w: &Worker,
    hub: &mut Hub,
    internal: &str,
    (name, data): (&str, &str),
    skip: (u8, u64),
) {
    let (Some(mesh), Some((_, channel))) = (mesh(w), app_channel(w, internal)) else {
        return;
    };
    let json = protocol::event(name, Some(channel), data);
    let sender = if skip.1 == 0 {
        0
    } else {
        skip.1 | EXCLUDE_ALWAYS
    };
    let msg = Msg::announcement(internal, json, (skip.0, sender));
    sequence(hub, mesh, msg);
}
