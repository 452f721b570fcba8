//! Presence with several workers and no Redis (`--workers N`).
//!
//! A channel's members are kept by its owner worker (`server::mesh::owner`,
//! which gives a channel's events channel `presence/{channel}` the same
//! owner) in a table of every worker's connections, keyed by worker and
//! connection. Each worker also keeps its own connections' memberships
//! (`Worker::presence`), so that a closing connection leaves everything at
//! once; every join and leave of one of its connections goes to the owner
//! ([`Hop::Presence`]), which decides, as one worker does, who joined
//! (a user's first connection anywhere), who left (its last) and whether
//! the channel is full, and announces the events, to every watcher but
//! the joiner, whose own worker queues its join event after its
//! `subscribed` reply, as one worker does. Events go to every worker, not
//! only to those whose interest in the events channel the owner has heard
//! of: a reply that does not wait for the owner (a channel with history)
//! may precede that interest, and its client must not miss the next join.
//!
//! A JSON subscribe on another worker waits for the owner's verdict
//! before its reply (the same `presence_full` refusal as with one
//! worker); a server-side subscription (hooks, server API) does not wait:
//! refused by a full channel, it stays subscribed without presence (the
//! owner counts the refusal). `{"op":"presence"}` and `GET /presence` ask
//! the owner for its members. Each wait is bounded like the history's
//! (`crate::waits`, [`OWNER_TIMEOUT`]).

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::control::ErrorCode;
use crate::hub::{ConnId, Hub, EXCLUDE_ALWAYS};
use crate::presence::{self, event, Joined};
use crate::server::mesh::{Answer, Hop, Mesh, Msg};
use crate::server::publish::sequence;
use crate::server::pusher::owner as pusher_owner;
use crate::server::worker::Worker;
use crate::waits::Opened;
use crate::ws::frame::encode_server_frame;
use crate::ws::OpCode;

/// Longest a request waits for a channel's owner worker.
pub const OWNER_TIMEOUT: Duration = Duration::from_secs(5);

/// A member as listed: user, info, open connections.
pub type Row = (String, Option<String>, u32);

/// The mesh, when presence is kept by channels' owner workers (several
/// workers, no Redis).
pub fn mesh(w: &Worker) -> Option<&Mesh> {
    w.mesh.get().filter(|_| w.redis.is_none())
}

/// Whether another worker keeps `channel`'s members.
pub fn elsewhere(w: &Worker, channel: &str) -> bool {
    mesh(w).is_some_and(|m| m.owner(channel) != m.me()) && w.cfg.presence.covers(channel)
}

/// Connection `id` of worker `worker`, in an owner's table.
fn key(worker: usize, id: ConnId) -> u64 {
    ((worker as u64) << 48) | id as u64
}

/// Whether `user` may join `channel`, whose members this worker keeps
/// (a refusal is counted).
pub fn admits(w: &Worker, channel: &str, user: &str) -> bool {
    let (max, _) = w.cfg.presence_limits(channel);
    let mut t = w.owned_presence.borrow_mut();
    let ok = t.admits(channel, user, max);
    if !ok {
        t.stats.presence_refused += 1;
    }
    ok
}

/// A connection in an owner's table (its key: worker and slot) and its
/// serial (what a publish's sender exclusion names).
pub type Conn = (u64, u64);

fn serial(hub: &Hub, id: ConnId) -> u64 {
    hub.conn(id).map_or(0, |c| c.serial())
}

/// Connection `id` of this worker as owners know it: its key and serial.
pub fn conn_of(mesh: &Mesh, hub: &Hub, id: ConnId) -> Conn {
    (key(mesh.me(), id), serial(hub, id))
}

/// Connection `id` (present here already, in `Worker::presence`) joins
/// `channel` at its owner, without waiting: here (its own join event, if
/// announced and watched, queued after its reply), or with a hop.
pub fn join(w: &Worker, hub: &mut Hub, id: ConnId, channel: &str, who: (&str, Option<&str>)) {
    let Some(mesh) = mesh(w) else {
        return;
    };
    let (owner, conn) = (mesh.owner(channel), (key(mesh.me(), id), serial(hub, id)));
    if owner == mesh.me() {
        if joined_here(w, hub, (owner as u8, conn), channel, who) == Some(true) {
            tell_joiner(hub, id, channel, who);
        }
        return;
    }
    let join = Some(Box::new((who.0.to_string(), who.1.map(str::to_string))));
    send(mesh, owner, (0, conn), channel, join);
}

/// The joiner's own join event, when it watches the channel's events:
/// after its `subscribed` reply (which may wait for the channel's owner
/// to hear of this worker's interest).
pub fn tell_joiner(hub: &mut Hub, id: ConnId, channel: &str, (user, info): (&str, Option<&str>)) {
    if !hub.is_subscribed(id, &presence::events_channel(channel)) {
        return;
    }
    let text = event::join(channel, user, info);
    let frame = encode_server_frame(OpCode::Text, text.as_bytes());
    hub.ack_when_confirmed(id, channel, frame, true);
}

fn send(
    mesh: &Mesh,
    to: usize,
    (id, conn): (u64, Conn),
    channel: &str,
    join: Option<Box<(String, Option<String>)>>,
) {
    let from = mesh.me() as u8;
    let channel = Arc::from(channel);
    let hop = Hop::Presence {
        from,
        id,
        conn,
        channel,
        join,
    };
    mesh.send(to, hop);
}

/// A JSON subscribe of connection `id` to `channel`, which another worker
/// owns: the join, made at the owner before the subscribe is answered.
/// `Ok(true)`: a join was announced (the caller tells the joiner after
/// its reply: [`tell_joiner`]); `Err`: refused (`PresenceFull`) or the
/// owner did not answer (`Unavailable`), and nothing is left of the join.
pub async fn join_at_owner(
    w: &Worker,
    id: ConnId,
    channel: &str,
    (user, info): (String, Option<String>),
) -> Result<bool, ErrorCode> {
    let Some(mesh) = mesh(w) else {
        return Ok(false);
    };
    let who = (user.as_str(), info.as_deref());
    let joined = w
        .presence
        .borrow_mut()
        .join(id as u64, channel, who, usize::MAX);
    if !matches!(joined, Ok(Joined::User | Joined::Connection)) {
        return Ok(false);
    }
    let answer = ask_join(w, mesh, id, channel, (user, info)).await;
    if !matches!(answer, Ok(Answer::Joined(Some(_)))) {
        drop(w.presence.borrow_mut().leave(id as u64, channel));
    }
    match answer? {
        Answer::Joined(Some(announced)) => Ok(announced),
        _ => Err(ErrorCode::PresenceFull),
    }
}

/// A Pusher presence subscribe of connection `id` (a member here
/// already) to `channel`, which another worker owns: the join, made at
/// the owner, and the members it lists (the joiner among them).
/// `Err(PresenceFull)`: refused; `Err(Unavailable)`: no answer in time
/// (the join taken back).
pub async fn enter_at_owner(
    w: &Worker,
    id: ConnId,
    channel: &str,
    who: (String, Option<String>),
) -> Result<Vec<Row>, ErrorCode> {
    let mesh = mesh(w).ok_or(ErrorCode::Unavailable)?;
    match ask_join(w, mesh, id, channel, who).await? {
        Answer::Members(rows) => Ok(rows),
        _ => Err(ErrorCode::PresenceFull),
    }
}

/// Sends connection `id`'s join to `channel`'s owner and waits for its
/// answer; without one in time (or with too many waits open) the join is
/// taken back at the owner.
async fn ask_join(
    w: &Worker,
    mesh: &Mesh,
    id: ConnId,
    channel: &str,
    who: (String, Option<String>),
) -> Result<Answer, ErrorCode> {
    let wait = w
        .owner_waits
        .borrow_mut()
        .open()
        .ok_or(ErrorCode::Unavailable)?;
    let _opened = Opened(&w.owner_waits, wait);
    let conn = (key(mesh.me(), id), serial(&w.hub.borrow(), id));
    let owner = mesh.owner(channel);
    send(mesh, owner, (wait, conn), channel, Some(Box::new(who)));
    let answered = std::future::poll_fn(|cx| w.owner_waits.borrow_mut().poll(wait, cx));
    match monoio::time::timeout(OWNER_TIMEOUT, answered).await {
        Ok(Some(answer)) => Ok(answer),
        _ => {
            // The owner may still take the join: take it back.
            send(mesh, owner, (0, conn), channel, None);
            Err(ErrorCode::Unavailable)
        }
    }
}

/// Connection `id` left `channel` (one of its connections; it was
/// present here): the owner hears of it.
pub fn leave(w: &Worker, hub: &mut Hub, id: ConnId, channel: &str) {
    let Some(mesh) = mesh(w) else {
        return;
    };
    let (owner, conn) = (mesh.owner(channel), key(mesh.me(), id));
    if owner == mesh.me() {
        left_here(w, hub, conn, channel);
    } else {
        send(mesh, owner, (0, (conn, 0)), channel, None);
    }
}

/// The owner's side of a join by `joiner` (its worker, its key here and
/// serial): whether it was announced; `None` when the channel is full.
/// A Pusher channel's events are Pusher's (`server::pusher::owner`).
pub fn joined_here(
    w: &Worker,
    hub: &mut Hub,
    (from, (conn, serial)): (u8, Conn),
    channel: &str,
    who: (&str, Option<&str>),
) -> Option<bool> {
    let pusher = pusher_owner::max_members(w, channel);
    let (max_members, max_events) = match pusher {
        Some(max) => (max, usize::MAX),
        None => w.cfg.presence_limits(channel),
    };
    let mut t = w.owned_presence.borrow_mut();
    let joined = t.join(conn, channel, who, max_members);
    let announced = match joined {
        Ok(Joined::User) => t.count(channel) <= max_events,
        Ok(_) => false,
        Err(_) => return None,
    };
    if pusher.is_some() {
        drop(t);
        pusher_owner::joined(w, hub, channel, who, (announced, (from, serial)));
        return Some(announced);
    }
    if announced {
        t.stats.presence_joins += 1;
        drop(t);
        let text = event::join(channel, who.0, who.1);
        announce(w, hub, channel, &text, (from, serial | EXCLUDE_ALWAYS));
    }
    Some(announced)
}

/// The owner's side of a leave.
pub fn left_here(w: &Worker, hub: &mut Hub, conn: u64, channel: &str) {
    let pusher = pusher_owner::max_members(w, channel).is_some();
    let (_, max_events) = w.cfg.presence_limits(channel);
    let mut t = w.owned_presence.borrow_mut();
    let left = t.leave(conn, channel);
    if pusher {
        drop(t);
        let user = left.as_ref().filter(|l| l.last).map(|l| l.user.as_str());
        return pusher_owner::left(w, hub, channel, user);
    }
    let Some(l) = left else {
        return;
    };
    // Counted as it was before the leave, as with one worker.
    if !l.last || t.count(channel) + 1 > max_events {
        return;
    }
    t.stats.presence_leaves += 1;
    drop(t);
    let text = event::leave(channel, &l.user);
    announce(w, hub, channel, &text, (0, 0));
}

/// Publishes an event to `channel`'s presence watchers on every worker
/// (this worker owns the events channel too) but one: `skip`, a worker
/// and a serial with the exclude flag (0: none).
fn announce(w: &Worker, hub: &mut Hub, channel: &str, text: &str, skip: (u8, u64)) {
    let Some(mesh) = mesh(w) else {
        return;
    };
    let events = presence::events_channel(channel);
    let msg = Msg::announcement(&events, text.to_string(), skip);
    sequence(hub, mesh, msg);
}

/// The members of `channel`, which this worker keeps.
pub fn rows_here(w: &Worker, channel: &str) -> Vec<Row> {
    let t = w.owned_presence.borrow();
    let members = t.members(channel).into_iter().flatten();
    members
        .map(|(u, m)| (u.clone(), m.info.clone(), m.connections))
        .collect()
}

/// The members of `channel`, from its owner (`None`: no answer in time,
/// or too many requests waiting).
pub async fn rows(w: &Worker, channel: &str) -> Option<Vec<Row>> {
    let mesh = mesh(w)?;
    let owner = mesh.owner(channel);
    if owner == mesh.me() {
        return Some(rows_here(w, channel));
    }
    let id = w.owner_waits.borrow_mut().open()?;
    let _opened = Opened(&w.owner_waits, id);
    let (from, channel) = (mesh.me() as u8, Arc::from(channel));
    mesh.send(owner, Hop::Members { from, id, channel });
    let answered = std::future::poll_fn(|cx| w.owner_waits.borrow_mut().poll(id, cx));
    match monoio::time::timeout(OWNER_TIMEOUT, answered).await {
        Ok(Some(Answer::Members(rows))) => Some(rows),
        _ => None,
    }
}

/// Applies a presence hop from another worker (this worker owns the
/// channel).
pub fn apply(w: &Rc<Worker>, mesh: &Mesh, hop: Hop) {
    match hop {
        Hop::Presence {
            from,
            id,
            conn,
            channel,
            join,
        } => {
            let mut hub = w.hub.borrow_mut();
            let Some(who) = join else {
                return left_here(w, &mut hub, conn.0, &channel);
            };
            let who = (who.0.as_str(), who.1.as_deref());
            let joined = joined_here(w, &mut hub, (from, conn), &channel, who);
            // A Pusher joiner's reply lists the members.
            let answer = match joined {
                Some(_) if pusher_owner::max_members(w, &channel).is_some() => {
                    Answer::Members(rows_here(w, &channel))
                }
                joined => Answer::Joined(joined),
            };
            if id != 0 {
                mesh.send(from as usize, Hop::Answer { id, answer });
            }
        }
        Hop::Members { from, id, channel } => {
            let answer = Answer::Members(rows_here(w, &channel));
            mesh.send(from as usize, Hop::Answer { id, answer });
        }
        _ => {}
    }
}
