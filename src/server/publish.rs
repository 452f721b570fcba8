//! The publish seam: every publish — a WebSocket frame, a JSON `publish`,
//! `POST /publish/{channel}` — goes through [`route_publish`], which fans
//! out in-process or hands the message to Redis (then local delivery
//! happens when it comes back, so every instance sees a channel's messages
//! in the same order). History and a cross-worker bus hang off here too.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::filter::Tags;
use crate::http::{self, HttpError};
use crate::hub::{copy_frames, Hub, Message};
use crate::meta::Meta;
use crate::redis::resp::Reply;
use crate::server::mesh::{Hop, Mesh, Msg};
use crate::server::redis::{RedisLink, ReplyWaiter};
use crate::server::worker::Worker;
use crate::ws::OpCode;

/// Longest an HTTP publish waits for the write backlog to drain.
const BACKPRESSURE_HTTP_WAIT_MS: u32 = 5_000;

/// What became of a publish.
pub enum Published {
    /// Fanned out in-process to this many local subscribers.
    Local(usize),
    /// Queued for Redis (with a waiter when a reply was asked for).
    Queued(Option<Rc<ReplyWaiter>>),
    /// Redis mode, buffer full: not published.
    Rejected,
    /// Several workers: the deliveries are being counted (`mesh`'s count
    /// of this id) as the workers with subscribers make them; this many
    /// were made here.
    Counting(u64, usize),
}

/// Where a publish goes after the hub of the worker it arrived on.
#[derive(Clone, Copy)]
pub enum Via<'a> {
    /// One worker, no Redis: fanned out here.
    Local,
    /// Redis mode: through Redis, delivered when it comes back.
    Redis(&'a RedisLink),
    /// Several workers: through the channel's owner (`mesh`).
    Mesh(&'a Mesh),
}

/// Where `w`'s publishes go: Redis, the mesh, or its own hub.
pub fn via(w: &Worker) -> Via<'_> {
    match (w.redis.as_deref(), w.mesh.get()) {
        (Some(link), _) => Via::Redis(link),
        (None, Some(mesh)) => Via::Mesh(mesh),
        (None, None) => Via::Local,
    }
}

/// Publishes in-process, through the channel's owner with several
/// workers, or through Redis in Redis mode.
pub fn route_publish(
    hub: &mut Hub,
    via: Via<'_>,
    channel: &str,
    opcode: OpCode,
    payload: &[u8],
    sender: u64,
    want_reply: bool,
) -> Published {
    route_tagged(
        hub,
        via,
        (channel, opcode, payload, None),
        sender,
        want_reply,
    )
}

/// [`route_publish`] of a message that may carry tags and a key.
pub fn route_tagged(
    hub: &mut Hub,
    via: Via<'_>,
    msg: Message<'_>,
    sender: u64,
    want_reply: bool,
) -> Published {
    let link = match via {
        Via::Local => return Published::Local(hub.publish_tagged(msg, Some(sender))),
        Via::Mesh(mesh) => {
            return cross(hub, (mesh, mesh.me()), msg, sender, (want_reply, false));
        }
        Via::Redis(link) => link,
    };
    link.publish_tagged(msg, sender, want_reply)
        .map_or(Published::Rejected, Published::Queued)
}

/// A publish kept out of history (a publish hook's `skip_history`,
/// without Redis): fanned out here, or through the channel's owner with
/// several workers, as [`route_publish`] does.
pub fn route_unrecorded(
    hub: &mut Hub,
    via: Via<'_>,
    msg: Message<'_>,
    sender: u64,
    count: bool,
) -> Published {
    match via {
        Via::Mesh(mesh) => cross(hub, (mesh, mesh.me()), msg, sender, (count, true)),
        _ => Published::Local(hub.publish_in(msg, Some(sender), ("", 0))),
    }
}

/// As [`route_publish`] without a reply, leaving out connection `sender`
/// of worker `at` (with several workers, another worker's connection: a
/// Pusher `socket_id` names it).
pub fn route_publish_skipping(
    hub: &mut Hub,
    via: Via<'_>,
    channel: &str,
    (opcode, payload): (OpCode, &[u8]),
    (at, sender): (usize, u64),
) -> Published {
    match via {
        Via::Mesh(mesh) if at != mesh.me() => {
            let msg = (channel, opcode, payload, None);
            cross(hub, (mesh, at), msg, sender, (false, false))
        }
        _ => route_publish(hub, via, channel, opcode, payload, sender, false),
    }
}

/// A publish with several workers: sequenced here if this worker owns
/// the channel, else sent to its owner; `sender` is a connection of
/// worker `from`. With `count`, the deliveries the other workers make are
/// counted as they answer ([`Published::Counting`]); `unrecorded`: kept
/// out of history.
fn cross(
    hub: &mut Hub,
    (mesh, from): (&Mesh, usize),
    (channel, opcode, payload, meta): Message<'_>,
    sender: u64,
    (count, unrecorded): (bool, bool),
) -> Published {
    let mut msg = Msg {
        channel: channel.into(),
        opcode,
        payload: Bytes::copy_from_slice(payload),
        sender,
        from: from as u8,
        ask: None,
        frames: None,
        at: None,
        unrecorded,
        meta: meta.cloned(),
    };
    let owner = mesh.owner(channel);
    if owner != mesh.me() {
        let id = count.then(|| mesh.count_start(0, None));
        msg.ask = id.map(|id| (mesh.me() as u8, id));
        mesh.send(owner, Hop::Publish(msg));
        return id.map_or(Published::Local(0), |id| Published::Counting(id, 0));
    }
    let id = count.then(|| mesh.count_start(0, None));
    msg.ask = id.map(|id| (mesh.me() as u8, id));
    let (n, others) = sequence(hub, mesh, msg);
    match id {
        Some(id) if others > 0 => {
            // This worker's own answer; each of the others answers too.
            mesh.counted(id, n as u64, Some(others));
            Published::Counting(id, n)
        }
        Some(id) => {
            mesh.count_end(id);
            Published::Local(n)
        }
        None => Published::Local(n),
    }
}

/// The owner's turn of a publish: its own subscribers, then once to each
/// other worker with subscribers of the channel, in one step (so every
/// worker sees the owner's order). A message its history kept goes to
/// every other worker, each of which keeps a copy of the channel's ring
/// (`history::owner`). The local deliveries and how many workers it went
/// to; an asker on another worker is told both.
pub fn sequence(hub: &mut Hub, mesh: &Mesh, mut msg: Msg) -> (usize, u32) {
    let skip = msg.skip_at(mesh.me());
    let me = 1u64 << mesh.me();
    let hear = mesh.interested(&msg.channel) & !me;
    let m = (
        &*msg.channel,
        msg.opcode,
        &msg.payload[..],
        msg.meta.as_ref(),
    );
    let (n, frames, at) = hub.publish_owned(m, skip, (hear != 0, !msg.unrecorded));
    // Presence events too (few: `--presence-max-events`): a watcher's
    // reply need not wait for its interest in them (`presence::owner`).
    let everywhere = at.is_some() || msg.channel.starts_with(crate::presence::EVENTS_PREFIX);
    let mut bits = if everywhere { mesh.all() & !me } else { hear };
    msg.at = at.map(|p| (Arc::from(&*p.epoch), p.offset));
    let others = bits.count_ones();
    let ask = msg.ask;
    while bits != 0 {
        let to = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        let mut copy = msg.clone();
        if hear & (1 << to) != 0 {
            copy.frames = frames.as_ref().map(|f| Box::new(copy_frames(f)));
        }
        mesh.send(to, Hop::Deliver(copy));
    }
    if let Some((at, id)) = ask.filter(|(at, _)| *at as usize != mesh.me()) {
        let more = Some(others);
        mesh.send(
            at as usize,
            Hop::Counted {
                id,
                n: n as u64,
                more,
            },
        );
    }
    (n, others)
}

/// Counts a publish on `channel` that its namespace's rules let through,
/// with the deliveries it made at once (`delivered`; Redis mode counts
/// them when the message comes back). Nothing without namespaces.
pub fn count_published(w: &Worker, channel: &str, delivered: u64) {
    let table = &w.cfg.namespaces.table;
    if !table.is_empty() {
        w.namespaces
            .borrow_mut()
            .published(table, channel, delivered);
    }
}

/// Counts a refusal by `channel`'s namespace (or for naming an unknown
/// one). Nothing without namespaces.
pub fn count_refused(w: &Worker, channel: &str) {
    let table = &w.cfg.namespaces.table;
    if !table.is_empty() {
        w.namespaces.borrow_mut().refused(table, channel);
    }
}

/// `POST /publish/{channel}`. In Redis mode the answer waits (at most the
/// command timeout) for Redis to confirm the PUBLISH: `200` with the number
/// of instances that received it; `202 {"buffered":true}` while Redis is
/// unreachable and the message waits in the publish buffer; `503` when
/// that buffer is full. The query's `tag.KEY=VALUE` parameters are the
/// message's tags and its `key=` its latest-value key (`400` when they
/// break their bounds).
pub async fn publish_http(
    w: &Worker,
    (channel, query): (&str, Option<&str>),
    body: &[u8],
    keep_alive: bool,
) -> Vec<u8> {
    let error = |status, message| http::error_response(&HttpError { status, message }, keep_alive);
    if std::str::from_utf8(body).is_err() {
        return error(400, "body must be UTF-8 text");
    }
    let meta = match query_meta(query) {
        Ok(meta) => meta,
        Err(message) => return error(400, message),
    };
    match publish_server(w, channel, body, meta).await {
        Ok((status, reply)) => http::response(
            status,
            "application/json",
            reply.to_string().as_bytes(),
            keep_alive,
            &[],
            false,
        ),
        Err(e) => http::error_response(&e, keep_alive),
    }
}

/// The server API's publish (`POST /publish`, the outbox consumers): the
/// namespace's rules for server publishes, the backlog wait, the route,
/// then the answer (see [`publish_http`]).
pub async fn publish_server(
    w: &Worker,
    channel: &str,
    body: &[u8],
    meta: Option<Arc<Meta>>,
) -> Result<(u16, serde_json::Value), HttpError> {
    let outcome = route_server(w, channel, body, meta).await?;
    Ok(answer(w, channel, outcome, false).await)
}

/// [`publish_server`]'s first half: checked and routed (in the order of
/// the calls: what a caller routes one after the other is published in
/// that order); [`answer`] waits for the outcome.
pub async fn route_server(
    w: &Worker,
    channel: &str,
    body: &[u8],
    meta: Option<Arc<Meta>>,
) -> Result<Published, HttpError> {
    let error = |status, message| Err(HttpError { status, message });
    let table = &w.cfg.namespaces.table;
    if let Err(refusal) = table.server_may_publish(channel, body.len()) {
        count_refused(w, channel);
        return error(refusal.status(), refusal.message());
    }
    if meta.as_ref().is_some_and(|m| m.delta()) && !table.allows_delta(channel) {
        count_refused(w, channel);
        return error(
            400,
            "this channel's namespace does not allow deltas (delta = \"fossil\")",
        );
    }
    if !wait_for_backlog(w).await {
        return error(503, "server overloaded, retry later");
    }
    let outcome = {
        let mut hub = w.hub.borrow_mut();
        let msg = (channel, OpCode::Text, body, meta.as_ref());
        route_tagged(&mut hub, via(w), msg, 0, true)
    };
    match outcome {
        Published::Local(n) | Published::Counting(_, n) => count_published(w, channel, n as u64),
        Published::Queued(_) => count_published(w, channel, 0),
        Published::Rejected => {
            return error(503, "redis unavailable and the publish buffer is full");
        }
    }
    Ok(outcome)
}

/// [`publish_server`]'s second half: the status and reply of a routed
/// publish (`200` published, `202` buffered while Redis is unreachable,
/// `502` Redis refused it). `patient`: wait for Redis's answer (up to the
/// command timeout) even while the link is not ready, rather than say
/// `202` at once — an outbox consumer deletes a row only on a `200`, and a
/// late canary must not make it publish the row again.
pub async fn answer(
    w: &Worker,
    channel: &str,
    outcome: Published,
    patient: bool,
) -> (u16, serde_json::Value) {
    let local = w.hub.borrow().subscriber_count(channel);
    match outcome {
        Published::Local(n) => (
            200,
            serde_json::json!({ "channel": channel, "subscribers": n }),
        ),
        Published::Rejected => (
            503,
            serde_json::json!({ "error": "redis unavailable and the publish buffer is full" }),
        ),
        Published::Queued(waiter) => confirmation(w, waiter, (channel, local), patient).await,
        Published::Counting(id, _) => {
            let n = counted(w, id).await;
            (
                200,
                serde_json::json!({ "channel": channel, "subscribers": n }),
            )
        }
    }
}

/// The tags, key, delta wish and idempotency key of `POST /publish`'s
/// query: each `tag.KEY=VALUE` parameter (percent-decoded), `key=` (the
/// latest-value key), `delta=1` (may go as a delta) and
/// `idempotency_key=` (shown to subscribers, who drop a copy), within
/// their bounds (`crate::filter`, `crate::meta`); `None` without any.
pub fn query_meta(query: Option<&str>) -> Result<Option<Arc<Meta>>, &'static str> {
    let Some(q) = query else {
        return Ok(None);
    };
    let bad = "a tag or key parameter is not valid percent-encoded UTF-8";
    let (mut pairs, mut key, mut delta, mut id) = (Vec::new(), None, false, None);
    for part in q.split('&') {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        if k == "idempotency_key" {
            id = Some(http::percent_decode(v).ok_or(bad)?);
        } else if k == "delta" {
            delta = match v {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => return Err("delta must be 1 or 0"),
            };
        } else if k == "key" {
            key = Some(http::percent_decode(v).ok_or(bad)?);
        } else if let Some(name) = k.strip_prefix("tag.") {
            let name = http::percent_decode(name).ok_or(bad)?;
            pairs.push((name, http::percent_decode(v).ok_or(bad)?));
        }
    }
    let tags = match pairs.is_empty() {
        true => None,
        false => {
            let pairs = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            Some(Tags::from_pairs(pairs).map_err(|e| e.reason())?)
        }
    };
    let meta = Meta::with_id(tags, key, delta, id).map_err(|e| e.reason())?;
    Ok(meta.map(Arc::new))
}

/// Longest a publish's reply waits for the other workers to count their
/// deliveries; a worker that has not answered by then (its CPU taken) is
/// left out of the count (its deliveries still happen).
const COUNT_WAIT: Duration = Duration::from_secs(1);

/// The deliveries of a publish counted by every worker (several
/// workers): what a reply's `subscribers` says.
pub async fn counted(w: &Worker, id: u64) -> u64 {
    let mesh = w.mesh.get().expect("counting needs several workers");
    let all = std::future::poll_fn(|cx| mesh.poll_count(id, cx));
    let _ = monoio::time::timeout(COUNT_WAIT, all).await;
    mesh.count_end(id)
}

/// The same backpressure as WebSocket publishers, bounded in time: `false`
/// when the backlog did not drain within [`BACKPRESSURE_HTTP_WAIT_MS`].
pub(super) async fn wait_for_backlog(w: &Worker) -> bool {
    let mut waited = 0;
    while w.over_backlog() {
        if waited == 0 {
            w.hub.borrow_mut().stats.publish_backpressure += 1;
        }
        if waited >= BACKPRESSURE_HTTP_WAIT_MS {
            return false;
        }
        monoio::time::sleep(Duration::from_millis(1)).await;
        waited += 1;
    }
    true
}

/// Waits (at most the command timeout, and only while Redis is up) for
/// Redis to confirm a queued publish; the status and body to answer.
async fn confirmation(
    w: &Worker,
    waiter: Option<Rc<ReplyWaiter>>,
    (channel, local): (&str, usize),
    patient: bool,
) -> (u16, serde_json::Value) {
    let link = w.redis.as_ref().expect("queued implies redis mode");
    let confirmed = match waiter {
        Some(waiter) if patient || link.readiness().is_ok() => {
            monoio::time::timeout(link.command_timeout(), waiter.wait())
                .await
                .ok()
        }
        _ => None,
    };
    match confirmed {
        Some(Ok(Reply::Integer(n))) => (
            200,
            serde_json::json!({ "channel": channel, "subscribers": local, "instances": n }),
        ),
        Some(Ok(other)) => (
            502,
            serde_json::json!({ "error": format!("redis: unexpected reply {other:?}") }),
        ),
        Some(Err(e)) => (502, serde_json::json!({ "error": format!("redis: {e}") })),
        None => (
            202,
            serde_json::json!({ "channel": channel, "subscribers": local, "buffered": true }),
        ),
    }
}
