//! One connection: the HTTP phase, then a WebSocket reader and writer.
//!
//! The reader owns the socket's read side and runs the sans-I/O protocol
//! code; the writer sleeps on the hub until frames are queued, then takes
//! them all and writes them with one vectored write. Neither holds a hub
//! borrow across an `.await`.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::os::fd::AsRawFd;
use std::rc::Rc;

use bytes::{Buf, Bytes, BytesMut};
use monoio::io::{AsyncWriteRent, AsyncWriteRentExt, Splitable};
use monoio::net::tcp::TcpOwnedWriteHalf;
use monoio::net::TcpStream;

use crate::config::Config;
use crate::control::{self, ErrorCode};
use crate::http::{self, Body, HttpError, Method, Route};
use crate::hub::{CloseReason, ConnId, ConnKind, ConnState, Hub, SubscribeError, WriterWork};
use crate::log;
use crate::server::iovec::IoVecs;
use crate::server::redis_link::{RedisLink, ReplyWaiter};
use crate::server::sys;
use crate::ws::{Message, OpCode, ProtocolError, Receiver, Role};

/// Size of the per-worker scratch buffer every read goes through.
const SCRATCH: usize = 64 * 1024;

/// What one worker's tasks share. Single-threaded: `Rc` + `RefCell`.
pub struct Ctx {
    /// Connection table and channels.
    pub hub: RefCell<Hub>,
    /// The configuration.
    pub cfg: Config,
    /// Redis mode's connections, when `--redis-url` is set.
    pub redis: Option<Rc<RedisLink>>,
    scratch: RefCell<Box<[u8]>>,
}

impl Ctx {
    /// A fresh worker context.
    pub fn new(cfg: Config) -> Rc<Ctx> {
        Rc::new(Ctx {
            hub: RefCell::new(Hub::new((&cfg).into())),
            redis: RedisLink::new(&cfg),
            cfg,
            scratch: RefCell::new(vec![0; SCRATCH].into_boxed_slice()),
        })
    }
}

/// Serves one accepted socket to the end.
pub async fn handle(ctx: Rc<Ctx>, mut stream: TcpStream) {
    let fd = stream.as_raw_fd();
    let registered = ctx.hub.borrow_mut().register(fd);
    let Some(id) = registered else {
        ctx.hub.borrow_mut().stats.connections_rejected += 1;
        let err = HttpError {
            status: 503,
            message: "too many connections",
        };
        let _ = stream.write_all(http::error_response(&err, false)).await;
        return;
    };
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::new();
    match http_phase(&ctx, &mut stream, id, &mut buf).await {
        Ok(Some((kind, channel))) => websocket(&ctx, stream, id, kind, channel, buf).await,
        Ok(None) => {}
        Err(e) => log!(Debug, "connection error", conn = id, error = e),
    }
    ctx.hub.borrow_mut().remove(id);
}

/// Reads more bytes into `buf`: `Ok(0)` at end of stream. Tries the socket
/// first and waits for readiness only when it is empty.
async fn read_more(ctx: &Ctx, stream: &TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    loop {
        let res = {
            let mut scratch = ctx.scratch.borrow_mut();
            let res = sys::recv_nonblocking(stream.as_raw_fd(), &mut scratch);
            if let Ok(n) = res {
                buf.extend_from_slice(&scratch[..n]);
            }
            res
        };
        match res {
            Ok(n) => {
                ctx.hub.borrow_mut().stats.bytes_in += n as u64;
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.readable(false).await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

type Upgrade = (ConnKind, Option<String>);

/// Serves plain HTTP requests until one upgrades, the peer leaves, or an
/// error ends the connection.
async fn http_phase(
    ctx: &Rc<Ctx>,
    stream: &mut TcpStream,
    id: ConnId,
    buf: &mut BytesMut,
) -> io::Result<Option<Upgrade>> {
    loop {
        ctx.hub.borrow_mut().request_started(id);
        let max_head = ctx.cfg.max_handshake_bytes;
        let req = loop {
            match http::parse_request(buf, max_head) {
                Ok(Some(req)) => break req,
                Ok(None) => {}
                Err(e) => {
                    reply_error(ctx, stream, &e, false).await?;
                    return Ok(None);
                }
            }
            if read_more(ctx, stream, buf).await? == 0 {
                return Ok(None);
            }
        };
        buf.advance(req.head_len);
        ctx.hub.borrow_mut().stats.http_requests += 1;
        let root = ctx.cfg.root_channel.as_deref();
        let route = match http::route(req.method, &req.path, root) {
            Ok(r) => r,
            Err(e) => {
                let keep = req.keep_alive && req.body == Body::None;
                reply_error(ctx, stream, &e, keep).await?;
                if keep {
                    continue;
                }
                return Ok(None);
            }
        };
        let upgrade = match route {
            Route::WsChannel(c) => Some((ConnKind::Simple, Some(c.to_string()))),
            Route::WsMulti => Some((ConnKind::Multi, None)),
            _ => None,
        };
        if let Some(up) = upgrade {
            match &req.upgrade {
                Ok(accept) => {
                    let (res, _) = stream
                        .write_all(crate::ws::handshake::response_101(accept))
                        .await;
                    res?;
                    return Ok(Some(up));
                }
                Err(e) => {
                    ctx.hub.borrow_mut().stats.handshake_failures += 1;
                    log!(Debug, "handshake refused", conn = id, reason = log::Dbg(e));
                    reply_error(ctx, stream, &http::handshake_error(e), false).await?;
                    return Ok(None);
                }
            }
        }
        let head_only = req.method == Method::Head;
        let resp = match route {
            Route::Publish(channel) => match read_body(ctx, stream, buf, req.body).await? {
                Ok(body) => publish_http(ctx, channel, &body, req.keep_alive).await,
                Err(e) => {
                    reply_error(ctx, stream, &e, false).await?;
                    return Ok(None);
                }
            },
            Route::Healthz => json(200, br#"{"status":"ok"}"#, req.keep_alive, head_only),
            Route::Stats => {
                if let Some(link) = &ctx.redis {
                    ctx.hub.borrow_mut().stats.redis_publishes_buffered = link.buffered() as u64;
                }
                let body = stats_json(&ctx.hub.borrow());
                json(200, body.as_bytes(), req.keep_alive, head_only)
            }
            Route::Readyz => {
                let ready = ctx.redis.as_ref().map_or(Ok(()), |l| l.readiness());
                let (status, body) = match ready {
                    Ok(()) => (200, serde_json::json!({ "status": "ready" })),
                    Err(why) => (
                        503,
                        serde_json::json!({ "status": "not ready", "reason": why }),
                    ),
                };
                json(
                    status,
                    body.to_string().as_bytes(),
                    req.keep_alive,
                    head_only,
                )
            }
            Route::WsChannel(_) | Route::WsMulti => unreachable!("handled above"),
        };
        let (res, _) = stream.write_all(resp).await;
        res?;
        if !req.keep_alive {
            return Ok(None);
        }
    }
}

fn json(status: u16, body: &[u8], keep_alive: bool, head_only: bool) -> Vec<u8> {
    http::response(status, "application/json", body, keep_alive, &[], head_only)
}

/// `/stats`: the worker's counters plus current gauges.
pub fn stats_json(hub: &Hub) -> String {
    let mut v = serde_json::to_value(&hub.stats).expect("stats serialize");
    v["connections"] = hub.connection_count().into();
    v["channels"] = hub.channel_count().into();
    v["messages_out"] = hub.stats.deliveries.into();
    v.to_string()
}

async fn reply_error(
    ctx: &Ctx,
    stream: &mut TcpStream,
    err: &HttpError,
    keep_alive: bool,
) -> io::Result<()> {
    log!(
        Debug,
        "http error",
        status = err.status,
        reason = err.message
    );
    let _ = ctx;
    let (res, _) = stream
        .write_all(http::error_response(err, keep_alive))
        .await;
    res.map(|_| ())
}

/// Reads a `Content-Length` body, refusing it (413) before reading when it
/// is over `max_body_size`.
async fn read_body(
    ctx: &Ctx,
    stream: &TcpStream,
    buf: &mut BytesMut,
    body: Body,
) -> io::Result<Result<Bytes, HttpError>> {
    let len = match body {
        Body::None => 0,
        Body::Length(n) => n,
    };
    if len > ctx.cfg.max_body_size {
        return Ok(Err(HttpError {
            status: 413,
            message: "request body too large",
        }));
    }
    while buf.len() < len {
        if read_more(ctx, stream, buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(Ok(buf.split_to(len).freeze()))
}

/// `POST /publish/{channel}`. In Redis mode the answer waits (at most the
/// command timeout) for Redis to confirm the PUBLISH: `200` with the number
/// of instances that received it; `202 {"buffered":true}` while Redis is
/// unreachable and the message waits in the publish buffer; `503` when
/// that buffer is full.
async fn publish_http(ctx: &Ctx, channel: &str, body: &[u8], keep_alive: bool) -> Vec<u8> {
    if std::str::from_utf8(body).is_err() {
        let e = HttpError {
            status: 400,
            message: "body must be UTF-8 text",
        };
        return http::error_response(&e, keep_alive);
    }
    let outcome = {
        let mut hub = ctx.hub.borrow_mut();
        route_publish(
            &mut hub,
            ctx.redis.as_deref(),
            channel,
            OpCode::Text,
            body,
            0,
            true,
        )
    };
    let local = ctx.hub.borrow().subscriber_count(channel);
    let reply = match outcome {
        Published::Local(n) => serde_json::json!({ "channel": channel, "subscribers": n }),
        Published::Rejected => {
            let e = HttpError {
                status: 503,
                message: "redis unavailable and the publish buffer is full",
            };
            return http::error_response(&e, keep_alive);
        }
        Published::Queued(waiter) => {
            let link = ctx.redis.as_ref().expect("queued implies redis mode");
            let confirmed = match waiter {
                Some(w) if link.readiness().is_ok() => {
                    monoio::time::timeout(ctx.cfg.redis_command_timeout, w.wait())
                        .await
                        .ok()
                }
                _ => None,
            };
            match confirmed {
                Some(Ok(crate::redis::resp::Reply::Integer(n))) => serde_json::json!({
                    "channel": channel, "subscribers": local, "instances": n
                }),
                Some(Ok(other)) => {
                    let e = format!("redis: unexpected reply {other:?}");
                    let body = serde_json::json!({ "error": e }).to_string();
                    return json(502, body.as_bytes(), keep_alive, false);
                }
                Some(Err(e)) => {
                    let body = serde_json::json!({ "error": format!("redis: {e}") }).to_string();
                    return json(502, body.as_bytes(), keep_alive, false);
                }
                None => {
                    let body = serde_json::json!({
                        "channel": channel, "subscribers": local, "buffered": true
                    });
                    return json(202, body.to_string().as_bytes(), keep_alive, false);
                }
            }
        }
    };
    json(200, reply.to_string().as_bytes(), keep_alive, false)
}

/// What became of a publish.
pub enum Published {
    /// Fanned out in-process to this many local subscribers.
    Local(usize),
    /// Queued for Redis (with a waiter when a reply was asked for).
    Queued(Option<Rc<ReplyWaiter>>),
    /// Redis mode, buffer full: not published.
    Rejected,
}

/// Publishes in-process, or through Redis in Redis mode (then local
/// delivery happens when the message comes back, so every instance sees a
/// channel's messages in the same order).
pub fn route_publish(
    hub: &mut Hub,
    redis: Option<&RedisLink>,
    channel: &str,
    opcode: OpCode,
    payload: &[u8],
    sender: u64,
    want_reply: bool,
) -> Published {
    let Some(link) = redis else {
        return Published::Local(hub.publish(channel, opcode, payload, Some(sender)));
    };
    match link.publish(channel, opcode, payload, sender, want_reply) {
        Ok(waiter) => {
            hub.stats.redis_publishes += 1;
            Published::Queued(waiter)
        }
        Err(_) => {
            hub.stats.redis_publishes_rejected += 1;
            Published::Rejected
        }
    }
}

/// Runs an upgraded connection: subscribes, spawns the writer, reads until
/// the close handshake or the socket ends, then waits for the writer.
async fn websocket(
    ctx: &Rc<Ctx>,
    stream: TcpStream,
    id: ConnId,
    kind: ConnKind,
    channel: Option<String>,
    buf: BytesMut,
) {
    {
        let mut hub = ctx.hub.borrow_mut();
        hub.upgrade(id, kind);
        if let Some(c) = &channel {
            if hub.subscribe(id, c).is_err() {
                // Only possible with max_subscriptions = 0.
                hub.close(id, 1008, "subscription refused", CloseReason::Protocol);
            }
        }
    }
    let fd = stream.as_raw_fd();
    let (rd, wr) = stream.into_split();
    let writer = monoio::spawn(writer(ctx.clone(), wr, id));
    // SAFETY: the read half only lends `&TcpStream` to `readable()` and to
    // `as_raw_fd()`; the write half's operations only clone the fd into the
    // submitted op. monoio's `Split` contract declares reads and writes of a
    // TcpStream independent, and both halves live on this one thread.
    let read_stream: &TcpStream = unsafe { &*rd.0.get() };
    let serial = ctx.hub.borrow().conn(id).map_or(0, |c| c.serial());
    let mut reader = WsReader {
        ctx,
        id,
        serial,
        channel: channel.as_deref(),
        rx: Receiver::new(Role::Server, ctx.cfg.ws_limits()),
    };
    let outcome = reader.run(read_stream, buf).await;
    if !matches!(outcome, ReadEnd::CloseReceived | ReadEnd::Failed) {
        // The peer is gone or silent: unblock a writer stuck on a full socket.
        sys::shutdown(fd);
        ctx.hub.borrow_mut().abort(id);
    }
    let _ = writer.await;
    drop(rd);
}

enum ReadEnd {
    /// The peer's close frame arrived (and our echo is queued).
    CloseReceived,
    /// We failed the connection (protocol error); our close is queued.
    Failed,
    /// End of stream or a socket error.
    Gone,
}

struct WsReader<'a> {
    ctx: &'a Rc<Ctx>,
    id: ConnId,
    serial: u64,
    channel: Option<&'a str>,
    rx: Receiver,
}

impl WsReader<'_> {
    async fn run(&mut self, stream: &TcpStream, mut buf: BytesMut) -> ReadEnd {
        loop {
            if let Some(end) = self.drain(&mut buf) {
                return end;
            }
            if buf.is_empty() {
                // Idle connections keep no read buffer.
                buf = BytesMut::new();
            }
            match read_more(self.ctx, stream, &mut buf).await {
                Ok(0) | Err(_) => return ReadEnd::Gone,
                Ok(_) => self.ctx.hub.borrow_mut().received(self.id),
            }
        }
    }

    /// Handles every complete message in `buf`; all of them are fanned out
    /// before any writer runs, so a burst shares writes.
    fn drain(&mut self, buf: &mut BytesMut) -> Option<ReadEnd> {
        loop {
            match self.rx.next(buf) {
                Ok(None) => return None,
                Ok(Some(msg)) => {
                    if let Some(end) = self.on_message(msg) {
                        return Some(end);
                    }
                }
                Err(e) => return Some(self.fail(&e)),
            }
        }
    }

    fn fail(&mut self, e: &ProtocolError) -> ReadEnd {
        let mut hub = self.ctx.hub.borrow_mut();
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

    fn on_message(&mut self, msg: Message) -> Option<ReadEnd> {
        let mut hub = self.ctx.hub.borrow_mut();
        let open = hub
            .conn(self.id)
            .is_some_and(|c| c.state() == ConnState::Open);
        match msg {
            // RFC 6455 5.5.1: after sending a close frame, data is ignored.
            Message::Text(_) | Message::Binary(_) if !open => {}
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

    fn on_data(&self, hub: &mut Hub, opcode: OpCode, payload: Bytes) {
        let redis = self.ctx.redis.as_deref();
        let Some(c) = self.channel else {
            return on_control(hub, redis, self.id, self.serial, opcode, &payload);
        };
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

/// One request of the JSON control protocol; replies go through the queue.
fn on_control(
    hub: &mut Hub,
    redis: Option<&RedisLink>,
    id: ConnId,
    serial: u64,
    opcode: OpCode,
    payload: &[u8],
) {
    if opcode == OpCode::Binary {
        let msg = "binary frames are not part of the control protocol; use data_base64";
        hub.send_to(id, control::error(ErrorCode::BinaryNotSupported, msg, None));
        return;
    }
    let env = match control::parse(payload) {
        Ok(env) => env,
        Err(e) => {
            hub.send_to(id, control::error(e.code, &e.message, e.id.as_deref()));
            return;
        }
    };
    let idv = env.id.as_deref();
    let reply = match env.request {
        control::Request::Subscribe { channel } => match hub.subscribe(id, &channel) {
            Ok(()) => Some(control::ack("subscribed", &channel, None, idv)),
            Err(SubscribeError::InvalidChannel) => Some(invalid_channel(idv)),
            Err(SubscribeError::TooManySubscriptions) => Some(control::error(
                ErrorCode::TooManySubscriptions,
                "subscription limit reached",
                idv,
            )),
        },
        control::Request::Unsubscribe { channel } => Some(if hub.unsubscribe(id, &channel) {
            control::ack("unsubscribed", &channel, None, idv)
        } else {
            control::error(ErrorCode::NotSubscribed, "not subscribed", idv)
        }),
        control::Request::Publish {
            channel,
            opcode,
            payload,
        } => {
            if !crate::hub::valid_channel_name(&channel) {
                Some(invalid_channel(idv))
            } else {
                match route_publish(hub, redis, &channel, opcode, &payload, serial, false) {
                    Published::Rejected => Some(control::error(
                        ErrorCode::Unavailable,
                        "redis unavailable and the publish buffer is full; not published",
                        idv,
                    )),
                    outcome => {
                        let n = match outcome {
                            Published::Local(n) => n,
                            _ => hub.subscriber_count(&channel),
                        };
                        idv.map(|i| control::ack("published", &channel, Some(n), Some(i)))
                    }
                }
            }
        }
    };
    if let Some(frame) = reply {
        hub.send_to(id, frame);
    }
}

fn invalid_channel(id: Option<&serde_json::value::RawValue>) -> Bytes {
    control::error(ErrorCode::InvalidChannel, "invalid channel name", id)
}

/// The writer task: sleeps until frames are queued, writes each batch with
/// one vectored write, and stops after the close frame or on teardown.
async fn writer(ctx: Rc<Ctx>, mut wr: TcpOwnedWriteHalf, id: ConnId) {
    let mut batch = Vec::new();
    loop {
        let work = poll_fn(|cx| ctx.hub.borrow_mut().poll_writer(id, cx)).await;
        if work == WriterWork::Finish {
            return;
        }
        let last = ctx.hub.borrow_mut().take_batch(id, &mut batch);
        let total: usize = batch.iter().map(Bytes::len).sum();
        let (res, bufs) = write_all_vectored(&mut wr, std::mem::take(&mut batch)).await;
        batch = bufs;
        batch.clear();
        let mut hub = ctx.hub.borrow_mut();
        hub.stats.writes += 1;
        match res {
            Ok(()) => hub.wrote(id, total),
            Err(e) => {
                log!(Debug, "write failed", conn = id, error = e);
                hub.wrote(id, total);
                hub.abort(id);
                return;
            }
        }
        if last {
            return;
        }
        if batch.capacity() > 64 {
            // Don't let one burst pin a large Vec for the connection's life.
            batch = Vec::new();
        }
    }
}

/// Writes every byte of `bufs`, resubmitting after short writes.
async fn write_all_vectored(
    wr: &mut TcpOwnedWriteHalf,
    bufs: Vec<Bytes>,
) -> (io::Result<()>, Vec<Bytes>) {
    let mut iov = IoVecs::new(bufs);
    while iov.remaining() > 0 {
        let (res, back) = wr.writev(iov).await;
        iov = back;
        match res {
            Ok(0) => return (Err(io::ErrorKind::WriteZero.into()), iov.into_inner()),
            Ok(n) => iov.advance(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (Err(e), iov.into_inner()),
        }
    }
    (Ok(()), iov.into_inner())
}
