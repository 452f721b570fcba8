//! One connection from accept to close: register it, serve HTTP requests
//! (head → route → dispatch) until one upgrades or the connection ends,
//! then hand an upgraded connection to `websocket`.

use std::io;
use std::net::IpAddr;
use std::rc::Rc;

use bytes::{Buf, Bytes, BytesMut};

use crate::auth::{self, Grants};
use crate::cache::response::Answer;
use crate::http::{self, BodyPlan, HttpError, Method, Route};
use crate::hub::ConnId;
use crate::log;
use crate::peers::PeerRefusal;
use crate::server::admission;
use crate::server::cache::{self, Incoming};
use crate::server::conn::park::Session as Parked;
use crate::server::conn::sock::Sock;
use crate::server::conn::stream::Stream;
use crate::server::conn::upgrade::{self, Upgrade};
use crate::server::conn::websocket as ws_conn;
use crate::server::history::{owner, recall, resume};
use crate::server::hooks::api as hooks_api;
use crate::server::presence::edge as presence_edge;
use crate::server::pusher::api as pusher_api;
use crate::server::tls::session::Session;
use crate::server::worker::Worker;
use crate::server::{console, endpoints, publish, sse};

/// Serves one accepted socket to the end. Its future is the connection's
/// task, allocated for the connection's whole life: keep it small (large,
/// short-lived phases are boxed; see the size test).
pub async fn handle(w: Rc<Worker>, sock: Sock, ctx: ConnCtx) {
    let fd = sock.fd;
    let mut sock = Stream::plain(sock);
    // Its place among the handshakes under way is taken when its
    // ClientHello arrives (`tls::session`): a silent socket holds none,
    // only a connection (bounded per address and by --max-connections)
    // until --handshake-timeout.
    let tls = w.tls.as_ref().filter(|_| ctx.role == Listener::Public);
    let per_ip = w.peers.borrow().connect(ctx.ip);
    let registered = match per_ip {
        Ok(_) => w.hub.borrow_mut().register(fd),
        Err(_) => None,
    };
    let Some(id) = registered else {
        let err = refused(&w, per_ip, ctx.ip);
        // A TLS connection is refused before its handshake, cheaply under
        // load: no session is made for it (its place is given back now),
        // no answer, only the close. Boxed: the write and the drain
        // buffer would otherwise enlarge every task.
        if tls.is_none() {
            Box::pin(async {
                let _ = sock.write_all(http::error_response(&err, false)).await;
                sock.linger_close().await;
            })
            .await;
        }
        return;
    };
    if let Some(tls) = tls {
        sock.tls = Some(Session::new(tls.config(), tls.max_handshakes()));
    }
    let mut buf = BytesMut::new();
    let release_ip = (per_ip == Ok(true)).then_some(ctx.ip);
    // Boxed: the HTTP phase (with the cache and publish paths) is large and
    // short-lived; inline it would size every WebSocket's task for it.
    match Box::pin(http_phase(&w, &mut sock, (id, ctx), &mut buf)).await {
        Ok(Some(Handoff::Ws(up))) => {
            // Its own task ends (or parks) it in the worker's books.
            ws_conn::websocket(&w, sock, id, (up, release_ip), buf);
            return;
        }
        Ok(Some(Handoff::Sse(grants))) => {
            let session = Parked::stream(grants, release_ip);
            sse::start(&w, sock, id, session);
            return;
        }
        // Boxed: TLS's flush would otherwise enlarge every task.
        Ok(None) if sock.tls.is_some() => Box::pin(sock.close()).await,
        Ok(None) => {}
        Err(e) => log!(Debug, "connection error", conn = id, error = e),
    }
    w.forget(id, release_ip);
}

/// Counts and logs a connection over the per-address bound or
/// `--max-connections` (giving its address's place back in the latter
/// case); the answer it gets.
fn refused(w: &Worker, per_ip: Result<bool, PeerRefusal>, ip: IpAddr) -> HttpError {
    let message = if per_ip.is_err() {
        w.hub.borrow_mut().stats.per_ip_connections_rejected += 1;
        log::refused(
            log::Refusal::PerIp,
            "connection refused",
            "too many connections from this address",
        );
        "too many connections from this address"
    } else {
        if per_ip == Ok(true) {
            w.peers.borrow().release(ip);
        }
        w.hub.borrow_mut().stats.connections_rejected += 1;
        "too many connections"
    };
    HttpError {
        status: 503,
        message,
    }
}

/// Which listener accepted a connection: with `--admin-listen`, the admin
/// routes are served only on the admin one, and it serves nothing else
/// but the probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `--listen`.
    Public,
    /// `--admin-listen`.
    Admin,
}

impl Listener {
    /// Whether this listener serves `route` (`split`: `--admin-listen` set).
    fn serves(self, split: bool, route: &Route<'_>) -> bool {
        let admin = matches!(
            route,
            Route::Stats
                | Route::Metrics
                | Route::Status
                | Route::StatusWs
                | Route::Console
                | Route::ConsoleLogin
                | Route::ConsoleFeed
                | Route::ConsoleSeries
                | Route::ConsoleAction(_)
        );
        match self {
            _ if !split => true,
            Listener::Public => !admin,
            // The server API (publish key) is served on both.
            Listener::Admin => {
                admin || matches!(route, Route::Healthz | Route::Readyz | Route::ServerApi(_))
            }
        }
    }
}

/// What a connection's tasks know about where it came from.
#[derive(Debug, Clone, Copy)]
pub struct ConnCtx {
    /// The listener that accepted it.
    pub role: Listener,
    /// The client's address (per-IP limits).
    pub ip: IpAddr,
}

impl ConnCtx {
    /// A connection accepted by `role` from `ip`.
    pub fn new(role: Listener, ip: IpAddr) -> ConnCtx {
        ConnCtx { role, ip }
    }
}

/// What to do after a request was answered.
enum Next {
    /// Read the next request on this connection.
    KeepAlive,
    /// The connection ends.
    Close,
    /// The connection upgraded.
    Upgrade(Upgrade),
    /// The connection is an event stream now (`GET /sse`).
    Sse(Grants),
}

/// What the HTTP phase hands a connection on to.
enum Handoff {
    /// A WebSocket.
    Ws(Upgrade),
    /// A Server-Sent Events stream with these grants.
    Sse(Grants),
}

/// Serves plain HTTP requests until one upgrades, the peer leaves, or an
/// error ends the connection.
async fn http_phase(
    w: &Rc<Worker>,
    sock: &mut Stream,
    (id, ctx): (ConnId, ConnCtx),
    buf: &mut BytesMut,
) -> io::Result<Option<Handoff>> {
    loop {
        w.hub.borrow_mut().request_started(id);
        let Some(req) = read_head(w, sock, buf).await? else {
            return Ok(None);
        };
        match serve(w, sock, (id, ctx), buf, &req).await? {
            Next::KeepAlive => {}
            Next::Close => return Ok(None),
            Next::Upgrade(up) => return Ok(Some(Handoff::Ws(up))),
            Next::Sse(grants) => return Ok(Some(Handoff::Sse(grants))),
        }
    }
}

/// Reads until a complete request head is in `buf`; `None` when the peer
/// left or the head was refused (answered, the connection ends).
async fn read_head(
    w: &Worker,
    sock: &mut Stream,
    buf: &mut BytesMut,
) -> io::Result<Option<http::Request>> {
    loop {
        match http::parse_request(buf, w.cfg.http.max_handshake_bytes) {
            Ok(Some(req)) => return Ok(Some(req)),
            Ok(None) => {}
            Err(e) => {
                reply_error(sock, &e, false).await?;
                return Ok(None);
            }
        }
        if sock.read(w, buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// Routes one request and answers it.
// long: the router, one arm per route
async fn serve(
    w: &Rc<Worker>,
    sock: &mut Stream,
    (id, ctx): (ConnId, ConnCtx),
    buf: &mut BytesMut,
    req: &http::Request,
) -> io::Result<Next> {
    let route = route_for(w, &ctx, req);
    let head = wants_head(w, &route).then(|| Bytes::copy_from_slice(&buf[..req.head_len]));
    buf.advance(req.head_len);
    w.hub.borrow_mut().stats.http_requests += 1;
    // Decided for every route before anything is answered: a body is read
    // for the handler, or the connection closes after the answer; it is
    // never left in `buf` to be parsed as the next request.
    let plan = http::body_plan(req, &route, &w.cfg.http);
    if let BodyPlan::Refuse(e) = &plan {
        reply_error(sock, e, false).await?;
        return Ok(close_unread(sock).await);
    }
    let keep_alive = req.keep_alive && plan != BodyPlan::Close;
    let route = match route {
        Ok(r) => r,
        Err(e) => {
            reply_error(sock, &e, keep_alive).await?;
            return Ok(after_answer(sock, keep_alive, plan).await);
        }
    };
    if route == Route::ConsoleFeed && !console::session_ok(w, req) {
        // Refused before the upgrade: no session, no feed.
        w.console.borrow_mut().counts.actions_refused += 1;
        write_answer(sock, console::unauthorized(false).into()).await?;
        return Ok(Next::Close);
    }
    if let Some(target) = upgrade::upgrade_target(&route) {
        return Ok(
            match upgrade::upgrade(w, sock, (id, ctx.ip), (req, head.as_deref()), target).await? {
                Some(up) => Next::Upgrade(up),
                None => Next::Close,
            },
        );
    }
    if route == Route::Sse {
        let head = head.unwrap_or_default();
        let opened = sse::open(w, sock, (id, ctx.ip), req, &head).await?;
        return Ok(opened.map_or(Next::Close, Next::Sse));
    }
    let head_only = req.method == Method::Head;
    let resp = match route {
        Route::Publish(channel) => match publish_route(w, sock, buf, req, channel).await? {
            Some(answer) => answer,
            None => return Ok(Next::Close),
        },
        // Boxed: a Redis read inline would enlarge every connection's future.
        Route::History(_) | Route::Presence(_) => {
            let read = channel_read(w, (id, ctx.ip, req), head.as_deref(), &route, keep_alive);
            match Box::pin(read).await {
                Ok(resp) => resp.into(),
                Err(refusal) => {
                    // A refusal closes the connection.
                    write_answer(sock, refusal.into()).await?;
                    return Ok(Next::Close);
                }
            }
        }
        Route::PusherApi(_) | Route::ServerApi(_) => {
            let Some(body) = body_or_refuse(w, sock, buf, req).await? else {
                return Ok(Next::Close);
            };
            // Boxed: the APIs' futures are short-lived and large.
            Box::pin(api_answer(w, &route, req, &body)).await.into()
        }
        Route::Console | Route::ConsoleLogin | Route::ConsoleSeries | Route::ConsoleAction(_) => {
            let Some(body) = body_or_refuse(w, sock, buf, req).await? else {
                return Ok(Next::Close);
            };
            // Boxed: an action's future (publish, Redis reads) is large.
            Box::pin(console_answer(
                w,
                &route,
                (id, ctx.ip),
                (req, &body),
                sock.tls.is_some(),
            ))
            .await
            .into()
        }
        Route::Cache(_) | Route::CachePurge => {
            let Some(body) = body_or_refuse(w, sock, buf, req).await? else {
                return Ok(Next::Close);
            };
            let inc = Incoming::new(req, head.unwrap_or_default(), body);
            let renew = || w.hub.borrow_mut().request_started(id);
            // Boxed: inline, the cache's future would make every
            // connection's future larger (by 384 bytes when measured).
            Box::pin(cache::respond(w.cache.as_ref(), &route, inc, &renew)).await
        }
        Route::Stats | Route::Metrics if w.mesh.get().is_some() => {
            Box::pin(endpoints::respond_all(w, &route, keep_alive, head_only))
                .await
                .into()
        }
        other => endpoints::respond(w, &other, keep_alive, head_only)
            .expect("every other route is a plain endpoint")
            .into(),
    };
    write_answer(sock, resp).await?;
    Ok(after_answer(sock, keep_alive, plan).await)
}

/// The Pusher HTTP API's or the server API's answer.
async fn api_answer(w: &Worker, route: &Route<'_>, req: &http::Request, body: &[u8]) -> Vec<u8> {
    match *route {
        Route::PusherApi(rest) => pusher_api::respond(w, rest, req, body).await,
        Route::ServerApi(rest) => hooks_api::respond(w, rest, req, body).await,
        _ => unreachable!("only API routes"),
    }
}

/// The console's pages, login, series and actions.
async fn console_answer(
    w: &Worker,
    route: &Route<'_>,
    (id, ip): (ConnId, IpAddr),
    (req, body): (&http::Request, &[u8]),
    tls: bool,
) -> Vec<u8> {
    match *route {
        Route::ConsoleAction(name) => console::actions::respond(w, (id, ip), name, req, body).await,
        _ => console::respond(w, route, (req, body), (ip, tls)),
    }
}

/// Whether `route` needs the raw head: the cache re-reads it (query,
/// Vary'd headers), and so does the connect hook (cookies, allow-listed
/// headers); only their routes pay for the copy.
fn wants_head(w: &Worker, route: &Result<Route<'_>, HttpError>) -> bool {
    match route {
        // The cache re-reads the head (query, Vary'd headers), and so does
        // an event stream (its token, Last-Event-ID).
        Ok(Route::Cache(_) | Route::CachePurge | Route::Sse) => true,
        // The connect hook reads an upgrade's head, and a channel read's.
        Ok(Route::History(_) | Route::Presence(_)) => w.connect_hook().is_some(),
        Ok(r) => w.connect_hook().is_some() && upgrade::upgrade_target(r).is_some(),
        Err(_) => false,
    }
}

/// `POST /publish/{channel}`: the publish key, the body, the publish;
/// `None` when the request was refused (answered; the connection closes).
async fn publish_route(
    w: &Worker,
    sock: &mut Stream,
    buf: &mut BytesMut,
    req: &http::Request,
    channel: &str,
) -> io::Result<Option<Answer>> {
    if let Err((status, message)) = auth::authorize_publish(&w.cfg.auth, req) {
        w.hub.borrow_mut().stats.auth_failures += 1;
        log::refused(log::Refusal::PublishKey, "publish refused", message);
        reply_error(sock, &HttpError { status, message }, false).await?;
        return Ok(None);
    }
    let Some(body) = body_or_refuse(w, sock, buf, req).await? else {
        return Ok(None);
    };
    let query = req.query.as_deref();
    let answer = publish::publish_http(w, (channel, query), &body, req.keep_alive).await;
    Ok(Some(answer.into()))
}

/// `GET /history/{channel}` and `GET /presence/{channel}`, admitted as a
/// subscribe to the channel is (`admission`: the token, or the connect
/// hook for a request without one; the rules; the subscribe hook);
/// `Err`: the refusal to answer (the connection closes).
async fn channel_read(
    w: &Worker,
    (id, ip, req): (ConnId, IpAddr, &http::Request),
    head: Option<&[u8]>,
    route: &Route<'_>,
    keep_alive: bool,
) -> Result<Vec<u8>, Vec<u8>> {
    let (Route::History(channel) | Route::Presence(channel)) = *route else {
        unreachable!("only history and presence routes are reads of a channel");
    };
    let grants = match admission::by_connect_hook(w, (id, ip, req), head, false).await {
        Some(admitted) => admitted?.grants,
        None => w.authorize(req, None).map_err(|(status, message)| {
            w.hub.borrow_mut().stats.auth_failures += 1;
            log::refused(log::Refusal::Upgrade, "channel read refused", message);
            http::error_response(&HttpError { status, message }, false)
        })?,
    };
    let filters = admission::http_read(w, (id, &grants), channel).await?;
    let query = req.query.as_deref();
    let filtered = (channel, filters.as_ref());
    Ok(match (route, &w.redis) {
        (Route::Presence(_), _) => {
            presence_edge::http_answer(w, (id, channel), query, keep_alive).await
        }
        (_, Some(l)) if l.keeps_history_of(channel) => {
            resume::history_http(w, filtered, query, keep_alive).await
        }
        _ => match owner::locate(w, channel, false).await {
            Ok(()) => recall::history_http(&w.hub.borrow(), filtered, query, keep_alive),
            Err(why) => recall::error(503, why, keep_alive),
        },
    })
}

/// The route for `req` on this listener: admin routes answer 404 on the
/// public listener when `--admin-listen` is set.
fn route_for<'a>(
    w: &'a Worker,
    ctx: &ConnCtx,
    req: &'a http::Request,
) -> Result<Route<'a>, HttpError> {
    let root = w.cfg.root_channel.as_deref();
    let cache_routes = w.cache.as_ref().map(|c| c.routes());
    let split = w.cfg.admin_listen.is_some();
    let route = match http::route_with_cache(req.method, &req.path, root, cache_routes) {
        Err(e) if e.status == 404 && w.cfg.auth.publish_key.is_some() => {
            http::server_api_route(req.method, &req.path).unwrap_or(Err(e))
        }
        other => other,
    };
    route.and_then(|r| {
        let console_off = w.cfg.admin_key.is_none() && is_console(&r);
        if ctx.role.serves(split, &r) && !console_off {
            Ok(r)
        } else {
            Err(HttpError {
                status: 404,
                message: "not found",
            })
        }
    })
}

/// Whether `route` is one of the console's (served only with
/// `--admin-key`).
fn is_console(route: &Route<'_>) -> bool {
    matches!(
        route,
        Route::Console
            | Route::ConsoleLogin
            | Route::ConsoleFeed
            | Route::ConsoleSeries
            | Route::ConsoleAction(_)
    )
}

/// What follows an answer: keep-alive, or close (draining a body the
/// route did not read).
async fn after_answer(sock: &mut Stream, keep_alive: bool, plan: BodyPlan) -> Next {
    match (keep_alive, plan) {
        (true, _) => Next::KeepAlive,
        (false, BodyPlan::Close) => close_unread(sock).await,
        (false, _) => Next::Close,
    }
}

/// Ends a connection whose client sent bytes we will not read (a body
/// the route takes none of): half-close and drain, bounded, so the client
/// gets the answer rather than a reset.
async fn close_unread(sock: &mut Stream) -> Next {
    // Boxed: its drain buffer would otherwise enlarge every task.
    Box::pin(sock.linger_close()).await;
    Next::Close
}

async fn reply_error(sock: &mut Stream, err: &HttpError, keep_alive: bool) -> io::Result<()> {
    log!(
        Debug,
        "http error",
        status = err.status,
        reason = err.message
    );
    sock.write_all(http::error_response(err, keep_alive)).await
}

/// The request's body, or `None` after answering why it was refused.
async fn body_or_refuse(
    w: &Worker,
    sock: &mut Stream,
    buf: &mut BytesMut,
    req: &http::Request,
) -> io::Result<Option<Bytes>> {
    match read_body(w, sock, buf, req).await? {
        Ok(body) => Ok(Some(body)),
        Err(e) => {
            reply_error(sock, &e, false).await?;
            Ok(None)
        }
    }
}

/// Reads a `Content-Length` body (its size already checked by
/// [`http::body_plan`]; checked again here, so no caller can skip it). A client that sent `Expect: 100-continue` is
/// told to go on first (RFC 9110 10.1.1), unless the body is already here.
async fn read_body(
    w: &Worker,
    sock: &mut Stream,
    buf: &mut BytesMut,
    req: &http::Request,
) -> io::Result<Result<Bytes, HttpError>> {
    let len = match req.body {
        http::Body::None => 0,
        http::Body::Length(n) => n,
    };
    if len > w.cfg.http.max_body_size {
        return Ok(Err(HttpError {
            status: 413,
            message: "request body too large",
        }));
    }
    if req.expect_continue && buf.len() < len {
        sock.write_all(&b"HTTP/1.1 100 Continue\r\n\r\n"[..])
            .await?;
    }
    let mut charge = w.inbound_charge();
    while buf.len() < len {
        if sock.read(w, buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if !charge.update(buf.capacity(), w.cfg.max_total_inbound) {
            // Like a WebSocket's 1013: a large body arriving while the
            // worker holds all the input it may.
            w.hub.borrow_mut().stats.inbound_budget_refusals += 1;
            return Ok(Err(HttpError {
                status: 503,
                message: "inbound memory budget exhausted; try again later",
            }));
        }
    }
    Ok(Ok(buf.split_to(len).freeze()))
}

/// Writes a response; a shared body goes out with its head in one vectored
/// write, straight from the cache's memory.
async fn write_answer(sock: &mut Stream, answer: Answer) -> io::Result<()> {
    if answer.body.is_empty() {
        return sock.write_all(answer.head).await;
    }
    let bufs = vec![Bytes::from(answer.head), answer.body];
    sock.write_vectored(bufs).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use monoio::net::TcpStream;

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
            let w = Worker::new(Config::default());
            let ctx = ConnCtx::new(Listener::Public, addr.ip());
            let conn = handle(w.clone(), Sock::new(stream), ctx);
            let size = std::mem::size_of_val(&conn);
            eprintln!("connection task future: {size} bytes");
            // With the task header (64 B) mimalloc serves the cell from its
            // 1,280-byte bin up to 1,216 B of future; 1,024 keeps headroom
            // and catches growth (tests/idle_memory.rs has the whole heap).
            assert!(size <= 1024, "connection task future is {size} bytes");
            drop(conn);
            drop(client);
        });
    }
}
