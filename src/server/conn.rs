//! One connection from accept to close: the worker context, the split
//! socket, the HTTP phase (requests, publish, probes, cache routes, the
//! upgrade), and publish routing (in-process or through Redis). The
//! WebSocket phase that follows an upgrade is in `ws_conn`.

use std::cell::RefCell;
use std::io;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use monoio::io::{AsyncWriteRentExt, Splitable};
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};
use monoio::net::TcpStream;

use crate::auth::{self, Grants};
use crate::config::Config;
use crate::http::{self, Body, HttpError, Method, Route};
use crate::hub::{ConnId, ConnKind, Hub};
use crate::log;
use crate::histogram::Histogram;
use crate::server::cache_edge::{self, CacheEdge};
use crate::server::redis_link::{RedisLink, ReplyWaiter};
use crate::server::sys;
use crate::server::ws_conn;
use crate::ws::OpCode;

/// The internal channel of the status feed (`!` keeps clients out of it).
pub const STATUS_CHANNEL: &str = "!status";

/// The live status page, embedded in the binary.
const STATUS_PAGE: &str = include_str!("status.html");

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
    /// The HTTP cache, when `--origin` is set.
    pub cache: Option<Rc<CacheEdge>>,
    started: std::time::Instant,
    scratch: RefCell<Box<[u8]>>,
}

impl Ctx {
    /// A fresh worker context.
    pub fn new(cfg: Config) -> Rc<Ctx> {
        let redis = RedisLink::new(&cfg);
        Rc::new(Ctx {
            hub: RefCell::new(Hub::new((&cfg).into())),
            cache: CacheEdge::new(&cfg, redis.clone()),
            redis,
            started: std::time::Instant::now(),
            cfg,
            scratch: RefCell::new(vec![0; SCRATCH].into_boxed_slice()),
        })
    }
}

impl Ctx {
    /// Milliseconds since the worker started (a precise clock, unlike the
    /// hub's coarse one).
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

/// An accepted socket, split at accept into its halves: two 8-byte handles
/// instead of the 80-byte `TcpStream` that the nested async state machines
/// of a connection would otherwise each carry a copy of.
pub struct Sock {
    pub(super) rd: TcpOwnedReadHalf,
    pub(super) wr: TcpOwnedWriteHalf,
}

impl Sock {
    /// Splits an accepted stream.
    pub fn new(stream: TcpStream) -> Sock {
        let (rd, wr) = stream.into_split();
        Sock { rd, wr }
    }

    /// The stream, for readiness, its fd and socket options.
    pub(super) fn stream(&self) -> &TcpStream {
        read_stream(&self.rd)
    }
}

/// The shared stream behind a read half.
pub(crate) fn read_stream(rd: &TcpOwnedReadHalf) -> &TcpStream {
    // SAFETY: the read half only lends `&TcpStream` to `readable()`,
    // `as_raw_fd()` and `set_nodelay()`; the write half's operations only
    // clone the fd into the submitted op. monoio's `Split` contract declares
    // reads and writes of a TcpStream independent, and both halves live on
    // this one thread.
    unsafe { &*rd.0.get() }
}

/// Serves one accepted socket to the end. Its future is the connection's
/// task, allocated for the connection's whole life: keep it small (large,
/// short-lived phases are boxed; see the size test).
pub async fn handle(ctx: Rc<Ctx>, mut sock: Sock) {
    let fd = sock.stream().as_raw_fd();
    let registered = ctx.hub.borrow_mut().register(fd);
    let Some(id) = registered else {
        ctx.hub.borrow_mut().stats.connections_rejected += 1;
        let err = HttpError {
            status: 503,
            message: "too many connections",
        };
        let _ = sock.wr.write_all(http::error_response(&err, false)).await;
        // Boxed: its drain buffer would otherwise enlarge every task.
        Box::pin(linger_close(sock.stream())).await;
        return;
    };
    let _ = sock.stream().set_nodelay(true);
    let mut buf = BytesMut::new();
    // Boxed: the HTTP phase (with the cache and publish paths) is large and
    // short-lived; inline it would size every WebSocket's task for it.
    match Box::pin(http_phase(&ctx, &mut sock, id, &mut buf)).await {
        Ok(Some((kind, channel, grants))) => {
            ws_conn::websocket(&ctx, sock, id, (kind, channel, grants), buf).await
        }
        Ok(None) => {}
        Err(e) => log!(Debug, "connection error", conn = id, error = e),
    }
    ctx.hub.borrow_mut().remove(id);
}

/// Closes gracefully after a final response to a request we did not read:
/// half-close, then drain what the client sent (bounded in bytes and
/// time), so the kernel sends FIN rather than RST and the client can read
/// the response.
async fn linger_close(stream: &TcpStream) {
    sys::shutdown_write(stream.as_raw_fd());
    let mut scratch = [0u8; 4096];
    let deadline = std::time::Instant::now() + Duration::from_millis(200);
    for _ in 0..16 {
        match sys::recv_nonblocking(stream.as_raw_fd(), &mut scratch) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if monoio::time::timeout(left, stream.readable(false))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

/// Reads more bytes into `buf`: `Ok(0)` at end of stream. Tries the socket
/// first and waits for readiness only when it is empty.
pub(super) async fn read_more(
    ctx: &Ctx,
    stream: &TcpStream,
    buf: &mut BytesMut,
) -> io::Result<usize> {
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

/// An accepted upgrade: the mode, the channel of `/ws/{channel}`, and
/// what the connection's token allows.
pub(super) type Upgrade = (ConnKind, Option<String>, Grants);

/// Serves plain HTTP requests until one upgrades, the peer leaves, or an
/// error ends the connection.
async fn http_phase(
    ctx: &Rc<Ctx>,
    sock: &mut Sock,
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
                    reply_error(ctx, sock, &e, false).await?;
                    return Ok(None);
                }
            }
            if read_more(ctx, sock.stream(), buf).await? == 0 {
                return Ok(None);
            }
        };
        let root = ctx.cfg.root_channel.as_deref();
        let cache_routes = ctx.cache.as_ref().map(|c| c.routes());
        let route = http::route_with_cache(req.method, &req.path, root, cache_routes);
        // The cache re-reads the head (query, Vary'd headers); only its
        // routes pay for the copy.
        let head = matches!(route, Ok(Route::Cache(_) | Route::CachePurge))
            .then(|| Bytes::copy_from_slice(&buf[..req.head_len]));
        buf.advance(req.head_len);
        ctx.hub.borrow_mut().stats.http_requests += 1;
        let route = match route {
            Ok(r) => r,
            Err(e) => {
                let keep = req.keep_alive && req.body == Body::None;
                reply_error(ctx, sock, &e, keep).await?;
                if keep {
                    continue;
                }
                return Ok(None);
            }
        };
        let upgrade = match route {
            Route::WsChannel(c) => Some((ConnKind::Simple, Some(c.to_string()))),
            Route::WsMulti => Some((ConnKind::Multi, None)),
            Route::StatusWs => Some((ConnKind::Simple, Some(STATUS_CHANNEL.to_string()))),
            _ => None,
        };
        if let Some((kind, channel)) = upgrade {
            let status_feed = route == Route::StatusWs;
            let checked = if status_feed {
                None
            } else {
                channel.as_deref()
            };
            let grants = match auth::authorize_upgrade(&ctx.cfg, &req, checked) {
                Ok(_) if status_feed => Grants::read_only(),
                Ok(g) => g,
                Err((status, message)) => {
                    ctx.hub.borrow_mut().stats.auth_failures += 1;
                    log!(
                        Debug,
                        "upgrade refused",
                        conn = id,
                        status = status,
                        reason = message
                    );
                    reply_error(ctx, sock, &HttpError { status, message }, false).await?;
                    return Ok(None);
                }
            };
            let up = (kind, channel, grants);
            match &req.upgrade {
                Ok(accept) => {
                    let (res, _) = sock
                        .wr
                        .write_all(crate::ws::handshake::response_101(accept))
                        .await;
                    res?;
                    return Ok(Some(up));
                }
                Err(e) => {
                    ctx.hub.borrow_mut().stats.handshake_failures += 1;
                    log!(Debug, "handshake refused", conn = id, reason = log::Dbg(e));
                    reply_error(ctx, sock, &http::handshake_error(e), false).await?;
                    return Ok(None);
                }
            }
        }
        let head_only = req.method == Method::Head;
        let resp = match route {
            Route::Publish(_) if auth::authorize_publish(&ctx.cfg, &req).is_err() => {
                let (status, message) = auth::authorize_publish(&ctx.cfg, &req).unwrap_err();
                ctx.hub.borrow_mut().stats.auth_failures += 1;
                reply_error(ctx, sock, &HttpError { status, message }, false).await?;
                return Ok(None);
            }
            Route::Publish(channel) => match read_body(ctx, sock, buf, &req).await? {
                Ok(body) => publish_http(ctx, channel, &body, req.keep_alive).await,
                Err(e) => {
                    reply_error(ctx, sock, &e, false).await?;
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
            Route::Status => {
                let page = STATUS_PAGE.as_bytes();
                let ct = "text/html; charset=utf-8";
                http::response(200, ct, page, req.keep_alive, &[], head_only)
            }
            Route::Metrics => {
                let body = metrics_text(ctx);
                let ct = "text/plain; version=0.0.4; charset=utf-8";
                http::response(200, ct, body.as_bytes(), req.keep_alive, &[], head_only)
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
            Route::Cache(_) | Route::CachePurge => match read_body(ctx, sock, buf, &req).await? {
                Ok(body) => {
                    let inc = cache_edge::Incoming::new(id, &req, head.unwrap_or_default(), body);
                    // Boxed: inline, the cache's future would make every
                    // connection's future larger (by 384 bytes when measured).
                    Box::pin(cache_edge::respond(ctx, &route, inc)).await
                }
                Err(e) => {
                    reply_error(ctx, sock, &e, false).await?;
                    return Ok(None);
                }
            },
            Route::WsChannel(_) | Route::WsMulti | Route::StatusWs => {
                unreachable!("handled above")
            }
        };
        let (res, _) = sock.wr.write_all(resp).await;
        res?;
        if !req.keep_alive {
            return Ok(None);
        }
    }
}

fn json(status: u16, body: &[u8], keep_alive: bool, head_only: bool) -> Vec<u8> {
    http::response(status, "application/json", body, keep_alive, &[], head_only)
}

/// `/metrics`: the Prometheus exposition of this worker.
pub fn metrics_text(ctx: &Ctx) -> String {
    let redis = ctx.redis.as_ref();
    let mut hub = ctx.hub.borrow_mut();
    if let Some(link) = redis {
        hub.stats.redis_publishes_buffered = link.buffered() as u64;
    }
    let gauges = crate::metrics::Gauges {
        connections: hub.connection_count() as u64,
        channels: hub.channel_count() as u64,
        outbound_bytes: hub.total_pending() as u64,
        redis_enabled: redis.is_some(),
        ready: redis.is_none_or(|l| l.readiness().is_ok()),
    };
    crate::metrics::render(&hub.stats, &gauges)
}

/// Publishes one status sample to the status page's feed, if anyone
/// watches: counters, gauges, and fan-out / loop-lag quantiles over the
/// interval since `prev` (updated in place).
pub fn publish_status(ctx: &Ctx, prev: &mut (Histogram, Histogram)) {
    let mut hub = ctx.hub.borrow_mut();
    if hub.subscriber_count(STATUS_CHANNEL) == 0 {
        return;
    }
    let fanout = hub.stats.fanout_delay.since(&prev.0);
    let lag = hub.stats.loop_lag.since(&prev.1);
    *prev = (hub.stats.fanout_delay.clone(), hub.stats.loop_lag.clone());
    let ms = |h: &Histogram, q| h.quantile(q).map(|s| s * 1000.0);
    let sample = serde_json::json!({
        "t_ms": ctx.now_ms(),
        "connections": hub.connection_count(),
        "channels": hub.channel_count(),
        "messages_in": hub.stats.messages_in,
        "deliveries": hub.stats.deliveries,
        "bytes_out": hub.stats.bytes_out,
        "slow_consumer_disconnects": hub.stats.slow_consumer_disconnects,
        "fanout_p50_ms": ms(&fanout, 0.5),
        "fanout_p99_ms": ms(&fanout, 0.99),
        "loop_lag_p99_ms": ms(&lag, 0.99),
        "ready": ctx.redis.as_ref().is_none_or(|l| l.readiness().is_ok()),
    })
    .to_string();
    hub.publish(STATUS_CHANNEL, OpCode::Text, sample.as_bytes(), None);
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
    sock: &mut Sock,
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
    let (res, _) = sock
        .wr
        .write_all(http::error_response(err, keep_alive))
        .await;
    res.map(|_| ())
}

/// Reads a `Content-Length` body, refusing it (413) before reading when it
/// is over `max_body_size`. A client that sent `Expect: 100-continue` is
/// told to go on first (RFC 9110 10.1.1), unless the body is already here.
async fn read_body(
    ctx: &Ctx,
    sock: &mut Sock,
    buf: &mut BytesMut,
    req: &http::Request,
) -> io::Result<Result<Bytes, HttpError>> {
    let body = req.body;
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
    if req.expect_continue && buf.len() < len {
        let (res, _) = sock
            .wr
            .write_all(&b"HTTP/1.1 100 Continue\r\n\r\n"[..])
            .await;
        res?;
    }
    while buf.len() < len {
        if read_more(ctx, sock.stream(), buf).await? == 0 {
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
    // The same backpressure as WebSocket publishers, bounded in time.
    let mut waited = 0;
    while over_backlog(ctx) {
        if waited == 0 {
            ctx.hub.borrow_mut().stats.publish_backpressure += 1;
        }
        if waited >= BACKPRESSURE_HTTP_WAIT_MS {
            let e = HttpError {
                status: 503,
                message: "server overloaded, retry later",
            };
            return http::error_response(&e, keep_alive);
        }
        monoio::time::sleep(Duration::from_millis(1)).await;
        waited += 1;
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

/// Longest an HTTP publish waits for the write backlog to drain.
const BACKPRESSURE_HTTP_WAIT_MS: u32 = 5_000;

/// Whether the worker's write backlog is over `--publish-backpressure`.
pub(super) fn over_backlog(ctx: &Ctx) -> bool {
    ctx.hub.borrow().backlog() > ctx.cfg.publish_backpressure
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle WebSocket costs its task (this future) plus its writer task;
    /// the aim is ≤ 2 KiB of our memory per connection in total.
    #[test]
    fn connection_tasks_stay_small() {
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let client = std::net::TcpStream::connect(addr).unwrap();
            let (server, _) = listener.accept().unwrap();
            server.set_nonblocking(true).unwrap();
            let stream = TcpStream::from_std(server).unwrap();
            let ctx = Ctx::new(Config::default());
            let conn = handle(ctx.clone(), Sock::new(stream));
            let size = std::mem::size_of_val(&conn);
            eprintln!("connection task future: {size} bytes");
            assert!(size <= 1000, "connection task future is {size} bytes");
            drop(conn);
            drop(client);
        });
    }
}
