//! The server API at the edge (`/api/...`, with the publish key): the
//! application disconnects, unsubscribes or subscribes a user's
//! connections, or lists them. Without Redis a command acts on this
//! instance at once; in Redis mode it is published on the control
//! channel (`hooks::api::CONTROL_CHANNEL`), which every instance —
//! this one too — hears exactly once and carries out ([`apply`], which
//! the worker is given when it is made: `Worker`'s delivery calls it).
//! Subscribe and unsubscribe go through `session` as the connection's
//! own would (position, presence). `GET /api/connections` lists this
//! instance's connections without Redis, the cluster's in Redis mode: a
//! request on the control channel, every instance's answer on the
//! asker's reply channel, gathered within `--api-connections-timeout`
//! ([`Waits`]). With several workers and no Redis, commands and
//! listings go to every other worker as mesh hops ([`Hop::Api`]),
//! answered with counts or listings ([`answer_here`]).

use std::rc::Rc;
use std::task::Poll;
use std::time::Instant;

use crate::auth;
use crate::hooks::api::{self, Command, CLOSE_DISCONNECTED, CONTROL_CHANNEL};
use crate::http::{self, HttpError, Method};
use crate::hub::CloseReason;
use crate::redis::resp::Reply;
use crate::server::hooks::{session, users};
use crate::server::mesh::{Hop, Mesh};
use crate::server::publish::{counted, route_publish, Published, Via};
use crate::server::worker::Worker;
use crate::ws::OpCode;

/// Answers `/api/{rest}`.
pub async fn respond(w: &Worker, rest: &str, req: &http::Request, body: &[u8]) -> Vec<u8> {
    let ka = req.keep_alive;
    let refuse = |(status, message)| http::error_response(&HttpError { status, message }, ka);
    if w.cfg.auth.publish_key.is_none() {
        return refuse((403, "the server API needs --publish-key"));
    }
    if let Err(e) = auth::authorize_publish(&w.cfg.auth, req) {
        w.hub.borrow_mut().stats.auth_failures += 1;
        return refuse(e);
    }
    let answer = match (req.method, rest) {
        (Method::Get | Method::Head, "connections") => connections(w, req.query.as_deref()).await,
        (Method::Post, name) => match api::parse(name, body) {
            Ok(cmd) => carry_out(w, &cmd).await,
            Err(e) => Err(e),
        },
        _ => Err((405, "method not allowed")),
    };
    match answer {
        Ok(body) => http::response(
            200,
            "application/json",
            body.to_string().as_bytes(),
            ka,
            &[],
            false,
        ),
        Err(e) => refuse(e),
    }
}

/// Acts here, or on every instance through Redis (also the Pusher API's
/// `terminate_connections`).
pub async fn carry_out(w: &Worker, cmd: &Command) -> Result<serde_json::Value, api::Refusal> {
    let Some(link) = &w.redis else {
        let tag = w.pusher.borrow().tag;
        let n = apply(&w.rc(), (cmd, tag)) as u64;
        let n = match w.mesh.get() {
            Some(mesh) => on_every_worker(w, mesh, cmd, n).await,
            None => n,
        };
        return Ok(serde_json::json!({ "connections": n }));
    };
    let payload = api::encode(cmd);
    let outcome = {
        let mut hub = w.hub.borrow_mut();
        route_publish(
            &mut hub,
            Via::Redis(link),
            CONTROL_CHANNEL,
            OpCode::Text,
            &payload,
            0,
            true,
        )
    };
    let Published::Queued(Some(waiter)) = outcome else {
        return Err((503, "redis unavailable; nothing done"));
    };
    match monoio::time::timeout(link.command_timeout(), waiter.wait()).await {
        Ok(Ok(Reply::Integer(n))) => Ok(serde_json::json!({ "instances": n })),
        _ => Err((
            503,
            "redis did not confirm; the command may still be carried out",
        )),
    }
}

/// Several workers without Redis: `cmd` (carried out here on `here`
/// connections) goes to every other worker, which carries it out on its
/// own and answers how many; the total of those that answered within a
/// second (`publish::counted`'s wait; a worker that answers later still
/// acts).
async fn on_every_worker(w: &Worker, mesh: &Mesh, cmd: &Command, here: u64) -> u64 {
    let id = mesh.count_start(here, Some(mesh.workers() as u32 - 1));
    let from = mesh.me() as u8;
    for to in (0..mesh.workers()).filter(|&i| i != mesh.me()) {
        let cmd = Box::new(cmd.clone());
        mesh.send(to, Hop::Api { from, id, cmd });
    }
    counted(w, id).await
}

/// A server API command from another worker (several workers, no
/// Redis), carried out on this worker's connections: the hop that
/// answers it.
pub fn answer_here(w: &Rc<Worker>, id: u64, cmd: &Command) -> Hop {
    let tag = w.pusher.borrow().tag;
    match cmd {
        Command::Connections { user, .. } => {
            let list = users::list(&w.hub.borrow(), &w.users.borrow(), tag, user);
            Hop::Listed(Box::new(api::answer(id, tag, list)))
        }
        cmd => {
            let n = apply(w, (cmd, tag)) as u64;
            Hop::Counted { id, n, more: None }
        }
    }
}

/// Carries out `cmd` on this worker's connections of its user; how many
/// it acted on. Subscribe and unsubscribe act on JSON (`/ws`)
/// connections as their own subscribes would (`subscribed` with the
/// channel's position, presence joined; `unsubscribed`, presence left; no
/// `id`), counting those not yet (still) subscribed; a path-mode
/// connection has a single channel by its URL. `tag` is this instance's
/// (a `DisconnectClient` acts only on the instance its client id names).
pub fn apply(w: &Rc<Worker>, (cmd, tag): (&Command, u32)) -> usize {
    let mine = w.users.borrow().of(cmd.user());
    let mut hub = w.hub.borrow_mut();
    let mut n = 0;
    for (id, _) in mine {
        let json = hub.conn(id).is_some_and(|c| users::is_json(c.kind()));
        let serial = hub.conn(id).map(|c| c.serial());
        let done = match cmd {
            Command::Disconnect { .. } => {
                let why = "disconnected by the server API";
                hub.close(id, CLOSE_DISCONNECTED, why, CloseReason::Protocol);
                true
            }
            Command::DisconnectClient { client, .. }
                if serial.is_some() && crate::pusher::local_serial(tag, client) == serial =>
            {
                let why = "disconnected by the server API";
                hub.close(id, CLOSE_DISCONNECTED, why, CloseReason::Protocol);
                true
            }
            Command::Subscribe { channel, .. } if json && !hub.is_subscribed(id, channel) => {
                let info = w.users.borrow().info(id);
                let who = (cmd.user(), info.as_deref());
                session::api_subscribe(w, &mut hub, (id, who), channel);
                true
            }
            Command::Unsubscribe { channel, .. } if json => {
                session::server_unsubscribe(w, &mut hub, id, channel)
            }
            _ => false,
        };
        n += usize::from(done);
    }
    n
}

/// The console's listing of `user`'s connections: every worker's with
/// several workers and no Redis (the process is the instance), else this
/// instance's.
pub async fn console_connections(
    w: &Worker,
    user: &str,
) -> Result<serde_json::Value, api::Refusal> {
    match (&w.redis, w.mesh.get()) {
        (None, Some(_)) => cluster_connections(w, user).await,
        _ => Ok(connections_of(w, user)),
    }
}

/// `GET /api/connections?user=...`: the user's connections, this
/// instance's (embedded mode) or every instance's (Redis mode).
async fn connections(w: &Worker, query: Option<&str>) -> Result<serde_json::Value, api::Refusal> {
    let user = query
        .and_then(|q| auth::query_param(q, "user"))
        .unwrap_or("");
    if w.redis.is_none() && w.mesh.get().is_none() {
        return Ok(connections_of(w, user));
    }
    cluster_connections(w, user).await
}

/// Takes request `id` out of the waits however its handler ends.
struct Opened<'a>(&'a Worker, u64);

impl Drop for Opened<'_> {
    fn drop(&mut self) {
        self.0.api_waits.borrow_mut().close(self.1);
    }
}

/// Redis mode: asks every instance (this one too) on the control
/// channel and gathers their answers until all Redis delivered the
/// request to have answered or `--api-connections-timeout` passes.
async fn cluster_connections(w: &Worker, user: &str) -> Result<serde_json::Value, api::Refusal> {
    let deadline = Instant::now() + w.cfg.proxy.connections_timeout;
    let id = w.api_waits.borrow_mut().open();
    let id = id.ok_or((503, "too many server API listings waiting; try again"))?;
    let opened = Opened(w, id);
    let reply_to = w.pusher.borrow().tag;
    let cmd = Command::Connections {
        user: user.to_string(),
        reply_to,
        id,
    };
    let n = match (&w.redis, w.mesh.get()) {
        (None, Some(mesh)) => ask_workers(w, mesh, &cmd),
        _ => match publish_command(w, &cmd, deadline).await {
            Ok(Reply::Integer(n)) => n.max(0) as u64,
            _ => return Err((503, "redis did not confirm; no instance was asked")),
        },
    };
    if let Some((g, _)) = w.api_waits.borrow_mut().get_mut(id) {
        g.expected = Some(n);
    }
    let all = std::future::poll_fn(|cx| {
        let mut waits = w.api_waits.borrow_mut();
        let Some((g, waker)) = waits.get_mut(id) else {
            return Poll::Ready(());
        };
        if g.complete() {
            return Poll::Ready(());
        }
        *waker = Some(cx.waker().clone());
        Poll::Pending
    });
    let left = deadline.saturating_duration_since(Instant::now());
    // Past the deadline the answers so far are the listing.
    let _ = monoio::time::timeout(left, all).await;
    let g = w.api_waits.borrow_mut().close(id);
    drop(opened);
    Ok(g.unwrap_or_default().into_json(user))
}

/// Several workers without Redis: listing `cmd` goes to every other
/// worker, this worker answers at once; how many answers to wait for.
fn ask_workers(w: &Worker, mesh: &Mesh, cmd: &Command) -> u64 {
    let Command::Connections { user, id, reply_to } = cmd else {
        return 0;
    };
    let list = users::list(&w.hub.borrow(), &w.users.borrow(), *reply_to, user);
    w.api_waits
        .borrow_mut()
        .answer(api::answer(*id, *reply_to, list));
    let from = mesh.me() as u8;
    for to in (0..mesh.workers()).filter(|&i| i != mesh.me()) {
        let cmd = Box::new(cmd.clone());
        mesh.send(to, Hop::Api { from, id: *id, cmd });
    }
    mesh.workers() as u64
}

/// Publishes `cmd` on the control channel; Redis's reply (the number of
/// subscribers it reached), within `deadline`.
async fn publish_command(w: &Worker, cmd: &Command, deadline: Instant) -> Result<Reply, ()> {
    let link = w.redis.as_deref().ok_or(())?;
    let payload = api::encode(cmd);
    let outcome = {
        let mut hub = w.hub.borrow_mut();
        let (c, text) = (CONTROL_CHANNEL, OpCode::Text);
        route_publish(&mut hub, Via::Redis(link), c, text, &payload, 0, true)
    };
    let Published::Queued(Some(waiter)) = outcome else {
        return Err(());
    };
    let left = deadline.saturating_duration_since(Instant::now());
    match monoio::time::timeout(left, waiter.wait()).await {
        Ok(Ok(r)) => Ok(r),
        _ => Err(()),
    }
}

/// This instance's connections of `user` (the console's list too).
pub fn connections_of(w: &Worker, user: &str) -> serde_json::Value {
    let tag = w.pusher.borrow().tag;
    let list = users::list(&w.hub.borrow(), &w.users.borrow(), tag, user);
    serde_json::json!({ "user": user, "connections": list })
}
