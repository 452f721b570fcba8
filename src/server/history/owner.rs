//! History with several workers and no Redis (`--workers N`).
//!
//! A channel's history has one owner: the worker that sequences its
//! messages (`server::mesh::owner`). The owner gives each message its
//! position (epoch, offset) in its ring and sends it, position included,
//! to *every* other worker, not only to those with subscribers; each
//! keeps a copy of the ring (the payload is shared, not copied). A resume
//! (`since`, `Last-Event-ID`), `recover-on-subscribe` and `GET /history`
//! on any worker are answered from its own copy, in one step with the
//! subscribe, exactly as with one worker: the copy and the live messages
//! come down the same ring from the owner, so a replay and what follows
//! it meet without a gap or a duplicate.
//!
//! A worker without a copy of a channel's ring (nothing was published on
//! it since that worker started, or its copy expired) never makes up an
//! epoch of its own: it asks the owner for the position
//! ([`Hop::Locate`]), and the subscribe waits for the answer — at most
//! [`LOCATE_TIMEOUT`], at most [`MAX_WAITING`](crate::waits::MAX_WAITING) waits per worker at once.
//! Ring order makes the answer exact: whatever the owner sent before
//! answering arrives first.
//!
//! A slow owner delays, on the other workers, only the subscribes that
//! need a position from it (after the timeout they fail with
//! `unavailable`, and retry); resumes on a worker with a copy do not wait.
//! Each copy is trimmed by its own worker's memory budget and expires on
//! its own worker's clock; the owner keeps a channel's position while any
//! worker has subscribers of it.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::control::{self, ErrorCode};
use crate::hub::{ConnId, Hub};
use crate::server::history::recall;
use crate::server::history::resume::{self, Deferred};
use crate::server::mesh::Answer;
use crate::server::mesh::Hop;
use crate::server::presence::edge as presence_edge;
use crate::server::presence::owner as presence_owner;
use crate::server::worker::Worker;

/// Longest a subscribe waits for its channel's owner to say where the
/// channel's history stands.
pub const LOCATE_TIMEOUT: Duration = Duration::from_secs(5);
use crate::waits::Opened;

const BUSY: &str = "too many subscribes waiting for the channel's worker; retry";
const PRESENCE_SLOW: &str =
    "the channel's worker did not answer the presence join; not subscribed, retry";
const SLOW: &str = "the channel's worker did not answer in time; not subscribed, retry";

/// Whether a subscribe to `channel` here must first ask the channel's
/// owner where its history stands: several workers, no Redis, history on
/// for it, another worker owns it, and this one holds no copy.
pub fn waits_for_owner(w: &Worker, hub: &Hub, channel: &str) -> bool {
    let Some(mesh) = w.mesh.get() else {
        return false;
    };
    if w.redis.is_some() || mesh.owner(channel) == mesh.me() {
        return false;
    }
    hub.history_enabled(channel)
        && crate::channel::keeps_history(channel)
        && !hub.history_held(channel)
}

/// Makes sure this worker holds `channel`'s position when it must ask
/// for it ([`waits_for_owner`]); with `create`, a channel without
/// history gets one at its owner (as a subscribe there would).
pub async fn locate(w: &Worker, channel: &str, create: bool) -> Result<(), &'static str> {
    if !waits_for_owner(w, &w.hub.borrow(), channel) {
        return Ok(());
    }
    let mesh = w.mesh.get().expect("waits_for_owner saw it");
    let id = w.owner_waits.borrow_mut().open().ok_or(BUSY)?;
    let _opened = Opened(&w.owner_waits, id);
    let from = mesh.me() as u8;
    let hop = Hop::Locate {
        from,
        id,
        channel: Arc::from(channel),
        create,
    };
    mesh.send(mesh.owner(channel), hop);
    let answered = std::future::poll_fn(|cx| w.owner_waits.borrow_mut().poll(id, cx));
    monoio::time::timeout(LOCATE_TIMEOUT, answered)
        .await
        .map(drop)
        .map_err(|_| SLOW)
}

/// The owner's answer to a [`Hop::Locate`].
pub fn locate_here(hub: &RefCell<Hub>, channel: &str, create: bool) -> Option<(Arc<str>, u64)> {
    let at = hub.borrow_mut().history_locate(channel, create)?;
    Some((Arc::from(&*at.epoch), at.offset))
}

/// An owner's [`Hop::Located`]: this worker's copy starts at the
/// position (unless one arrived meanwhile), and the wait ends.
pub fn located(w: &Worker, id: u64, channel: &str, at: Option<(Arc<str>, u64)>) {
    if let Some((epoch, offset)) = at {
        w.hub.borrow_mut().history_adopt(channel, (&epoch, offset));
    }
    w.owner_waits.borrow_mut().answer(id, Answer::Located);
}

/// A JSON subscribe (or a server-side one) that waited for its channel's
/// position: subscribed here from this worker's copy once the owner
/// answered, as with one worker.
pub async fn subscribe(w: &Rc<Worker>, id: ConnId, mut d: Deferred) {
    let mut announced = None;
    if let Some(who) = d.join.take() {
        match presence_owner::join_at_owner(w, id, &d.channel, who.clone()).await {
            Ok(true) => announced = Some(who),
            Ok(false) => {}
            Err(code) => {
                let mut hub = w.hub.borrow_mut();
                let reply = match code {
                    ErrorCode::PresenceFull => presence_edge::refusal(code, d.id.as_deref()),
                    _ => control::error(code, PRESENCE_SLOW, d.id.as_deref()),
                };
                hub.send_to(id, reply);
                resume::refused(w, &mut hub, id, &d);
                return;
            }
        }
    }
    let located = locate(w, &d.channel, true).await;
    let mut hub = w.hub.borrow_mut();
    let idv = d.id.as_deref();
    if let Err(why) = located {
        hub.send_to(id, control::error(ErrorCode::Unavailable, why, idv));
        resume::refused(w, &mut hub, id, &d);
        return;
    }
    if d.latest {
        d.since = recall::before_latest(&hub, &d.channel);
    }
    let how = (d.since.as_ref(), d.filters.clone());
    recall::subscribe(&mut hub, id, &d.channel, how, idv);
    if !hub.is_subscribed(id, &d.channel) {
        resume::refused(w, &mut hub, id, &d);
    } else if let Some((user, info)) = &announced {
        presence_owner::tell_joiner(&mut hub, id, &d.channel, (user, info.as_deref()));
    }
}
