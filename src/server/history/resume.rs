//! A JSON subscribe in Redis mode with history: the channel's position
//! (and, with `since`, the missed messages) is read from Redis first; then,
//! in one step with the hub, local subscribers are brought up to the read,
//! the connection is subscribed, and the reply and replay are queued ahead
//! of anything live. Also `GET /history/{channel}` from Redis.

use std::rc::Rc;
use std::time::Duration;

use serde_json::value::RawValue;

use crate::control::{self, At, ErrorCode, Since};

use crate::history::relay::{Resume, Snapshot};
use crate::hub::{ConnId, Filtering, Filters, Hub, SubscribeError};
use crate::server::history::recall;
use crate::server::history::relay as relay_edge;
use crate::server::presence::edge as presence_edge;
use crate::server::redis::{read_history, read_history_if_any};
use crate::server::worker::Worker;

/// A subscribe waiting for its read from Redis.
pub struct Deferred {
    /// The channel (name already checked).
    pub channel: String,
    /// Where the client wants to resume from.
    pub since: Option<Since>,
    /// The request's id.
    pub id: Option<Box<RawValue>>,
    /// The connection was not subscribed before: a refusal undoes the
    /// presence membership and event subscription made for it.
    pub fresh: bool,
    /// Without `since`, in a `recover-on-subscribe` namespace: resume
    /// from just before the channel's latest message.
    pub latest: bool,
    /// Several workers without Redis: the presence join (user, info) to
    /// make at the channel's owner worker before the subscribe.
    pub join: Option<(String, Option<String>)>,
    /// What the subscribe does with the subscription's tag filters.
    pub filters: Filtering,
}

/// Runs a deferred subscribe to the end (reply queued).
pub async fn subscribe(w: &Rc<Worker>, id: ConnId, mut d: Deferred) {
    if d.latest {
        d.since = before_latest(w, &d.channel).await;
    }
    let since = d.since.as_ref().map(|s| (s.epoch.as_str(), s.offset));
    let resumed = resume_from_redis(w, id, &d.channel, (since, d.filters.clone())).await;
    let mut hub = w.hub.borrow_mut();
    let idv = d.id.as_deref();
    match resumed {
        Ok(r) => send(&mut hub, id, &d.channel, r, idv),
        Err((code, msg)) => {
            hub.send_to(id, control::error(code, msg, idv));
            refused(w, &mut hub, id, &d);
        }
    }
}

/// A subscribe of `id` to `channel` in Redis mode with history, resuming
/// after `since` (epoch, offset): the read from Redis, local subscribers
/// brought up to it, then the subscribe, in one step with the hub. The
/// position and replay are for the caller to queue, in its own wire
/// format (the JSON protocol's, or Server-Sent Events'), before anything
/// live; `Err`: why it was not subscribed.
pub async fn resume_from_redis(
    w: &Rc<Worker>,
    id: ConnId,
    channel: &str,
    (since, filtering): (Option<(&str, u64)>, Filtering),
) -> Result<Resume, (ErrorCode, &'static str)> {
    let read = read_settled(w, channel, since.map(|s| s.1)).await;
    let mut hub = w.hub.borrow_mut();
    let (Ok(snap), Some(relay)) = (read, &w.relay) else {
        return Err((
            ErrorCode::Unavailable,
            "history unavailable (redis); not subscribed, retry",
        ));
    };
    let warm = hub.subscriber_count(channel) > 0;
    let clock = (hub.now_ms(), hub.history_budget());
    let mut actions = Vec::new();
    let r = relay
        .borrow_mut()
        .resume(channel, since, snap, warm, clock, &mut actions);
    // Local subscribers first (the connection is not one yet).
    relay_edge::apply(&mut hub, channel, actions, None);
    let filters = hub
        .subscribe_filtered(id, channel, filtering)
        .map_err(|e| match e {
            SubscribeError::InvalidChannel => (ErrorCode::InvalidChannel, "invalid channel name"),
            SubscribeError::TooManySubscriptions => (
                ErrorCode::TooManySubscriptions,
                "subscription limit reached",
            ),
            SubscribeError::Backlogged => (
                ErrorCode::Unavailable,
                "the other workers are behind; retry",
            ),
        })?;
    let mut r = bounded(&mut hub, r);
    if let Some(f) = filters {
        r.replay.retain(|e| crate::filter::all_match(&f, e.tags()));
    }
    Ok(r)
}

/// The position just before `channel`'s latest message, if it has one
/// (read from Redis; `recover-on-subscribe`).
async fn before_latest(w: &Worker, channel: &str) -> Option<Since> {
    let link = w.redis.as_ref()?;
    let snap = read_history(link, channel, 0).await.ok()?;
    (snap.top > 0).then(|| Since {
        epoch: snap.epoch,
        offset: snap.top - 1,
    })
}

/// A deferred subscribe was refused: what `native::control` did for it
/// before the read (or the owner's answer) (presence joined, its events watched) is undone.
pub fn refused(w: &Rc<Worker>, hub: &mut Hub, id: ConnId, d: &Deferred) {
    if d.fresh {
        presence_edge::unsubscribe(w, hub, id, &d.channel);
    }
}

/// Most re-reads while this instance is behind the read (see
/// `Relay::behind`), and the pause before each: a resume waits at most
/// about half a second for this instance's own backlog, then answers
/// `recovered:false` rather than risk a duplicate.
const BEHIND_RETRIES: u32 = 50;
const BEHIND_PAUSE: Duration = Duration::from_millis(10);

/// Reads the channel's position (and with `since`, the range after that
/// offset), again while this instance has yet to receive what the read
/// shows.
async fn read_settled(w: &Worker, channel: &str, since: Option<u64>) -> Result<Snapshot, String> {
    let link = w.redis.as_ref().expect("deferred only in redis mode");
    let relay = w.relay.as_ref().ok_or("history off")?;
    let mut tries = 0;
    loop {
        let from = since.map_or(0, |s| relay.borrow().read_from(channel, s));
        let snap = read_history(link, channel, from).await?;
        let warm = w.hub.borrow().subscriber_count(channel) > 0;
        let behind = since.is_some() && relay.borrow().behind(channel, warm, &snap);
        if !behind || tries == BEHIND_RETRIES {
            return Ok(snap);
        }
        tries += 1;
        monoio::time::sleep(BEHIND_PAUSE).await;
    }
}

/// A resume's replay past twice `--max-outbound-queue` is not attempted
/// (it would only get the subscriber cut as slow): not recovered. Counts
/// the recovery.
fn bounded(hub: &mut Hub, mut r: Resume) -> Resume {
    let max_replay = hub.limits().max_outbound_queue.saturating_mul(2);
    let bytes: usize = r.replay.iter().map(|e| e.payload.len() + 96).sum();
    if bytes > max_replay {
        r.recovered = Some(false);
        r.replay.clear();
    }
    match r.recovered {
        Some(true) => {
            hub.stats.recoveries += 1;
            hub.stats.recovered_messages += r.replay.len() as u64;
        }
        Some(false) => hub.stats.recoveries_failed += 1,
        None => {}
    }
    r
}

fn send(hub: &mut Hub, id: ConnId, channel: &str, r: Resume, idv: Option<&RawValue>) {
    let at = At {
        epoch: &r.position.epoch,
        offset: r.position.offset,
    };
    recall::send_position(hub, (id, channel), at, (r.recovered, &r.replay), idv);
}

/// `GET /history/{channel}` in Redis mode: the same answer as embedded
/// mode's (`recall::history_http`), read from the channel's stream.
pub async fn history_http(
    w: &Worker,
    (channel, filters): (&str, Option<&Filters>),
    query: Option<&str>,
    keep_alive: bool,
) -> Vec<u8> {
    let link = w.redis.as_ref().expect("redis mode");
    let (since, limit) = match recall::parse_query(query) {
        Ok(q) => q,
        Err(message) => return recall::error(400, message, keep_alive),
    };
    let read = read_history_if_any(link, channel, since.saturating_add(1), false).await;
    match read {
        Ok(Some(mut snap)) => {
            snap.entries.truncate(limit);
            let at = Some((snap.epoch.as_str(), snap.top));
            recall::history_json((channel, filters), at, &snap.entries, keep_alive)
        }
        // Not created by a read: a GET must not make keys.
        Ok(None) => recall::history_json((channel, None), None, &[], keep_alive),
        Err(_) => recall::error(503, "history unavailable (redis)", keep_alive),
    }
}
