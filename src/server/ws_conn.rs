//! The WebSocket phase of a connection: a reader task that runs the
//! sans-I/O receiver and publishes, and a writer task that drains the
//! hub's queue with one vectored write per batch. Neither holds a hub
//! borrow across an `.await`.

use std::future::poll_fn;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};

use crate::auth::{AuthConfig, Grants, TokenBucket};
use crate::control::{self, ErrorCode};
use crate::hub::{CloseReason, ConnId, ConnKind, ConnState, Hub, WriterWork};
use crate::log;
use crate::server::presence_edge::{self, Identity};
use crate::server::publish::{route_publish, Published};
use crate::server::recall;
use crate::server::redis::RedisLink;
use crate::server::resume::{self, Deferred};
use crate::server::sock::{
    drain_close, write_all_vectored, Sock, PROTOCOL_DRAIN_BYTES, PROTOCOL_DRAIN_TIME,
};
use crate::server::sys;
use crate::server::upgrade::Upgrade;
use crate::server::worker::Worker;
use crate::server::{formats, pusher_ws};
use crate::ws::{Message, OpCode, ProtocolError, Receiver, Role};

/// Runs an upgraded connection: subscribes, spawns the writer, reads until
/// the close handshake or the socket ends, then waits for the writer.
pub(super) async fn websocket(w: &Rc<Worker>, sock: Sock, id: ConnId, up: Upgrade, buf: BytesMut) {
    let Upgrade {
        kind,
        channel,
        grants,
        deflate,
    } = up;
    if deflate {
        count_compressed(w, true);
    }
    {
        let mut hub = w.hub.borrow_mut();
        hub.upgrade(id, kind);
        // The status feed's grants are read-only; its token's expiry was
        // recorded at the upgrade.
        if let Some(exp) = grants.expires() {
            let at = token_deadline(hub.now_ms(), exp);
            hub.set_token_expiry(id, at);
        }
        if let Some(c) = channel.as_deref().filter(|c| c.starts_with('!')) {
            hub.subscribe_internal(id, c);
        } else if let Some(c) = &channel {
            if hub.subscribe(id, c).is_err() {
                // Only possible with max_subscriptions = 0.
                hub.close(id, 1008, "subscription refused", CloseReason::Protocol);
            }
        }
    }
    let Sock { mut rd, wr, fd } = sock;
    let writer = monoio::spawn(writer(w.clone(), wr, id));
    let serial = w.hub.borrow().conn(id).map_or(0, |c| c.serial());
    if kind == ConnKind::Ws(formats::PUSHER) {
        pusher_ws::open(w, id, serial);
    }
    let mut reader = WsReader {
        w,
        id,
        serial,
        channel: channel.as_deref(),
        grants,
        bucket: TokenBucket::new(w.cfg.auth.publish_rate, w.cfg.auth.publish_rate, w.now_ms()),
        held: None,
        deferred: None,
        rx: if deflate {
            Receiver::new(Role::Server, w.cfg.ws).with_compression()
        } else {
            Receiver::new(Role::Server, w.cfg.ws)
        },
    };
    let outcome = reader.run(&mut rd, fd, buf).await;
    // A no-op unless this was a Pusher connection (its session ends).
    pusher_ws::close(w, id);
    // A no-op unless it was present in a presence channel.
    presence_edge::close(w, id);
    if !matches!(outcome, ReadEnd::CloseReceived | ReadEnd::Failed) {
        // The peer is gone or silent: unblock a writer stuck on a full socket.
        sys::shutdown(fd);
        w.hub.borrow_mut().abort(id);
    }
    let _ = writer.await;
    if matches!(outcome, ReadEnd::Failed) {
        // Our close frame is queued in the kernel; closing now with the
        // peer's unread bytes would send an RST and lose it.
        let drain = drain_close(&mut rd, fd, PROTOCOL_DRAIN_BYTES, PROTOCOL_DRAIN_TIME);
        // Boxed: its buffer would otherwise enlarge every connection's task.
        Box::pin(drain).await;
    }
    drop(rd);
    if deflate {
        count_compressed(w, false);
    }
}

/// Counts open compressed connections (`compression_connections`).
fn count_compressed(w: &Worker, open: bool) {
    let mut stats = w.compression.borrow_mut();
    stats.connections = if open {
        stats.connections.saturating_add(1)
    } else {
        stats.connections.saturating_sub(1)
    };
}

/// The hub's coarse time at which a token with `exp` (seconds since the
/// epoch) expires; the sweep closes the connection then.
pub(super) fn token_deadline(hub_now_ms: u64, exp: u64) -> u64 {
    crate::auth::token_deadline_ms(hub_now_ms, exp, crate::auth::unix_now_ms())
}

/// What draining the read buffer came to.
enum Drained {
    /// Everything complete was handled; read more.
    NeedMore,
    /// Over `--publish-rate`: wait this many milliseconds.
    Throttled(u64),
    /// A connection is over `--max-outbound-queue`: wait until none is.
    Pressed,
    /// A subscribe waits for its read from Redis (`self.deferred`).
    Deferred,
    /// The connection is ending.
    End(ReadEnd),
}

enum ReadEnd {
    /// The peer's close frame arrived (and our echo is queued).
    CloseReceived,
    /// We failed the connection (protocol error), or we are closing and
    /// the peer still sends data; our close is queued and nothing more is
    /// read.
    Failed,
    /// End of stream or a socket error.
    Gone,
}

struct WsReader<'a> {
    w: &'a Rc<Worker>,
    id: ConnId,
    serial: u64,
    channel: Option<&'a str>,
    rx: Receiver,
    grants: Grants,
    /// `--publish-rate`: over it, the connection is simply read later.
    bucket: TokenBucket,
    /// A data message waiting for a publish token.
    held: Option<Box<Message>>,
    /// A subscribe waiting for its history read from Redis.
    deferred: Option<Box<Deferred>>,
}

impl WsReader<'_> {
    async fn run(&mut self, rd: &mut TcpOwnedReadHalf, fd: RawFd, mut buf: BytesMut) -> ReadEnd {
        let mut charge = self.w.inbound_charge();
        loop {
            match self.drain(&mut buf) {
                Drained::End(end) => return end,
                Drained::Throttled(ms) => {
                    // Backpressure instead of loss: stop reading until the
                    // bucket refills; the peer's TCP window does the rest.
                    // Boxed: a timer entry in every reader would cost all
                    // connections memory for a path only fast publishers take.
                    Box::pin(monoio::time::sleep(Duration::from_millis(ms))).await;
                    continue;
                }
                Drained::Deferred => {
                    // Nothing more is read from this client until its
                    // subscribe is answered: requests stay in order.
                    if let Some(d) = self.deferred.take() {
                        // Boxed: only resuming connections pay for it.
                        Box::pin(resume::subscribe(self.w, self.id, *d)).await;
                    }
                    continue;
                }
                Drained::Pressed => {
                    // Woken when every connection is back under its bound
                    // (or was cut): the publisher goes at the pace of
                    // its slowest reader that keeps up.
                    poll_fn(|cx| self.w.hub.borrow_mut().poll_unpressed(cx)).await;
                    continue;
                }
                Drained::NeedMore => {}
            }
            // What stays after the drain: a partial frame, a message
            // being assembled. Small publishers hold nothing here.
            let held = buf.capacity() + self.rx.held();
            if !charge.update(held, self.w.cfg.max_total_inbound) {
                return self.refuse_inbound(held);
            }
            if buf.is_empty() {
                // Idle connections keep no read buffer.
                buf = BytesMut::new();
            }
            match self.w.read_more(rd, fd, &mut buf).await {
                Ok(0) | Err(_) => return ReadEnd::Gone,
                Ok(_) => self.w.hub.borrow_mut().received(self.id),
            }
        }
    }

    /// Handles every complete message in `buf`; all of them are fanned out
    /// before any writer runs, so a burst shares writes.
    fn drain(&mut self, buf: &mut BytesMut) -> Drained {
        loop {
            let msg = match self.held.take() {
                Some(msg) => *msg,
                None => match self.rx.next(buf) {
                    Ok(None) => return Drained::NeedMore,
                    Ok(Some(msg)) => {
                        if self.rx.was_compressed() {
                            self.w.compression.borrow_mut().inflated_messages += 1;
                        }
                        msg
                    }
                    Err(e) => return Drained::End(self.fail(&e)),
                },
            };
            if matches!(msg, Message::Text(_) | Message::Binary(_)) {
                if self.w.hub.borrow().pressed() {
                    // A subscriber is over its bound: pause this publisher
                    // (TCP flow control slows it) rather than cut
                    // subscribers that read at line rate.
                    self.w.hub.borrow_mut().stats.publish_backpressure += 1;
                    self.held = Some(Box::new(msg));
                    return Drained::Pressed;
                }
                if self.w.over_backlog() {
                    // The server is behind on its own writes: slow the
                    // publishers down rather than let every subscriber's
                    // queue grow until the slow-consumer policy cuts them.
                    self.w.hub.borrow_mut().stats.publish_backpressure += 1;
                    self.held = Some(Box::new(msg));
                    return Drained::Throttled(1);
                }
                if let Err(wait_ms) = self.bucket.take(self.w.now_ms()) {
                    self.w.hub.borrow_mut().stats.publish_rate_limited += 1;
                    self.held = Some(Box::new(msg));
                    return Drained::Throttled(wait_ms);
                }
            }
            if let Some(end) = self.on_message(msg) {
                return Drained::End(end);
            }
            if self.deferred.is_some() {
                return Drained::Deferred;
            }
        }
    }

    fn fail(&mut self, e: &ProtocolError) -> ReadEnd {
        let mut hub = self.w.hub.borrow_mut();
        hub.stats.protocol_errors += 1;
        log!(
            Debug,
            "protocol error",
            conn = self.id,
            error = e,
            code = e.close_code()
        );
        hub.close(
            self.id,
            e.close_code(),
            &e.to_string(),
            CloseReason::Protocol,
        );
        ReadEnd::Failed
    }

    /// Closes with 1013 a connection whose input grew while the worker was
    /// over `--max-total-inbound`: a large message arriving slowly is what
    /// holds memory, and "try again later" is true of it.
    fn refuse_inbound(&mut self, held: usize) -> ReadEnd {
        let mut hub = self.w.hub.borrow_mut();
        hub.stats.inbound_budget_refusals += 1;
        log!(
            Debug,
            "inbound budget exhausted",
            conn = self.id,
            held = held,
            total = self.w.inbound.get()
        );
        hub.close(
            self.id,
            1013,
            "inbound memory budget exhausted",
            CloseReason::Protocol,
        );
        ReadEnd::Failed
    }

    fn on_message(&mut self, msg: Message) -> Option<ReadEnd> {
        let mut hub = self.w.hub.borrow_mut();
        let open = hub
            .conn(self.id)
            .is_some_and(|c| c.state() == ConnState::Open);
        match msg {
            // RFC 6455 5.5.1: after sending a close frame, data is ignored.
            // Not silently: it is counted, and reading stops here (what the
            // peer sends next is only more of the same; our close frame is
            // queued, and the writer ends the connection after it).
            Message::Text(_) | Message::Binary(_) if !open => {
                hub.stats.messages_not_delivered += 1;
                return Some(ReadEnd::Failed);
            }
            Message::Text(p) => self.on_data(&mut hub, OpCode::Text, p),
            Message::Binary(p) => self.on_data(&mut hub, OpCode::Binary, p),
            Message::Ping(p) => hub.queue_pong(self.id, &p),
            Message::Pong(_) => {}
            Message::Close(frame) => {
                hub.peer_closed(self.id, frame.map(|f| f.code));
                return Some(ReadEnd::CloseReceived);
            }
        }
        None
    }

    fn on_data(&mut self, hub: &mut Hub, opcode: OpCode, payload: Bytes) {
        // A Pusher connection (`GET /app/{key}`): its session lives in
        // the worker, not in this task, which every connection pays for.
        if hub.conn(self.id).map(|c| c.kind()) == Some(ConnKind::Ws(formats::PUSHER)) {
            return pusher_ws::on_frame(self.w, hub, self.id, opcode, &payload);
        }
        let redis = self.w.redis.as_deref();
        let Some(c) = self.channel else {
            let who = (self.id, self.serial, &self.grants);
            self.deferred = on_control(self.w, hub, who, opcode, &payload);
            return;
        };
        if !self.grants.may_publish(c) {
            hub.stats.publish_forbidden += 1;
            hub.close(
                self.id,
                1008,
                "this connection may not publish here",
                CloseReason::Protocol,
            );
            return;
        }
        let outcome = route_publish(hub, redis, c, opcode, &payload, self.serial, false);
        if let Published::Rejected = outcome {
            // A plain WebSocket has no way to carry an error reply: tell
            // the publisher with close 1013 rather than drop its message.
            log!(
                Info,
                "publish refused, closing publisher",
                conn = self.id,
                channel = c
            );
            hub.close(
                self.id,
                1013,
                "publish buffer full",
                CloseReason::Overloaded,
            );
        }
    }
}

/// One request of the JSON control protocol; replies go through the
/// queue. A subscribe that must first read history from Redis is
/// returned instead.
fn on_control(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (id, serial, grants): (ConnId, u64, &Grants),
    opcode: OpCode,
    payload: &[u8],
) -> Option<Box<Deferred>> {
    let (redis, auth) = (w.redis.as_deref(), &w.cfg.auth);
    if opcode == OpCode::Binary {
        let msg = "binary frames are not part of the control protocol; use data_base64";
        hub.send_to(id, control::error(ErrorCode::BinaryNotSupported, msg, None));
        return None;
    }
    let env = match control::parse(payload) {
        Ok(env) => env,
        Err(e) => {
            hub.send_to(id, control::error(e.code, &e.message, e.id.as_deref()));
            return None;
        }
    };
    let idv = env.id.as_deref();
    if let Some(early) = before_subscribe(w, hub, (id, serial, grants), &env) {
        return early;
    }
    let reply = match env.request {
        control::Request::Refresh { token } => Some(refresh(hub, auth, id, grants, &token, idv)),
        control::Request::Subscribe { channel, .. } | control::Request::Presence { channel }
            if !grants.may_subscribe(&channel) =>
        {
            Some(forbidden(idv))
        }
        control::Request::Publish { channel, .. } if !grants.may_publish(&channel) => {
            hub.stats.publish_forbidden += 1;
            Some(forbidden(idv))
        }
        control::Request::Subscribe {
            channel,
            since,
            presence,
        } => {
            recall::subscribe(hub, id, &channel, since.as_ref(), idv);
            if hub.is_subscribed(id, &channel) {
                let who = Identity::of(w, grants, serial);
                presence_edge::join(w, hub, id, &who, &channel, presence);
            } else if presence {
                // Refused (subscription limit): no events either.
                hub.unsubscribe(id, &crate::presence::events_channel(&channel));
            }
            None
        }
        control::Request::Presence { channel } => {
            presence_edge::query(w, hub, id, &channel, idv);
            None
        }
        control::Request::Unsubscribe { channel } => Some(if hub.unsubscribe(id, &channel) {
            presence_edge::unsubscribe(w, hub, id, &channel);
            control::ack("unsubscribed", &channel, None, idv)
        } else {
            control::error(ErrorCode::NotSubscribed, "not subscribed", idv)
        }),
        control::Request::Publish {
            channel,
            opcode,
            payload,
        } => publish_reply(hub, redis, (&channel, opcode, &payload), serial, idv),
    };
    if let Some(frame) = reply {
        hub.send_to(id, frame);
    }
    None
}

/// `{"op":"publish"}` (the grant already checked): the reply, if any.
fn publish_reply(
    hub: &mut Hub,
    redis: Option<&RedisLink>,
    (channel, opcode, payload): (&str, OpCode, &[u8]),
    serial: u64,
    idv: Option<&serde_json::value::RawValue>,
) -> Option<Bytes> {
    if !crate::channel::valid_channel_name(channel) {
        return Some(invalid_channel(idv));
    }
    match route_publish(hub, redis, channel, opcode, payload, serial, false) {
        Published::Rejected => Some(control::error(
            ErrorCode::Unavailable,
            "redis unavailable and the publish buffer is full; not published",
            idv,
        )),
        outcome => {
            let n = match outcome {
                Published::Local(n) => n,
                _ => hub.subscriber_count(channel),
            };
            idv.map(|i| control::ack("published", channel, Some(n), Some(i)))
        }
    }
}

/// The part of a JSON subscribe that comes before the hub's: presence's
/// admission (a refusal is answered here), and in Redis mode with history
/// the read from Redis that the subscribe waits for. `Some`: the request
/// is done here (`Some(None)`) or deferred.
fn before_subscribe(
    w: &Rc<Worker>,
    hub: &mut Hub,
    (id, serial, grants): (ConnId, u64, &Grants),
    env: &control::Envelope,
) -> Option<Option<Box<Deferred>>> {
    let control::Request::Subscribe {
        channel,
        since,
        presence,
    } = &env.request
    else {
        return None;
    };
    if !grants.may_subscribe(channel) {
        return None;
    }
    let who = Identity::of(w, grants, serial);
    if let Err(code) = presence_edge::admit(w, &who, channel, *presence) {
        hub.send_to(id, presence_edge::refusal(code, env.id.as_deref()));
        return Some(None);
    }
    if *presence {
        presence_edge::watch(hub, id, channel);
    }
    let defer = w.redis.as_deref().is_some_and(RedisLink::keeps_history)
        && crate::channel::valid_channel_name(channel);
    if !defer {
        return None;
    }
    // Presence does not wait for the history read.
    presence_edge::join(w, hub, id, &who, channel, *presence);
    let (channel, since, id) = (channel.clone(), since.clone(), env.id.clone());
    Some(Some(Box::new(Deferred { channel, since, id })))
}

/// `{"op":"refresh"}`: a valid token for the same channels moves the
/// connection's expiry; anything else is refused and the old expiry stands.
fn refresh(
    hub: &mut Hub,
    auth: &AuthConfig,
    id: ConnId,
    grants: &Grants,
    token: &str,
    idv: Option<&serde_json::value::RawValue>,
) -> Bytes {
    let (Some(secret), Grants::Token(current)) = (&auth.token_secret, grants) else {
        let msg = "this connection holds no token to refresh";
        return control::error(ErrorCode::BadRequest, msg, idv);
    };
    match auth.verify(token.as_bytes(), secret) {
        Ok(Grants::Token(new)) if new.same_channels(current) => {
            let at = token_deadline(hub.now_ms(), new.exp);
            hub.set_token_expiry(id, at);
            hub.stats.token_refreshes += 1;
            control::refreshed(new.exp, idv)
        }
        Ok(_) => {
            hub.stats.auth_failures += 1;
            let msg = "a refresh token must grant the same channels";
            control::error(ErrorCode::InvalidToken, msg, idv)
        }
        Err(e) => {
            hub.stats.auth_failures += 1;
            control::error(ErrorCode::InvalidToken, e.message(), idv)
        }
    }
}

fn forbidden(id: Option<&serde_json::value::RawValue>) -> Bytes {
    control::error(
        ErrorCode::Forbidden,
        "this connection is not granted this channel (token or publish key)",
        id,
    )
}

fn invalid_channel(id: Option<&serde_json::value::RawValue>) -> Bytes {
    control::error(ErrorCode::InvalidChannel, "invalid channel name", id)
}

/// The writer task: sleeps until frames are queued, writes each batch with
/// one vectored write, and stops after the close frame or on teardown.
async fn writer(w: Rc<Worker>, mut wr: TcpOwnedWriteHalf, id: ConnId) {
    loop {
        let work = poll_fn(|cx| w.hub.borrow_mut().poll_writer(id, cx)).await;
        if work == WriterWork::Finish {
            return;
        }
        // A fresh Vec per batch: it moves into the write and is dropped
        // after it, so no buffer is held (or stored in this task) while idle.
        let mut batch = Vec::new();
        let last = w.hub.borrow_mut().take_batch(id, &mut batch);
        let total: usize = batch.iter().map(Bytes::len).sum();
        // Boxed: the write's state (iovecs, the in-flight op) would
        // otherwise size every connection's writer task for it, idle or
        // not (488 → 104 bytes of task per connection, tests/idle_memory.rs).
        let write = write_all_vectored(&mut wr, batch, || w.hub.borrow_mut().progressed(id));
        let (res, mut frames) = Box::pin(write).await;
        let mut hub = w.hub.borrow_mut();
        hub.release(&mut frames);
        hub.stats.writes += 1;
        hub.wrote(id, total);
        if let Err(e) = res {
            log!(Debug, "write failed", conn = id, error = e);
            hub.abort(id);
            return;
        }
        if last {
            return;
        }
    }
}
