//! Shared helpers for the integration tests.
//!
//! The server is driven only through clients that share no code with it:
//! `tokio-tungstenite` for well-behaved WebSocket peers, and hand-written
//! bytes over `tokio::net::TcpStream` (a tiny HTTP/1.1 reader and an RFC 6455
//! frame codec below) for peers that misbehave on purpose. Every wait is a
//! condition polled against a deadline, never a bare sleep.

#![allow(dead_code)] // each test binary uses a different subset

pub mod pusher;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corecast::config::Config;
use corecast::log::{self, Level};
use corecast::Server;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Upper bound for any single wait in a test; generous for a loaded debug build.
pub const DEADLINE: Duration = Duration::from_secs(10);
/// Interval between two polls of a condition.
const POLL: Duration = Duration::from_millis(5);

/// The RFC 6455 section 1.3 example key and its accept value.
pub const RFC_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
pub const RFC_ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// A tokio-tungstenite client.
pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A server on an ephemeral port; stopped (not joined) when dropped.
pub struct TestServer {
    server: Option<Server>,
    pub addr: SocketAddr,
    /// The `--admin-listen` address, when one was configured.
    pub admin: Option<SocketAddr>,
}

impl TestServer {
    /// Starts a server with the default configuration changed by `tweak`.
    pub fn start(tweak: impl FnOnce(&mut Config)) -> TestServer {
        // The logger writes to stderr directly, which the test harness
        // does not capture; keep the output to real problems.
        log::set_level(Level::Error);
        let mut cfg = Config {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            ..Config::default()
        };
        tweak(&mut cfg);
        with_test_workers(&mut cfg);
        let server = Server::start(cfg).expect("server starts");
        let addr = server.local_addr();
        let admin = server.admin_addr();
        TestServer {
            server: Some(server),
            addr,
            admin,
        }
    }

    /// [`TestServer::start`] on the epoll driver when `legacy`, else on
    /// io_uring (where the kernel offers it).
    pub fn start_on(legacy: bool, tweak: impl FnOnce(&mut Config)) -> TestServer {
        TestServer::start(|c| {
            c.force_legacy_driver = legacy;
            tweak(c);
        })
    }

    fn inner(&self) -> &Server {
        self.server.as_ref().expect("server not joined yet")
    }

    /// Graceful shutdown, as SIGTERM.
    pub fn stop(&self) {
        self.inner().stop();
    }

    /// Whether the worker thread has exited.
    pub fn is_finished(&self) -> bool {
        self.inner().is_finished()
    }

    /// Waits (off the async runtime) for the worker to exit.
    pub async fn join(mut self) -> io::Result<()> {
        let server = self.server.take().expect("joined once");
        tokio::task::spawn_blocking(move || server.join())
            .await
            .expect("join task")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = &self.server {
            s.stop();
        }
    }
}

/// Runs the test body `async fn $name(legacy: bool)` once per I/O driver,
/// as the tests `$name::io_uring` and `$name::epoll`.
#[allow(unused_macros)]
macro_rules! on_both_drivers {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn io_uring() {
                super::$name(false).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn epoll() {
                super::$name(true).await
            }
        }
    )*};
}
#[allow(unused_imports)]
pub(crate) use on_both_drivers;

/// Awaits `fut`, failing the test if it takes longer than [`DEADLINE`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    within_for(DEADLINE, what, fut).await
}

/// Awaits `fut`, failing the test if it takes longer than `limit`.
pub async fn within_for<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?}: {what}"),
    }
}

/// Polls `cond` until it holds, failing the test after [`DEADLINE`].
pub async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// `CORECAST_TEST_WORKERS=N` (scripts/test.sh's second pass): servers run
/// N workers, unless the test set `workers` itself (or keeps one:
/// [`one_worker_per_server`]).
fn test_workers() -> Option<usize> {
    std::env::var("CORECAST_TEST_WORKERS").ok()?.parse().ok()
}

thread_local! {
    static ONE_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Keeps the servers this test thread starts at one worker in the
/// second pass too: for a test that counts what one *instance* opens in
/// Redis (subscriber connections, reconnects, its own publish buffer) —
/// in Redis mode each worker is an instance, which tests/redis_workers.rs
/// covers. `_why` documents the reason at the call.
pub fn one_worker_per_server(_why: &str) {
    ONE_WORKER.with(|c| c.set(true));
}

/// How many workers a server this test starts without a setting of its
/// own runs (2 in scripts/test.sh's second pass, else 1).
pub fn default_workers() -> usize {
    test_workers().unwrap_or(1)
}

fn with_test_workers(cfg: &mut Config) {
    let Some(n) = test_workers() else { return };
    if ONE_WORKER.with(|c| c.get()) {
        return;
    }
    if cfg.workers == corecast::config::Workers::Count(1) {
        cfg.workers = corecast::config::Workers::Count(n);
    }
}

// ---------------------------------------------------------------- HTTP --

/// A parsed HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Reads bytes until `buf` holds a complete head; returns its length.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    loop {
        if let Some(end) = find_head_end(buf) {
            return Ok(end);
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("EOF inside head: {:?}", String::from_utf8_lossy(buf)),
            ));
        }
    }
}

/// Parses a status line and headers (no body).
fn parse_head(head: &[u8]) -> (u16, Vec<(String, String)>) {
    let text = std::str::from_utf8(head).expect("ASCII response head");
    let mut lines = text.split("\r\n");
    let status_line = lines.next().expect("status line");
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(
        parts.next(),
        Some("HTTP/1.1"),
        "status line {status_line:?}"
    );
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once(':').expect("header has a colon");
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    (status, headers)
}

/// Reads one response from `stream`; `buf` carries bytes read past it
/// (pipelined responses) from one call to the next.
pub async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<HttpResponse> {
    let head_len = read_head(stream, buf).await?;
    let (status, headers) = parse_head(&buf[..head_len]);
    buf.drain(..head_len);
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().expect("numeric Content-Length"))
        .unwrap_or(0);
    while buf.len() < len {
        if stream.read_buf(buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    let body = buf.drain(..len).collect();
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// Sends raw request bytes on a new connection and reads one response.
pub async fn try_http_raw(addr: SocketAddr, request: &[u8]) -> io::Result<HttpResponse> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(request).await?;
    read_response(&mut stream, &mut Vec::new()).await
}

/// [`try_http_raw`], failing the test on I/O errors or after the deadline.
pub async fn http_raw(addr: SocketAddr, request: &[u8]) -> HttpResponse {
    within("HTTP response", try_http_raw(addr, request))
        .await
        .expect("HTTP exchange")
}

/// `GET path` with `Connection: close`.
pub async fn get(addr: SocketAddr, path: &str) -> HttpResponse {
    http_raw(addr, get_request(path, false).as_bytes()).await
}

/// The text of a GET request.
pub fn get_request(path: &str, keep_alive: bool) -> String {
    let conn = if keep_alive { "keep-alive" } else { "close" };
    format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: {conn}\r\n\r\n")
}

/// The text of a POST request with a body.
pub fn post_request(path: &str, body: &[u8], keep_alive: bool) -> Vec<u8> {
    let conn = if keep_alive { "keep-alive" } else { "close" };
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nConnection: {conn}\r\n\
         Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// `POST path` with `body`, `Connection: close`.
pub async fn post(addr: SocketAddr, path: &str, body: &[u8]) -> HttpResponse {
    http_raw(addr, &post_request(path, body, false)).await
}

/// `POST /publish/{channel}`, asserting 200; returns the subscriber count.
pub async fn publish(addr: SocketAddr, channel: &str, body: &str) -> u64 {
    let resp = post(addr, &format!("/publish/{channel}"), body.as_bytes()).await;
    assert_eq!(resp.status, 200, "publish: {:?}", resp);
    resp.json()["subscribers"].as_u64().expect("subscribers")
}

/// A keep-alive HTTP connection for many requests in a row.
pub struct HttpConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl HttpConn {
    pub async fn connect(addr: SocketAddr) -> HttpConn {
        HttpConn {
            stream: TcpStream::connect(addr).await.expect("connect"),
            buf: Vec::new(),
        }
    }

    /// Sends a request and reads its response.
    pub async fn request(&mut self, req: &[u8]) -> HttpResponse {
        self.stream.write_all(req).await.expect("write request");
        self.response().await
    }

    /// Reads the next response.
    pub async fn response(&mut self) -> HttpResponse {
        within(
            "keep-alive response",
            read_response(&mut self.stream, &mut self.buf),
        )
        .await
        .expect("read response")
    }

    /// Reads the next response's head only (the answer to a HEAD request).
    pub async fn response_head(&mut self) -> HttpResponse {
        let head_len = within("response head", read_head(&mut self.stream, &mut self.buf))
            .await
            .expect("read response head");
        let (status, headers) = parse_head(&self.buf[..head_len]);
        self.buf.drain(..head_len);
        HttpResponse {
            status,
            headers,
            body: Vec::new(),
        }
    }

    /// Publishes on this connection, asserting 200; returns the subscriber count.
    pub async fn publish(&mut self, channel: &str, body: &str) -> u64 {
        let req = post_request(&format!("/publish/{channel}"), body.as_bytes(), true);
        let resp = self.request(&req).await;
        assert_eq!(resp.status, 200, "publish: {resp:?}");
        resp.json()["subscribers"].as_u64().expect("subscribers")
    }

    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }
}

/// `GET /stats`, or an error if the exchange failed (e.g. a 503 reset).
pub async fn try_stats(addr: SocketAddr) -> io::Result<Value> {
    let resp = try_http_raw(addr, get_request("/stats", false).as_bytes()).await?;
    if resp.status != 200 {
        return Err(io::Error::other(format!("/stats answered {}", resp.status)));
    }
    Ok(resp.json())
}

/// `GET /stats` as JSON.
pub async fn stats(addr: SocketAddr) -> Value {
    within("/stats", try_stats(addr)).await.expect("/stats")
}

/// One counter of `/stats`.
pub fn counter(stats: &Value, key: &str) -> u64 {
    stats[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {key} in {stats}"))
}

/// Polls `/stats` until `pred(stats[key])` holds; returns those stats.
pub async fn wait_stat(addr: SocketAddr, key: &str, pred: impl Fn(u64) -> bool) -> Value {
    wait_until_stat(addr, |s| pred(counter(s, key))).await
}

/// Polls `/stats` until `pred` holds for the whole document; panics with
/// the last stats at the deadline.
#[allow(dead_code)]
pub async fn wait_until_stat(addr: SocketAddr, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + DEADLINE;
    let mut last = Value::Null;
    loop {
        if let Ok(s) = tokio::time::timeout(DEADLINE, try_stats(addr)).await {
            let s = s.expect("/stats");
            if pred(&s) {
                return s;
            }
            last = s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for stats; last stats: {last}"
        );
        tokio::time::sleep(POLL).await;
    }
}

// ------------------------------------------------- tokio-tungstenite --

/// Connects a tokio-tungstenite client to `path`.
pub async fn ws_connect(addr: SocketAddr, path: &str) -> Ws {
    let url = format!("ws://{addr}{path}");
    let (ws, resp) = within(
        "WebSocket connect",
        tokio_tungstenite::connect_async(url.as_str()),
    )
    .await
    .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    assert_eq!(resp.status(), 101);
    ws
}

/// The next data or close message, skipping pings and pongs.
pub async fn next_msg(ws: &mut Ws) -> Message {
    within("WebSocket message", async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(m)) => return m,
                Some(Err(e)) => panic!("WebSocket error: {e}"),
                None => panic!("WebSocket ended"),
            }
        }
    })
    .await
}

/// The next message, which must be text.
pub async fn next_text(ws: &mut Ws) -> String {
    match next_msg(ws).await {
        Message::Text(t) => t,
        other => panic!("expected a text message, got {other:?}"),
    }
}

/// The next message, which must be a JSON text.
pub async fn next_json(ws: &mut Ws) -> Value {
    let t = next_text(ws).await;
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("not JSON ({e}): {t}"))
}

/// Reads until a close frame arrives; returns its code (1005 = none).
pub async fn expect_close(ws: &mut Ws) -> u16 {
    match next_msg(ws).await {
        Message::Close(Some(f)) => f.code.into(),
        Message::Close(None) => 1005,
        other => panic!("expected a close frame, got {other:?}"),
    }
}

// ------------------------------------------------------- raw frames --

/// A frame read from the server by [`RawWs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The header bytes as sent (for checks on the length encoding).
    pub header: Vec<u8>,
    pub fin: bool,
    pub rsv: u8,
    pub opcode: u8,
    pub masked: bool,
    pub payload: Vec<u8>,
}

pub const OP_CONT: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

impl Frame {
    /// The status code of a close frame (`None`: empty body).
    pub fn close_code(&self) -> Option<u16> {
        assert_eq!(self.opcode, OP_CLOSE, "not a close frame: {self:?}");
        self.payload
            .get(..2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
}

/// Decodes one frame from the front of `buf`: `None` = need more bytes.
pub fn parse_frame(buf: &[u8]) -> Option<(Frame, usize)> {
    let (&b0, &b1) = (buf.first()?, buf.get(1)?);
    let (len, mut at) = match b1 & 0x7f {
        126 => (
            u16::from_be_bytes(buf.get(2..4)?.try_into().ok()?) as u64,
            4,
        ),
        127 => (u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?), 10),
        n => (n as u64, 2),
    };
    let masked = b1 & 0x80 != 0;
    let key = if masked {
        let k: [u8; 4] = buf.get(at..at + 4)?.try_into().ok()?;
        at += 4;
        Some(k)
    } else {
        None
    };
    let end = at + usize::try_from(len).expect("frame length fits");
    let mut payload = buf.get(at..end)?.to_vec();
    if let Some(k) = key {
        payload
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b ^= k[i % 4]);
    }
    let frame = Frame {
        header: buf[..at].to_vec(),
        fin: b0 & 0x80 != 0,
        rsv: (b0 >> 4) & 7,
        opcode: b0 & 0x0f,
        masked,
        payload,
    };
    Some((frame, end))
}

/// Encodes a client frame: `b0` is the whole first byte (FIN, RSV, opcode);
/// the payload is masked with `mask` when given.
pub fn client_frame(b0: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![b0];
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(mask_bit | n as u8),
        n if n <= 0xffff => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(k) => {
            out.extend_from_slice(&k);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// A masked client frame with the usual mask key.
pub fn masked(b0: u8, payload: &[u8]) -> Vec<u8> {
    client_frame(b0, payload, Some([0x37, 0xfa, 0x21, 0x3d]))
}

/// A close frame body: code and reason.
pub fn close_body(code: u16, reason: &str) -> Vec<u8> {
    let mut b = code.to_be_bytes().to_vec();
    b.extend_from_slice(reason.as_bytes());
    b
}

/// How a raw connection ended when we waited for a close frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// A close frame with this code (`None`: empty body).
    Close(Option<u16>),
    /// EOF or reset without a close frame.
    Gone,
}

/// A hand-driven WebSocket client over a plain TCP stream.
pub struct RawWs {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl RawWs {
    /// Connects and upgrades to `path`.
    pub async fn connect(addr: SocketAddr, path: &str) -> RawWs {
        let stream = within("connect", TcpStream::connect(addr))
            .await
            .expect("connect");
        RawWs::upgrade(stream, path).await
    }

    /// Connects with a small receive buffer (so the server's writes back
    /// up quickly when we do not read) and upgrades to `path`.
    pub async fn connect_small_rcvbuf(addr: SocketAddr, path: &str, rcvbuf: u32) -> RawWs {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(rcvbuf).expect("SO_RCVBUF");
        let stream = within("connect", socket.connect(addr))
            .await
            .expect("connect");
        RawWs::upgrade(stream, path).await
    }

    /// Performs the opening handshake on `stream`, checking the RFC's
    /// accept value for its example key.
    pub async fn upgrade(mut stream: TcpStream, path: &str) -> RawWs {
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: {RFC_KEY}\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        );
        stream
            .write_all(req.as_bytes())
            .await
            .expect("send upgrade");
        RawWs::from_upgraded(stream).await
    }

    /// Connects and upgrades to `path` with `extra` header lines (each
    /// ending in CRLF); returns the `101`'s headers too.
    pub async fn connect_with(
        addr: SocketAddr,
        path: &str,
        extra: &str,
    ) -> (RawWs, Vec<(String, String)>) {
        let mut stream = within("connect", TcpStream::connect(addr))
            .await
            .expect("connect");
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: {RFC_KEY}\r\n\
             Sec-WebSocket-Version: 13\r\n{extra}\r\n"
        );
        stream
            .write_all(req.as_bytes())
            .await
            .expect("send upgrade");
        RawWs::from_upgraded_with_headers(stream).await
    }

    /// Reads the `101` answering an upgrade request (with the RFC example
    /// key) that was already written to `stream`.
    pub async fn from_upgraded(stream: TcpStream) -> RawWs {
        RawWs::from_upgraded_with_headers(stream).await.0
    }

    /// [`RawWs::from_upgraded`], also returning the `101`'s headers.
    pub async fn from_upgraded_with_headers(
        mut stream: TcpStream,
    ) -> (RawWs, Vec<(String, String)>) {
        let mut buf = Vec::new();
        let head_len = within("101 response", read_head(&mut stream, &mut buf))
            .await
            .expect("read 101");
        let (status, headers) = parse_head(&buf[..head_len]);
        assert_eq!(status, 101, "upgrade refused: {headers:?}");
        let accept = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("sec-websocket-accept"))
            .map(|(_, v)| v.as_str());
        assert_eq!(accept, Some(RFC_ACCEPT));
        buf.drain(..head_len);
        (RawWs { stream, buf }, headers)
    }

    /// Writes raw bytes.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Writes raw bytes, reporting errors (the server may have closed).
    pub async fn try_send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Sends a masked frame.
    pub async fn send(&mut self, b0: u8, payload: &[u8]) {
        self.send_raw(&masked(b0, payload)).await;
    }

    /// Reads the next frame; `Ok(None)` at EOF.
    pub async fn read_frame(&mut self) -> io::Result<Option<Frame>> {
        loop {
            if let Some((frame, used)) = parse_frame(&self.buf) {
                self.buf.drain(..used);
                assert!(!frame.masked, "server frames must not be masked");
                return Ok(Some(frame));
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
        }
    }

    /// Reads the next frame within the deadline; panics on EOF or errors.
    pub async fn next_frame(&mut self) -> Frame {
        within("frame", self.read_frame())
            .await
            .expect("read frame")
            .expect("EOF before a frame")
    }

    /// Reads frames until a close frame or the end of the stream; the data
    /// frames read on the way are returned too.
    pub async fn read_until_close(&mut self) -> (Vec<Frame>, Ending) {
        within("close frame or EOF", async {
            let mut seen = Vec::new();
            loop {
                match self.read_frame().await {
                    Ok(Some(f)) if f.opcode == OP_CLOSE => {
                        return (seen, Ending::Close(f.close_code()))
                    }
                    Ok(Some(f)) => seen.push(f),
                    Ok(None) | Err(_) => return (seen, Ending::Gone),
                }
            }
        })
        .await
    }

    /// Expects the next frame (skipping pings) to be a close with `code`.
    pub async fn expect_close(&mut self, code: u16) {
        let (seen, ending) = self.read_until_close().await;
        assert!(
            seen.iter().all(|f| f.opcode == OP_PING),
            "unexpected frames before the close: {seen:?}"
        );
        assert_eq!(ending, Ending::Close(Some(code)));
    }

    /// Expects the server to close the TCP connection (after its close frame).
    pub async fn expect_eof(&mut self) {
        let r = within("EOF", self.read_frame()).await;
        assert!(
            matches!(r, Ok(None) | Err(_)),
            "expected the connection to end, got {r:?}"
        );
    }
}

/// Makes sure this process may open `n` descriptors, raising the soft
/// limit towards the hard one if needed.
pub fn ensure_fd_limit(n: libc::rlim_t) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the valid pointer given.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    assert_eq!(rc, 0, "getrlimit");
    if lim.rlim_cur < n {
        let want = libc::rlimit {
            rlim_cur: n.min(lim.rlim_max),
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit from the valid pointer given.
        let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) };
        assert_eq!(rc, 0, "setrlimit");
        assert!(want.rlim_cur >= n, "need {n} descriptors");
    }
}

// ------------------------------------------------------ the binary --

/// The real `corecast` binary in its own process, for what an in-process
/// server cannot show (its stderr: the logger writes to the process's).
/// Killed on drop.
pub struct BinServer {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    /// Its stderr, one line per message.
    pub logs: std::sync::mpsc::Receiver<String>,
}

impl BinServer {
    /// Starts `corecast --listen 127.0.0.1:0 ARGS` and waits for the line
    /// with its address.
    pub fn spawn(args: &[&str]) -> BinServer {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_corecast"));
        cmd.args(["--listen", "127.0.0.1:0"]).args(args);
        BinServer::start(cmd)
    }

    /// Starts `cmd` (a `corecast` command listening on port 0) with its
    /// stderr piped into `logs`, and waits for the line with its address
    /// (lines before it, e.g. a descriptor-limit warning, are skipped).
    pub fn start(mut cmd: std::process::Command) -> BinServer {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("corecast binary starts");
        let stderr = child.stderr.take().expect("piped");
        let (tx, logs) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let addr = loop {
            let line = logs
                .recv_timeout(DEADLINE)
                .expect("server logs its address");
            if let Some(a) = line
                .split_whitespace()
                .find_map(|f| f.strip_prefix("addr="))
            {
                break a.parse().expect("socket address");
            }
        };
        BinServer { child, addr, logs }
    }

    /// Stops the process gracefully (SIGTERM) and returns every line it
    /// logged from now to its exit: a complete, deterministic capture.
    pub fn stop_and_collect(self) -> Vec<String> {
        // SAFETY: kill takes no pointers; the pid is our own live child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let mut lines = Vec::new();
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.logs.recv_timeout(left) {
                Ok(l) => lines.push(l),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("server did not exit: {e}"),
            }
        }
        lines
    }
}

impl Drop for BinServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
