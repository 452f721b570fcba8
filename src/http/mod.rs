//! HTTP/1.1 request heads, routing and responses (sans-I/O).
//!
//! Only what a WebSocket gateway needs: parse a head with `httparse`, decide
//! the route and the upgrade, and encode small responses. Bodies are read by
//! the edge using the `Content-Length` decided here. The responses are
//! `response.rs`.

use crate::channel::valid_channel_name;
use crate::ws::handshake::{validate_upgrade, HandshakeError};

mod response;
pub use response::{
    error_response, handshake_error, reason, response, retry_after_response, HttpError,
};

/// Most headers in one request; more is answered 431.
pub const MAX_HEADERS: usize = 64;

/// Request size limits (`--max-handshake-bytes`, `--max-body-size`),
/// owned by this layer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// Largest request head (request line + headers); larger ones get 431.
    pub max_handshake_bytes: usize,
    /// Largest request body; larger ones get 413.
    pub max_body_size: usize,
}

/// Request methods the router distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET
    Get,
    /// HEAD
    Head,
    /// POST
    Post,
    /// Anything else.
    Other,
}

/// How the request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body.
    None,
    /// `Content-Length` bytes.
    Length(usize),
}

/// A parsed request head.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The query string (after `?`), if any.
    pub query: Option<String>,
    /// The `Authorization` header value.
    pub authorization: Option<Vec<u8>>,
    /// The `Origin` header value (browsers send it on upgrades).
    pub origin: Option<Vec<u8>>,
    /// The `Cookie` header value (the console's session).
    pub cookie: Option<Vec<u8>>,
    /// Whether the console's action header (`X-Corecast-Console`) is
    /// present: a cross-site form cannot send it (CSRF).
    pub console_header: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request: the client waits for
    /// `100 Continue` (or a final status) before sending the body.
    pub expect_continue: bool,
    /// Bytes of the head, including the blank line.
    pub head_len: usize,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// Body framing.
    pub body: Body,
    /// For GETs: the `Sec-WebSocket-Accept` value, or why it is no upgrade.
    pub upgrade: Result<String, HandshakeError>,
    /// For upgrades: the permessage-deflate offer the server would accept
    /// (RFC 7692), if the client made one; `--compression` decides.
    pub deflate: Option<crate::ws::extension::Agreed>,
}

/// Parses a request head from the start of `buf`. `Ok(None)`: incomplete,
/// read more (the caller enforces `max_head` on what it buffers; this also
/// refuses a complete head longer than that).
pub fn parse_request(buf: &[u8], max_head: usize) -> Result<Option<Request>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= max_head => {
            return Err(HttpError::new(431, "request head too large"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HttpError::new(431, "too many headers"))
        }
        Err(_) => return Err(HttpError::new(400, "malformed request")),
    };
    if head_len > max_head {
        return Err(HttpError::new(431, "request head too large"));
    }
    let version = req.version.unwrap_or(0);
    let method_str = req.method.unwrap_or("");
    let method = match method_str {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        _ => Method::Other,
    };
    let target = req.path.unwrap_or("/");
    let target = target.split('#').next().unwrap_or("/");
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (channel_path(p), Some(q.to_string())),
        None => (channel_path(target), None),
    };
    let authorization = header(req.headers, "authorization").map(<[u8]>::to_vec);
    let origin = header(req.headers, "origin").map(<[u8]>::to_vec);
    let cookie = header(req.headers, "cookie").map(<[u8]>::to_vec);
    let console_header = header(req.headers, "x-corecast-console").is_some();
    let expect_continue = version >= 1
        && header(req.headers, "expect")
            .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"100-continue"));
    let body = body_framing(req.headers)?;
    let keep_alive = keep_alive(version, req.headers);
    let upgrade = validate_upgrade(method_str, version, req.headers);
    let deflate = upgrade.as_ref().ok().and_then(|_| {
        let offers = req.headers.iter();
        crate::ws::extension::negotiate(
            offers
                .filter(|h| h.name.eq_ignore_ascii_case("sec-websocket-extensions"))
                .map(|h| h.value),
        )
    });
    Ok(Some(Request {
        method,
        path,
        query,
        authorization,
        origin,
        cookie,
        console_header,
        expect_continue,
        head_len,
        keep_alive,
        body,
        upgrade,
        deflate,
    }))
}

fn header<'h>(headers: &'h [httparse::Header<'_>], name: &str) -> Option<&'h [u8]> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

fn body_framing(headers: &[httparse::Header<'_>]) -> Result<Body, HttpError> {
    if header(headers, "transfer-encoding").is_some() {
        // Chunked uploads are not needed by any client of a publish API and
        // refusing them removes the classic CL/TE smuggling ambiguity.
        return Err(HttpError::new(411, "send a Content-Length body"));
    }
    let mut lengths = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"));
    let Some(first) = lengths.next() else {
        return Ok(Body::None);
    };
    if lengths.any(|h| h.value != first.value) {
        return Err(HttpError::new(400, "conflicting Content-Length"));
    }
    let n = std::str::from_utf8(first.value)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<usize>().ok())
        .ok_or(HttpError::new(400, "invalid Content-Length"))?;
    Ok(if n == 0 { Body::None } else { Body::Length(n) })
}

fn keep_alive(version: u8, headers: &[httparse::Header<'_>]) -> bool {
    let has = |token: &str| {
        header(headers, "connection").is_some_and(|v| {
            v.split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        })
    };
    if version >= 1 {
        !has("close")
    } else {
        has("keep-alive")
    }
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    /// WebSocket upgrade into one channel (`/ws/{c}` or `/` with a root channel).
    WsChannel(&'a str),
    /// WebSocket upgrade into the JSON control mode (`/ws`).
    WsMulti,
    /// `POST /publish/{c}`.
    Publish(&'a str),
    /// `GET /history/{c}`.
    History(&'a str),
    /// `GET /presence/{c}`.
    Presence(&'a str),
    /// `GET /healthz`.
    Healthz,
    /// `GET /stats`.
    Stats,
    /// `GET /readyz`.
    Readyz,
    /// `GET /metrics` (Prometheus).
    Metrics,
    /// `GET /status`: the live status page.
    Status,
    /// `GET /status/ws`: the status page's WebSocket feed.
    StatusWs,
    /// `GET`/`HEAD` under the cache prefix (the whole path).
    Cache(&'a str),
    /// `POST /cache/purge`.
    CachePurge,
    /// `GET /sse?channel=...`: a Server-Sent Events stream.
    Sse,
    /// `GET /app/{key}`: a Pusher protocol WebSocket.
    PusherWs(&'a str),
    /// `/apps/{rest}`: the Pusher HTTP API (`rest` = what follows
    /// `/apps/`; the API routes it further).
    PusherApi(&'a str),
    /// `/api/{rest}`: the server API (`disconnect`, `subscribe`, ...).
    ServerApi(&'a str),
    /// `GET /console`: the operator console (or its login page).
    Console,
    /// `POST /console/login`: the console's login form.
    ConsoleLogin,
    /// `GET /console/feed`: the console's WebSocket feed.
    ConsoleFeed,
    /// `GET /console/series`: the last 15 minutes, for a page that opens.
    ConsoleSeries,
    /// `POST /console/api/{action}`: an action from the console.
    ConsoleAction(&'a str),
}

/// Routes a method and path; errors carry their status (404, 405, 400).
pub fn route<'a>(
    method: Method,
    path: &'a str,
    root_channel: Option<&'a str>,
) -> Result<Route<'a>, HttpError> {
    let get = matches!(method, Method::Get | Method::Head);
    let (route, allowed) = match path {
        "/" => match root_channel {
            Some(c) => (Route::WsChannel(c), method == Method::Get),
            None => return Err(HttpError::new(404, "not found")),
        },
        "/ws" => (Route::WsMulti, method == Method::Get),
        "/sse" => (Route::Sse, method == Method::Get),
        "/healthz" => (Route::Healthz, get),
        "/stats" => (Route::Stats, get),
        "/readyz" => (Route::Readyz, get),
        "/metrics" => (Route::Metrics, get),
        "/status" => (Route::Status, get),
        "/status/ws" => (Route::StatusWs, method == Method::Get),
        "/console" => (Route::Console, get),
        "/console/login" => (Route::ConsoleLogin, method == Method::Post),
        "/console/feed" => (Route::ConsoleFeed, method == Method::Get),
        "/console/series" => (Route::ConsoleSeries, get),
        _ => {
            if let Some(c) = path.strip_prefix("/ws/") {
                (Route::WsChannel(channel(c)?), method == Method::Get)
            } else if let Some(c) = path.strip_prefix("/publish/") {
                (Route::Publish(channel(c)?), method == Method::Post)
            } else if let Some(c) = path.strip_prefix("/history/") {
                (Route::History(channel(c)?), get)
            } else if let Some(c) = path.strip_prefix("/presence/") {
                (Route::Presence(channel(c)?), get)
            } else if let Some(key) = path.strip_prefix("/app/") {
                (Route::PusherWs(key), method == Method::Get)
            } else if let Some(action) = path.strip_prefix("/console/api/") {
                (Route::ConsoleAction(action), method == Method::Post)
            } else if let Some(rest) = path.strip_prefix("/apps/") {
                (
                    Route::PusherApi(rest),
                    matches!(method, Method::Get | Method::Post),
                )
            } else {
                return Err(HttpError::new(404, "not found"));
            }
        }
    };
    if !allowed {
        return Err(HttpError::new(405, "method not allowed"));
    }
    Ok(route)
}

/// The server API's routes (`POST /api/disconnect`, `/api/subscribe`,
/// `/api/unsubscribe`, `GET /api/connections`), for a path nothing else
/// serves: the edge asks only with a publish key configured, after the
/// cache (whose default prefix is `/api/` too) had its turn.
pub fn server_api_route(method: Method, path: &str) -> Option<Result<Route<'_>, HttpError>> {
    let name = path.strip_prefix("/api/")?;
    let allowed = match name {
        "disconnect" | "subscribe" | "unsubscribe" => method == Method::Post,
        "connections" => matches!(method, Method::Get | Method::Head),
        _ => return None,
    };
    Some(match allowed {
        true => Ok(Route::ServerApi(name)),
        false => Err(HttpError::new(405, "method not allowed")),
    })
}

/// Path of the cache's purge endpoint.
pub const PURGE_PATH: &str = "/cache/purge";

/// The cache's routes, present when an origin is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheRoutes<'a> {
    /// Paths starting with this are cached.
    pub prefix: &'a str,
    /// Whether `POST /cache/purge` is served (a token is configured).
    pub purge: bool,
}

/// [`route`], then the cache's routes for paths the gateway does not serve
/// itself (so no prefix can shadow `/ws`, `/publish`, `/healthz`...).
pub fn route_with_cache<'a>(
    method: Method,
    path: &'a str,
    root_channel: Option<&'a str>,
    cache: Option<CacheRoutes<'_>>,
) -> Result<Route<'a>, HttpError> {
    let builtin = route(method, path, root_channel);
    let Some(cache) = cache else {
        return builtin;
    };
    if !matches!(&builtin, Err(e) if e.status == 404) {
        return builtin;
    }
    let (route, allowed) = if cache.purge && path == PURGE_PATH {
        (Route::CachePurge, method == Method::Post)
    } else if path.starts_with(cache.prefix) {
        (
            Route::Cache(path),
            matches!(method, Method::Get | Method::Head),
        )
    } else {
        return builtin;
    };
    if !allowed {
        return Err(HttpError::new(405, "method not allowed"));
    }
    Ok(route)
}

/// What the connection does with a request's body before (or instead of)
/// the next request. Every route gets one, so a body is never left in the
/// buffer to be parsed as the next request (CL.0 request smuggling: a
/// `POST /publish/...` hidden in the body of a health check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyPlan {
    /// No body: keep the connection alive if the client asked to.
    None,
    /// Read exactly this many bytes for the handler (at most
    /// `max_body_size`), then go on.
    Length(usize),
    /// The route takes no body: answer, then close without reading it.
    Close,
    /// Answer this error and close (body over `max_body_size`, or a body on
    /// a WebSocket upgrade, where it would be taken for frames).
    Refuse(HttpError),
}

/// The [`BodyPlan`] of a routed request (`route` as [`route_with_cache`]
/// returned it; an unroutable request with a body is answered and closed).
pub fn body_plan(req: &Request, route: &Result<Route<'_>, HttpError>, limits: &Limits) -> BodyPlan {
    let Body::Length(n) = req.body else {
        return BodyPlan::None;
    };
    match route {
        Ok(
            Route::WsChannel(_)
            | Route::WsMulti
            | Route::StatusWs
            | Route::ConsoleFeed
            | Route::PusherWs(_),
        ) => BodyPlan::Refuse(HttpError::new(400, "a WebSocket upgrade has no body")),
        Ok(Route::Sse) => {
            BodyPlan::Refuse(HttpError::new(400, "an event stream request has no body"))
        }
        Ok(
            Route::Publish(_)
            | Route::Cache(_)
            | Route::CachePurge
            | Route::PusherApi(_)
            | Route::ServerApi(_)
            | Route::ConsoleLogin
            | Route::ConsoleAction(_),
        ) => {
            if n > limits.max_body_size {
                BodyPlan::Refuse(HttpError::new(413, "request body too large"))
            } else {
                BodyPlan::Length(n)
            }
        }
        Ok(_) | Err(_) => BodyPlan::Close,
    }
}

/// A path, with the escapes of the channel charset's reserved characters
/// read back in the channel routes' paths: `%23` as `#` (a user channel,
/// `notifications:#42`, is written `/publish/notifications:%2342`: a raw
/// `#` would start the URL's fragment), `%3A` as `:` and `%40` as `@`
/// (what `encodeURIComponent` and most URL builders write for a
/// namespaced channel). Other paths (the cache's, forwarded to the
/// origin) are kept as sent.
fn channel_path(path: &str) -> String {
    let channel_route = ["/ws/", "/publish/", "/history/", "/presence/"]
        .iter()
        .any(|p| path.starts_with(p));
    if !channel_route || !path.contains('%') {
        return path.to_string();
    }
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let escape = rest.get(i..i + 3).unwrap_or(&rest[i..]);
        let c = match escape.to_ascii_uppercase().as_str() {
            "%23" => Some('#'),
            "%3A" => Some(':'),
            "%40" => Some('@'),
            _ => None,
        };
        match c {
            Some(c) => out.push(c),
            None => out.push_str(escape),
        }
        rest = &rest[i + escape.len()..];
    }
    out.push_str(rest);
    out
}

fn channel(name: &str) -> Result<&str, HttpError> {
    if valid_channel_name(name) {
        Ok(name)
    } else {
        Err(HttpError::new(400, "invalid channel name"))
    }
}

/// `%XX` escapes and `+` decoded (as `URLSearchParams` encodes); `None`
/// for a bad escape or a result that is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_paths_read_escaped_reserved_characters() {
        let cases = [
            ("/publish/doc%3Aboard", "/publish/doc:board"),
            ("/history/doc%3aboard?since=1", "/history/doc:board?since=1"),
            ("/publish/notifications:%2342", "/publish/notifications:#42"),
            ("/ws/a%40b%3Ac", "/ws/a@b:c"),
            ("/publish/a%2Fb%3", "/publish/a%2Fb%3"),
            ("/api/x%3Ay", "/api/x%3Ay"),
        ];
        for (path, want) in cases {
            assert_eq!(channel_path(path), want, "{path}");
        }
    }

    const UPGRADE: &[u8] = b"GET /ws/news?x=1 HTTP/1.1\r\nHost: a\r\nUpgrade: WebSocket\r\n\
        Connection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\nEXTRA";

    #[test]
    fn parses_an_upgrade_and_leaves_trailing_bytes() {
        let r = parse_request(UPGRADE, 8192).unwrap().unwrap();
        assert_eq!(r.path, "/ws/news");
        assert_eq!(r.head_len, UPGRADE.len() - 5);
        assert_eq!(r.upgrade.as_deref(), Ok("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
        assert!(r.keep_alive);
    }

    #[test]
    fn every_prefix_is_partial_not_an_error() {
        for n in 0..UPGRADE.len() - 5 {
            assert!(parse_request(&UPGRADE[..n], 8192).unwrap().is_none(), "{n}");
        }
    }

    #[test]
    fn oversized_and_malformed_heads_get_their_status() {
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(9000));
        assert_eq!(parse_request(big.as_bytes(), 8192).unwrap_err().status, 431);
        let many: String = (0..70).map(|i| format!("H{i}: v\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(
            parse_request(many.as_bytes(), 8192).unwrap_err().status,
            431
        );
        assert_eq!(
            parse_request(b"GET\x01 / HTTP/1.1\r\n\r\n", 8192)
                .unwrap_err()
                .status,
            400
        );
    }

    #[test]
    fn every_route_has_a_body_plan_and_none_leaves_a_body_unread() {
        let limits = Limits {
            max_handshake_bytes: 8192,
            max_body_size: 100,
        };
        let cache = Some(CacheRoutes {
            prefix: "/cache/",
            purge: true,
        });
        let plan = |method: &str, path: &str, body: usize| {
            let head = format!("{method} {path} HTTP/1.1\r\nContent-Length: {body}\r\n\r\n");
            let req = parse_request(head.as_bytes(), 8192).unwrap().unwrap();
            let route = route_with_cache(req.method, &req.path, None, cache);
            body_plan(&req, &route, &limits)
        };
        for path in [
            "/healthz", "/readyz", "/stats", "/metrics", "/status", "/nope",
        ] {
            assert_eq!(plan("GET", path, 0), BodyPlan::None, "{path}");
            assert_eq!(plan("GET", path, 20), BodyPlan::Close, "{path}");
        }
        assert_eq!(plan("POST", "/publish/c", 20), BodyPlan::Length(20));
        assert_eq!(plan("GET", "/cache/x", 20), BodyPlan::Length(20));
        assert_eq!(plan("POST", "/cache/purge", 20), BodyPlan::Length(20));
        assert_eq!(plan("POST", "/publish/c", 101).status(), Some(413));
        assert_eq!(plan("GET", "/ws/c", 5).status(), Some(400));
        assert_eq!(plan("GET", "/ws", 5).status(), Some(400));
        assert_eq!(plan("GET", "/publish/c", 5), BodyPlan::Close, "405 closes");
    }

    impl BodyPlan {
        fn status(&self) -> Option<u16> {
            match self {
                BodyPlan::Refuse(e) => Some(e.status),
                _ => None,
            }
        }
    }

    #[test]
    fn bodies_are_framed_strictly() {
        let p = |h: &str| {
            parse_request(
                format!("POST /publish/c HTTP/1.1\r\n{h}\r\n").as_bytes(),
                8192,
            )
        };
        assert_eq!(
            p("Content-Length: 5\r\n").unwrap().unwrap().body,
            Body::Length(5)
        );
        assert_eq!(p("").unwrap().unwrap().body, Body::None);
        assert_eq!(p("Content-Length: -1\r\n").unwrap_err().status, 400);
        assert_eq!(
            p("Content-Length: 1\r\nContent-Length: 2\r\n")
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(p("Transfer-Encoding: chunked\r\n").unwrap_err().status, 411);
        let r = parse_request(b"GET / HTTP/1.0\r\n\r\n", 64)
            .unwrap()
            .unwrap();
        assert!(!r.keep_alive);
    }

    #[test]
    fn routes_and_their_errors() {
        use Method::*;
        assert_eq!(route(Get, "/ws/a", None), Ok(Route::WsChannel("a")));
        assert_eq!(route(Get, "/", Some("root")), Ok(Route::WsChannel("root")));
        assert_eq!(route(Get, "/ws", None), Ok(Route::WsMulti));
        assert_eq!(route(Post, "/publish/a", None), Ok(Route::Publish("a")));
        assert_eq!(route(Head, "/healthz", None), Ok(Route::Healthz));
        assert_eq!(route(Get, "/readyz", None), Ok(Route::Readyz));
        assert_eq!(route(Get, "/", None).unwrap_err().status, 404);
        assert_eq!(route(Get, "/nope", None).unwrap_err().status, 404);
        assert_eq!(route(Get, "/publish/a", None).unwrap_err().status, 405);
        assert_eq!(route(Post, "/stats", None).unwrap_err().status, 405);
        assert_eq!(route(Get, "/ws/bad%20name", None).unwrap_err().status, 400);
        assert_eq!(route(Get, "/ws/", None).unwrap_err().status, 400);
    }

    #[test]
    fn cache_routes_come_after_the_gateway_s_own() {
        use Method::*;
        let c = Some(CacheRoutes {
            prefix: "/",
            purge: true,
        });
        assert_eq!(
            route_with_cache(Get, "/api/x", None, c),
            Ok(Route::Cache("/api/x"))
        );
        assert_eq!(route_with_cache(Head, "/", None, c), Ok(Route::Cache("/")));
        assert_eq!(
            route_with_cache(Get, "/healthz", None, c),
            Ok(Route::Healthz)
        );
        assert_eq!(
            route_with_cache(Post, "/api/x", None, c)
                .unwrap_err()
                .status,
            405
        );
        assert_eq!(
            route_with_cache(Post, PURGE_PATH, None, c),
            Ok(Route::CachePurge)
        );
        assert_eq!(
            route_with_cache(Get, PURGE_PATH, None, c)
                .unwrap_err()
                .status,
            405
        );
        let api = Some(CacheRoutes {
            prefix: "/api/",
            purge: false,
        });
        assert_eq!(
            route_with_cache(Post, PURGE_PATH, None, api)
                .unwrap_err()
                .status,
            404
        );
        assert_eq!(
            route_with_cache(Get, "/apix", None, api)
                .unwrap_err()
                .status,
            404
        );
        assert_eq!(
            route_with_cache(Get, "/api/x", None, None)
                .unwrap_err()
                .status,
            404
        );
    }

    #[test]
    fn responses_are_well_formed() {
        let r = error_response(&HttpError::new(426, "x"), true);
        let text = String::from_utf8(r).unwrap();
        assert!(text.starts_with("HTTP/1.1 426 Upgrade Required\r\n"));
        assert!(text.contains("Sec-WebSocket-Version: 13\r\n"));
        assert!(text.ends_with("\r\n\r\n{\"error\":\"x\"}"));
        let head = response(200, "text/plain", b"abc", false, &[], true);
        assert!(String::from_utf8(head)
            .unwrap()
            .ends_with("Content-Length: 3\r\nConnection: close\r\n\r\n"));
    }
}
