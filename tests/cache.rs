//! The HTTP cache in front of an origin: misses and hits, coalescing,
//! expiry, `no-store`, stale-if-error, 502/504, conditionals, purge, Vary,
//! chunked origins, and Redis dying under it.
//!
//! Every store-dependent case runs twice, once on the in-memory store and
//! once on a real `redis-server` (its own, on a free port). The origin is a
//! small tokio HTTP/1.1 server in this file that counts requests per target
//! and can be told to delay, fail with 500, close without answering, send
//! chunked bodies, or stop listening. Waits are conditions polled against
//! deadlines; the only sleeps are the origin's configured delays.

mod common;
mod redis_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use corecast::config::{Config, Secret};
use redis_support::{cluster_instance, instance, wait_readyz, RedisCluster, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

// ------------------------------------------------------------ origin --

/// How the test origin answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// 200 with a JSON body naming the target and its request count.
    Ok,
    /// 500 with a body.
    Fail,
    /// Read the request, close without a byte.
    Close,
}

#[derive(Debug, Clone)]
struct Behaviour {
    mode: Mode,
    delay: Duration,
    cache_control: Option<String>,
    etag: Option<String>,
    vary: Option<String>,
    chunked: bool,
    /// Raw header lines added to every 200 (`Expires: ...\r\n`).
    extra: String,
    /// Echo the request's `Origin` in `Access-Control-Allow-Origin`.
    reflect_origin: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            mode: Mode::Ok,
            delay: Duration::ZERO,
            cache_control: Some("max-age=60".into()),
            etag: None,
            vary: None,
            chunked: false,
            extra: String::new(),
            reflect_origin: false,
        }
    }
}

#[derive(Default)]
struct OriginState {
    behaviour: Mutex<Behaviour>,
    total: AtomicUsize,
    per_target: Mutex<HashMap<String, usize>>,
    heads: Mutex<Vec<String>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// A counting HTTP/1.1 origin on `127.0.0.1:0`; stops on drop.
struct Origin {
    addr: SocketAddr,
    state: Arc<OriginState>,
}

impl Origin {
    async fn start(behaviour: Behaviour) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let addr = listener.local_addr().expect("origin addr");
        let state = Arc::new(OriginState::default());
        *state.behaviour.lock().unwrap() = behaviour;
        let s = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let task = tokio::spawn(serve_origin_conn(stream, s.clone()));
                s.tasks.lock().unwrap().push(task);
            }
        });
        state.tasks.lock().unwrap().push(accept);
        Origin { addr, state }
    }

    /// `http://127.0.0.1:PORT/v1` (a base path, to see it applied).
    fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    fn set(&self, f: impl FnOnce(&mut Behaviour)) {
        f(&mut self.state.behaviour.lock().unwrap());
    }

    /// Requests received for `target` (path + query as the origin saw it).
    fn count(&self, target: &str) -> usize {
        self.state
            .per_target
            .lock()
            .unwrap()
            .get(target)
            .copied()
            .unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.state.total.load(Ordering::SeqCst)
    }

    /// The last request head received.
    fn last_head(&self) -> String {
        self.state
            .heads
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
    }

    /// Stops listening and drops every connection: the port refuses.
    fn stop(&self) {
        for t in self.state.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn serve_origin_conn(mut stream: TcpStream, state: Arc<OriginState>) {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        req.parse(head.as_bytes())
            .expect("corecast sends valid requests");
        let target = req.path.unwrap_or("/").to_string();
        let header = |name: &str| {
            req.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).to_string())
        };
        let (lang, inm) = (header("accept-language"), header("if-none-match"));
        let (cookie, origin) = (header("cookie"), header("origin"));
        state.heads.lock().unwrap().push(head.clone());
        state.total.fetch_add(1, Ordering::SeqCst);
        let n = {
            let mut per = state.per_target.lock().unwrap();
            let n = per.entry(target.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let b = state.behaviour.lock().unwrap().clone();
        if !b.delay.is_zero() {
            tokio::time::sleep(b.delay).await;
        }
        let response = match b.mode {
            Mode::Close => return,
            Mode::Fail => {
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops".to_vec()
            }
            Mode::Ok => origin_response(&b, &target, n, lang, inm, cookie, origin),
        };
        if stream.write_all(&response).await.is_err() {
            return;
        }
    }
}

fn origin_response(
    b: &Behaviour,
    target: &str,
    n: usize,
    lang: Option<String>,
    inm: Option<String>,
    cookie: Option<String>,
    origin: Option<String>,
) -> Vec<u8> {
    let mut head = b.extra.clone();
    if let Some(o) = origin.filter(|_| b.reflect_origin) {
        head += &format!("Access-Control-Allow-Origin: {o}\r\n");
    }
    if let Some(cc) = &b.cache_control {
        head += &format!("Cache-Control: {cc}\r\n");
    }
    if let Some(t) = &b.etag {
        head += &format!("ETag: {t}\r\n");
        if inm.as_deref() == Some(t.as_str()) {
            return format!("HTTP/1.1 304 Not Modified\r\n{head}\r\n").into_bytes();
        }
    }
    if let Some(v) = &b.vary {
        head += &format!("Vary: {v}\r\n");
    }
    let cookie = cookie.map_or(String::new(), |c| format!(r#","cookie":"{c}""#));
    let body = format!(
        r#"{{"target":"{target}","n":{n},"lang":"{}"{cookie}}}"#,
        lang.unwrap_or_default()
    );
    let mut out =
        format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Origin: test\r\n{head}");
    if b.chunked {
        out += "Transfer-Encoding: chunked\r\n\r\n";
        let (a, rest) = body.split_at(5);
        out += &format!(
            "{:x};ext=1\r\n{a}\r\n{:X}\r\n{rest}\r\n0\r\nX-Trailer: t\r\n\r\n",
            a.len(),
            rest.len()
        );
    } else {
        out += &format!("Content-Length: {}\r\n\r\n{body}", body.len());
    }
    out.into_bytes()
}

// ------------------------------------------------------------ setup --

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Memory,
    Redis,
    /// A 3-master Redis Cluster (`--redis-cluster`).
    Cluster,
}

/// An origin, a corecast instance caching it, and (for Redis) its Redis.
struct Setup {
    srv: TestServer,
    origin: Origin,
    redis: Option<RedisServer>,
    /// Kept for its drop: the nodes die with the test.
    _cluster: Option<RedisCluster>,
}

impl Setup {
    async fn start(backend: Backend, b: Behaviour, tweak: impl FnOnce(&mut Config)) -> Setup {
        let origin = Origin::start(b).await;
        let url = origin.url();
        let cache = move |cfg: &mut Config| {
            cfg.cache.origin = Some(url.parse().expect("origin url"));
            cfg.cache.purge_token = None;
            tweak(cfg);
        };
        match backend {
            Backend::Memory => Setup {
                srv: TestServer::start(cache),
                origin,
                redis: None,
                _cluster: None,
            },
            Backend::Cluster => {
                let cluster = RedisCluster::start(3, 0).await;
                let srv = cluster_instance(&cluster, cache);
                wait_readyz(srv.addr, 200).await;
                Setup {
                    srv,
                    origin,
                    redis: None,
                    _cluster: Some(cluster),
                }
            }
            Backend::Redis => {
                let redis = RedisServer::start(&[]).await;
                let srv = instance(redis.url("", ""), cache);
                wait_readyz(srv.addr, 200).await;
                Setup {
                    srv,
                    origin,
                    redis: Some(redis),
                    _cluster: None,
                }
            }
        }
    }

    fn addr(&self) -> SocketAddr {
        self.srv.addr
    }

    async fn get(&self, path: &str) -> HttpResponse {
        get(self.addr(), path).await
    }

    async fn get_with(&self, path: &str, headers: &str) -> HttpResponse {
        let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{headers}\r\n");
        http_raw(self.addr(), req.as_bytes()).await
    }

    /// Waits until `n` entries have been written to the store (the write
    /// follows the response, in a task of its own).
    async fn stored(&self, n: u64) {
        wait_stat(self.addr(), "cache_stores", |s| s >= n).await;
    }
}

/// The workers a server runs (each keeps its own origin connections).
fn workers() -> u64 {
    default_workers() as u64
}

/// The most origin requests a burst for one cold key makes: one per
/// process with the memory store (the workers claim a key's fetch in one
/// table), one per worker in Redis mode (each worker an instance).
fn fetchers(backend: Backend) -> u64 {
    match backend {
        Backend::Memory => 1,
        _ => workers(),
    }
}

fn cache_status(r: &HttpResponse) -> String {
    r.header("cache-status")
        .unwrap_or_else(|| panic!("no Cache-Status in {r:?}"))
        .to_string()
}

fn body(r: &HttpResponse) -> String {
    String::from_utf8(r.body.clone()).expect("UTF-8 body")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ------------------------------------------------------------ cases --

/// A miss goes to the origin (base path + normalized query), is stored,
/// and the next request — parameters in another order — is a hit with the
/// same body; origin connections are reused.
async fn miss_then_hit(backend: Backend) {
    let s = Setup::start(backend, Behaviour::default(), |_| {}).await;
    let first = s.get("/api/item?b=2&a=1").await;
    assert_eq!(first.status, 200, "{first:?}");
    let cs = cache_status(&first);
    assert!(
        cs.starts_with("corecast; fwd=miss; fwd-status=200") && cs.contains("stored"),
        "{cs}"
    );
    assert_eq!(first.header("age"), Some("0"));
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert!(
        first.header("x-origin").is_none(),
        "only content headers are stored"
    );
    assert_eq!(s.origin.count("/v1/item?a=1&b=2"), 1);
    assert!(s.origin.last_head().contains("Via: 1.1 corecast\r\n"));
    s.stored(1).await;

    let second = s.get("/api/item?a=1&b=2&").await;
    assert_eq!(second.status, 200);
    assert!(
        cache_status(&second).starts_with("corecast; hit; ttl="),
        "{second:?}"
    );
    assert_eq!(second.body, first.body);
    assert_eq!(second.header("etag"), first.header("etag"));
    assert!(second.header("age").is_some());
    assert_eq!(s.origin.total(), 1);

    for i in 0..4 {
        assert_eq!(s.get(&format!("/api/other/{i}")).await.status, 200);
    }
    let st = stats(s.addr()).await;
    assert_eq!(counter(&st, "cache_hits"), 1);
    assert_eq!(counter(&st, "cache_misses"), 5);
    assert_eq!(counter(&st, "cache_origin_requests"), 5);
    // Each worker keeps its own origin connections alive.
    let connects = counter(&st, "cache_origin_connects");
    assert!(
        (1..=workers()).contains(&connects),
        "keep-alive reuse: {connects}"
    );
    assert!(counter(&st, "cache_bytes_stored") > 0);
    if backend == Backend::Memory {
        assert!(counter(&st, "cache_memory_bytes") > 0);
    }
}

/// 500 concurrent requests for one cold key: one origin request (in Redis
/// mode one per worker at most: each is an instance); everyone gets the
/// same body.
async fn coalesces_concurrent_misses(backend: Backend) {
    ensure_fd_limit(4096);
    let b = Behaviour {
        delay: ms(500),
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |_| {}).await;
    let addr = s.addr();
    let tasks: Vec<_> = (0..500)
        .map(|_| tokio::spawn(async move { get(addr, "/api/cold").await }))
        .collect();
    let mut bodies = Vec::new();
    let mut collapsed = 0;
    for t in tasks {
        let r = t.await.expect("client task");
        assert_eq!(r.status, 200, "{r:?}");
        collapsed += usize::from(cache_status(&r).contains("collapsed"));
        bodies.push(r.body);
    }
    let fetched = s.origin.count("/v1/cold") as u64;
    assert!(
        (1..=fetchers(backend)).contains(&fetched),
        "{fetched} origin requests"
    );
    // One body per origin request.
    let distinct: std::collections::HashSet<&Vec<u8>> = bodies.iter().collect();
    assert_eq!(distinct.len() as u64, fetched);
    let st = stats(addr).await;
    assert_eq!(counter(&st, "cache_misses"), fetched);
    let waited = counter(&st, "cache_coalesced_waiters") + counter(&st, "cache_hits");
    assert_eq!(waited, 500 - fetched, "{st}");
    assert!(collapsed >= 1);
}

/// 1,000 concurrent requests for a cold key, 20 times over with fresh
/// keys and an origin that answers at once: exactly one origin request
/// each time (per instance). A request whose store lookup was sent before the first
/// fetch's store write, and answered "miss" after the fetch ended — or not
/// answered within `--cache-redis-timeout`, as 1,000 reads at once on a
/// busy worker often are — must still find that fetch's response (it used
/// to fetch a second time).
async fn one_origin_request_per_cold_key_every_time(backend: Backend) {
    ensure_fd_limit(4096);
    let s = Setup::start(backend, Behaviour::default(), |_| {}).await;
    let addr = s.addr();
    for round in 0..20 {
        let path = format!("/api/burst{round}");
        let tasks: Vec<_> = (0..1000)
            .map(|_| {
                let path = path.clone();
                tokio::spawn(async move { get(addr, &path).await })
            })
            .collect();
        let mut fetched = Vec::new();
        for t in tasks {
            let r = t.await.expect("client task");
            assert_eq!(r.status, 200, "{r:?}");
            let cs = cache_status(&r);
            if !cs.contains("hit") && !cs.contains("collapsed") {
                fetched.push(cs);
            }
        }
        let target = format!("/v1/burst{round}");
        let n = s.origin.count(&target) as u64;
        if !(1..=fetchers(backend)).contains(&n) {
            let st = stats(addr).await;
            panic!("round {round}: {n} origin requests, want 1 (per instance): {fetched:?}; {st}");
        }
    }
}

/// `--origin-max-connections 2`: first 12 requests give up waiting
/// (the origin takes longer than `--origin-timeout`, 504), then 500
/// concurrent requests for distinct keys (origin delay 5 ms) are every one
/// answered 200. Waiters for an origin slot are served in order and none is
/// forgotten: a waiter that timed out used to leave its waker queued, a
/// freed slot woke that one, and the requests behind starved into 504s.
async fn origin_slots_serve_every_queued_request(backend: Backend) {
    ensure_fd_limit(4096);
    let b = Behaviour {
        delay: Duration::from_secs(4),
        ..Behaviour::default()
    };
    let tweak = |c: &mut Config| {
        c.cache.origin_max_connections = 2;
        c.cache.origin_timeout = Duration::from_secs(3);
    };
    let s = Setup::start(backend, b, tweak).await;
    let addr = s.addr();
    let run = |n: usize, prefix: &'static str| {
        let tasks: Vec<_> = (0..n)
            .map(|i| tokio::spawn(async move { get(addr, &format!("/api/{prefix}{i}")).await }))
            .collect();
        async move {
            let mut statuses = Vec::new();
            for t in tasks {
                statuses.push(t.await.expect("client task").status);
            }
            statuses
        }
    };
    let gave_up = run(12, "slow").await;
    assert!(gave_up.iter().all(|s| *s == 504), "{gave_up:?}");
    s.origin.set(|b| b.delay = ms(5));
    let statuses = run(500, "slot").await;
    let failed: Vec<_> = statuses.iter().filter(|s| **s != 200).collect();
    assert!(
        failed.is_empty(),
        "{} not answered 200: {failed:?}",
        failed.len()
    );
    assert_eq!(s.origin.count("/v1/slot0"), 1);
}

/// `max-age=1`: a hit within the second, an origin fetch after it.
async fn ttl_expiry(backend: Backend) {
    let b = Behaviour {
        cache_control: Some("max-age=1".into()),
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |c| {
        c.cache.stale_while_revalidate = Duration::ZERO
    })
    .await;
    let fetched_at = Instant::now();
    let first = s.get("/api/ttl").await;
    // Freshness runs from when the cache received the response: between
    // `fetched_at` and now.
    let answered_at = Instant::now();
    assert!(body(&first).contains(r#""n":1"#));
    s.stored(1).await;
    let refreshed = loop {
        let r = s.get("/api/ttl").await;
        assert_eq!(r.status, 200);
        if !cache_status(&r).contains("hit") {
            break r;
        }
        // The request was sent before this check; 100 ms covers the
        // scheduling of a loaded test machine.
        assert!(
            answered_at.elapsed() < ms(1100),
            "a hit after max-age: {r:?}"
        );
        assert!(fetched_at.elapsed() < DEADLINE, "never expired");
        tokio::time::sleep(ms(50)).await; // polling interval, not a sync point
    };
    assert!(fetched_at.elapsed() >= ms(900), "expired too early");
    let cs = cache_status(&refreshed);
    assert!(
        cs.starts_with("corecast; fwd=stale; fwd-status=200"),
        "{cs}"
    );
    assert!(body(&refreshed).contains(r#""n":2"#));
    assert_eq!(s.origin.count("/v1/ttl"), 2);
}

/// `no-store` responses are served but never stored.
async fn no_store_is_never_stored(backend: Backend) {
    let b = Behaviour {
        cache_control: Some("no-store".into()),
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |_| {}).await;
    for n in 1..=3 {
        let r = s.get("/api/secret").await;
        assert_eq!(r.status, 200);
        assert!(body(&r).contains(&format!(r#""n":{n}"#)));
        assert_eq!(cache_status(&r), "corecast; fwd=miss; fwd-status=200");
    }
    assert_eq!(s.origin.count("/v1/secret"), 3);
    assert_eq!(counter(&stats(s.addr()).await, "cache_stores"), 0);
}

/// Once stale, an origin answering 500 — or gone entirely — gets the
/// stale copy served (stale-if-error, default window).
async fn stale_if_error(backend: Backend) {
    let b = Behaviour {
        cache_control: Some("max-age=1".into()),
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |c| {
        c.cache.stale_while_revalidate = Duration::ZERO
    })
    .await;
    let good = s.get("/api/sie").await;
    s.stored(1).await;
    s.origin.set(|b| b.mode = Mode::Fail);
    let deadline = Instant::now() + DEADLINE;
    let stale = loop {
        let r = s.get("/api/sie").await;
        if cache_status(&r).contains("fwd=stale") {
            break r;
        }
        assert!(Instant::now() < deadline, "never went stale");
        tokio::time::sleep(ms(50)).await; // polling interval
    };
    assert_eq!(stale.status, 200);
    assert_eq!(stale.body, good.body);
    let cs = cache_status(&stale);
    assert!(
        cs.contains("hit; fwd=stale; fwd-status=500") && cs.ends_with("detail=stale-if-error"),
        "{cs}"
    );
    s.origin.stop();
    let down = s.get("/api/sie").await;
    assert_eq!((down.status, &down.body), (200, &good.body));
    assert!(cache_status(&down).ends_with("detail=stale-if-error"));
    let st = stats(s.addr()).await;
    assert!(counter(&st, "cache_stale_served") >= 2);
    assert!(counter(&st, "cache_origin_errors") >= 2);
}

/// Without anything stored, an origin that is down or hangs up is a 502
/// with a JSON error.
async fn origin_down_without_stale_is_502(backend: Backend) {
    let s = Setup::start(
        backend,
        Behaviour {
            mode: Mode::Close,
            ..Behaviour::default()
        },
        |_| {},
    )
    .await;
    let closed = s.get("/api/hangup").await;
    assert_eq!(closed.status, 502, "{closed:?}");
    assert_eq!(closed.json()["error"], "origin unreachable");
    s.origin.stop();
    let down = s.get("/api/down").await;
    assert_eq!(down.status, 502);
    assert_eq!(down.header("content-type"), Some("application/json"));
    assert_eq!(down.json()["error"], "origin unreachable");
    assert!(cache_status(&down).starts_with("corecast; fwd=miss"));
}

/// An origin slower than `--origin-timeout` is a 504.
async fn origin_timeout_is_504(backend: Backend) {
    let b = Behaviour {
        delay: Duration::from_secs(3),
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |c| c.cache.origin_timeout = ms(300)).await;
    let t = Instant::now();
    let r = s.get("/api/slow").await;
    assert_eq!(r.status, 504, "{r:?}");
    assert_eq!(r.json()["error"], "origin timed out");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
}

/// `If-None-Match` matching the origin's ETag or the computed one is a 304
/// without a body, on a miss as on a hit.
async fn if_none_match_is_304(backend: Backend) {
    let b = Behaviour {
        etag: Some("\"v1\"".into()),
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |_| {}).await;
    let cond = s
        .get_with("/api/tagged", "If-None-Match: W/\"v1\"\r\n")
        .await;
    assert_eq!(cond.status, 304, "{cond:?}");
    assert!(cond.body.is_empty() && cond.header("content-length").is_none());
    assert_eq!(cond.header("etag"), Some("\"v1\""));
    assert!(
        s.origin.last_head().find("If-None-Match").is_none(),
        "conditionals are the cache's"
    );
    s.stored(1).await;
    let hit = s
        .get_with("/api/tagged", "If-None-Match: \"x\", \"v1\"\r\n")
        .await;
    assert_eq!(hit.status, 304);
    assert_eq!(hit.header("cache-control"), Some("max-age=60"));
    assert!(cache_status(&hit).contains("hit"));

    s.origin.set(|b| b.etag = None);
    let plain = s.get("/api/untagged").await;
    let etag = plain.header("etag").expect("computed ETag").to_string();
    assert!(etag.starts_with("\"cc-"), "{etag}");
    let nm = s
        .get_with("/api/untagged", &format!("If-None-Match: {etag}\r\n"))
        .await;
    assert_eq!(nm.status, 304);
    let other = s
        .get_with("/api/untagged", "If-None-Match: \"nope\"\r\n")
        .await;
    assert_eq!((other.status, &other.body), (200, &plain.body));
}

/// `POST /cache/purge` needs the bearer token; a key purge and a prefix
/// purge make the next requests go to the origin again.
async fn purge_needs_the_token(backend: Backend) {
    let s = Setup::start(backend, Behaviour::default(), |c| {
        c.cache.purge_token = Some(Secret::new("s3cret"));
    })
    .await;
    for p in ["/api/p?x=1", "/api/q/1", "/api/q/2"] {
        assert_eq!(s.get(p).await.status, 200);
    }
    s.stored(3).await;
    let addr = s.addr();
    let purge = |auth: &str, body: &str| {
        let req = format!(
            "POST /cache/purge HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{auth}\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        async move { http_raw(addr, req.as_bytes()).await }
    };
    let key = r#"{"key":"/api/p?x=1"}"#;
    let none = purge("", key).await;
    assert_eq!(none.status, 401);
    assert_eq!(none.header("www-authenticate"), Some("Bearer"));
    assert_eq!(
        purge("Authorization: Bearer s3cre\r\n", key).await.status,
        401
    );
    assert_eq!(
        purge("Authorization: Bearer s3cretX\r\n", key).await.status,
        401
    );
    assert_eq!(
        purge("Authorization: Basic s3cret\r\n", key).await.status,
        401
    );
    assert!(
        cache_status(&s.get("/api/p?x=1").await).contains("hit"),
        "refused purges purge nothing"
    );
    let auth = "Authorization: Bearer s3cret\r\n";
    assert_eq!(purge(auth, r#"{"nope":1}"#).await.status, 400);
    let ok = purge(auth, key).await;
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(
        ok.json(),
        serde_json::json!({"purged": 1, "complete": true})
    );
    assert!(cache_status(&s.get("/api/p?x=1").await).contains("fwd=miss"));
    assert_eq!(s.origin.count("/v1/p?x=1"), 2);
    let ok = purge(auth, r#"{"prefix":"/api/q/"}"#).await;
    assert_eq!(
        ok.json(),
        serde_json::json!({"purged": 2, "complete": true})
    );
    assert!(cache_status(&s.get("/api/q/1").await).contains("fwd=miss"));
    assert!(cache_status(&s.get("/api/q/2").await).contains("fwd=miss"));
    assert_eq!(counter(&stats(s.addr()).await, "cache_purged"), 3);

    // Without a token the endpoint does not exist.
    let s2 = Setup::start(backend, Behaviour::default(), |_| {}).await;
    let r = post(s2.addr(), "/cache/purge", key.as_bytes()).await;
    assert_eq!(r.status, 404);
}

/// Chunked origin bodies (with an extension and a trailer) are decoded
/// and served with a Content-Length, the same on the hit.
async fn chunked_origin_bodies(backend: Backend) {
    let b = Behaviour {
        chunked: true,
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |_| {}).await;
    let miss = s.get("/api/chunked").await;
    assert_eq!(miss.status, 200);
    assert_eq!(body(&miss), r#"{"target":"/v1/chunked","n":1,"lang":""}"#);
    assert!(miss.header("transfer-encoding").is_none());
    s.stored(1).await;
    let hit = s.get("/api/chunked").await;
    assert_eq!(hit.body, miss.body);
}

/// HEAD is answered from the GET entry (fetched with GET on a miss).
async fn head_uses_the_get_entry(backend: Backend) {
    let s = Setup::start(backend, Behaviour::default(), |_| {}).await;
    let mut conn = HttpConn::connect(s.addr()).await;
    conn.stream()
        .write_all(b"HEAD /api/h HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let head = conn.response_head().await;
    assert_eq!(head.status, 200);
    assert!(s.origin.last_head().starts_with("GET /v1/h HTTP/1.1\r\n"));
    let len: usize = head.header("content-length").unwrap().parse().unwrap();
    s.stored(1).await;
    let get = conn.request(get_request("/api/h", true).as_bytes()).await;
    assert!(cache_status(&get).contains("hit"));
    assert_eq!(
        get.body.len(),
        len,
        "HEAD described the body it did not send"
    );
}

/// `Vary: Accept-Language`: one entry per language.
async fn vary_keys_on_request_headers(backend: Backend) {
    let b = Behaviour {
        vary: Some("Accept-Language".into()),
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |_| {}).await;
    let de = s.get_with("/api/v", "Accept-Language: de\r\n").await;
    assert!(body(&de).contains(r#""lang":"de""#));
    s.stored(2).await; // marker + variant
    let en = s.get_with("/api/v", "Accept-Language: en\r\n").await;
    assert!(body(&en).contains(r#""lang":"en""#));
    assert!(cache_status(&en).contains("fwd=vary-miss"), "{en:?}");
    s.stored(4).await;
    let de2 = s.get_with("/api/v", "Accept-Language: de\r\n").await;
    assert!(cache_status(&de2).contains("hit"));
    assert_eq!(de2.body, de.body);
    let en2 = s.get_with("/api/v", "Accept-Language:  en \r\n").await;
    assert!(cache_status(&en2).contains("hit"));
    assert_eq!(en2.body, en.body);
    assert_eq!(s.origin.count("/v1/v"), 2);
}

/// Within `stale-while-revalidate` the stale copy is served at once and
/// refreshed once in the background; the refreshed copy follows.
async fn stale_while_revalidate(backend: Backend) {
    let b = Behaviour {
        cache_control: Some("max-age=1, stale-while-revalidate=30".into()),
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |_| {}).await;
    let first = s.get("/api/swr").await;
    s.stored(1).await;
    let deadline = Instant::now() + DEADLINE;
    let stale = loop {
        let r = s.get("/api/swr").await;
        if cache_status(&r).contains("stale-while-revalidate") {
            break r;
        }
        assert!(Instant::now() < deadline, "never went stale");
        tokio::time::sleep(ms(50)).await; // polling interval
    };
    assert_eq!(stale.body, first.body, "the stale copy, at once");
    assert!(cache_status(&stale).starts_with("corecast; hit; fwd=stale; ttl=-"));
    s.stored(2).await; // the background refresh stored its response
    let fresh = s.get("/api/swr").await;
    assert!(cache_status(&fresh).contains("hit"), "{fresh:?}");
    assert!(body(&fresh).contains(r#""n":2"#));
    assert_eq!(s.origin.count("/v1/swr"), 2, "refreshed once");
}

/// `no-cache` with an ETag: stored, but every use revalidates with
/// `If-None-Match`; the origin's 304 is answered from the stored body.
async fn no_cache_revalidates_with_the_etag(backend: Backend) {
    let b = Behaviour {
        cache_control: Some("no-cache".into()),
        etag: Some("\"r1\"".into()),
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |_| {}).await;
    let first = s.get("/api/nc").await;
    assert!(cache_status(&first).contains("stored"));
    s.stored(1).await;
    let second = s.get("/api/nc").await;
    assert_eq!((second.status, &second.body), (200, &first.body));
    let cs = cache_status(&second);
    assert!(
        cs.starts_with("corecast; fwd=stale; fwd-status=304"),
        "{cs}"
    );
    assert!(s.origin.last_head().contains("If-None-Match: \"r1\"\r\n"));
    assert_eq!(s.origin.count("/v1/nc"), 2);
}

/// Issue 12 item 3: a request with `Cookie` or `Authorization` is neither
/// served from the cache nor stored, unless the response says `public` or
/// `s-maxage`; an origin that reflects the cookie and sends no freshness
/// headers used to have the first client's body served to the next.
async fn personal_requests_bypass_the_cache(backend: Backend) {
    let b = Behaviour {
        cache_control: None,
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |_| {}).await;
    let alice = s.get_with("/api/me", "Cookie: s=alice\r\n").await;
    assert!(body(&alice).contains(r#""cookie":"s=alice""#), "{alice:?}");
    assert!(cache_status(&alice).contains("fwd=bypass"), "{alice:?}");
    assert!(s.origin.last_head().contains("Cookie: s=alice\r\n"));
    let anon = s.get("/api/me").await;
    assert!(!body(&anon).contains("cookie"), "{anon:?}");
    s.stored(1).await;
    assert!(cache_status(&s.get("/api/me").await).contains("hit"));
    // A stored response is not served to a personal request either.
    let bearer = s.get_with("/api/me", "Authorization: Bearer t\r\n").await;
    assert!(!cache_status(&bearer).contains("hit"), "{bearer:?}");
    assert_eq!(s.origin.count("/v1/me"), 3);
    assert_eq!(counter(&stats(s.addr()).await, "cache_bypassed"), 2);

    // Marked shareable by the origin: stored, and served to others.
    s.origin
        .set(|b| b.cache_control = Some("public, max-age=60".into()));
    let r = s.get_with("/api/pub", "Cookie: s=bob\r\n").await;
    assert!(cache_status(&r).contains("stored"), "{r:?}");
    s.stored(2).await;
    assert!(cache_status(&s.get("/api/pub").await).contains("hit"));
}

/// Heuristic freshness only where allowed; `Expires` and `Pragma` count.
async fn expires_pragma_and_the_heuristic(backend: Backend) {
    let b = Behaviour {
        cache_control: Some("no-transform".into()),
        ..Behaviour::default()
    };
    // Without a grace window, a stale entry is fetched again in the
    // foreground: the origin's count shows it.
    let s = Setup::start(backend, b, |c| {
        c.cache.stale_while_revalidate = Duration::ZERO
    })
    .await;
    let twice = |path: &'static str| {
        let s = &s;
        async move {
            s.get(path).await;
            s.get(path).await;
            s.origin.count(&format!("/v1{}", &path[4..]))
        }
    };
    // Cache-Control without a lifetime: no heuristic, never fresh.
    assert_eq!(twice("/api/nolife").await, 2);
    s.origin.set(|b| {
        b.cache_control = None;
        b.extra = "Expires: Thu, 01 Jan 1970 00:00:00 GMT\r\n".into();
    });
    assert_eq!(twice("/api/past").await, 2, "past Expires is stale");
    s.origin.set(|b| b.extra = "Expires: 0\r\n".into());
    assert_eq!(twice("/api/invalid").await, 2, "invalid Expires is stale");
    s.origin.set(|b| b.extra = "Pragma: no-cache\r\n".into());
    assert_eq!(twice("/api/pragma").await, 2, "Pragma: no-cache");
    s.origin
        .set(|b| b.extra = "Expires: Fri, 01 Jan 2100 00:00:00 GMT\r\n".into());
    let stores = counter(&stats(s.addr()).await, "cache_stores");
    s.get("/api/future").await;
    s.stored(stores + 1).await;
    assert!(cache_status(&s.get("/api/future").await).contains("hit"));
    // The obsolete HTTP-date forms recipients must accept (RFC 9110 5.6.7).
    for (i, (path, expires)) in [
        ("/api/asctime", "Fri Jan  1 00:00:00 2100"),
        ("/api/rfc850", "Thursday, 01-Jan-70 00:00:00 GMT"),
    ]
    .into_iter()
    .enumerate()
    {
        s.origin
            .set(move |b| b.extra = format!("Expires: {expires}\r\n"));
        s.get(path).await;
        s.stored(stores + 2 + i as u64).await;
        assert!(
            cache_status(&s.get(path).await).contains("hit"),
            "{expires}"
        );
    }
    s.origin.set(|b| {
        b.extra = "Last-Modified: Thu, 01 Jan 2015 00:00:00 GMT\r\n".into();
        b.cache_control = Some("no-transform".into());
    });
    s.get("/api/lm").await;
    s.stored(stores + 4).await;
    assert!(
        cache_status(&s.get("/api/lm").await).contains("hit"),
        "Last-Modified allows the heuristic"
    );
}

/// A response echoing the request's `Origin` in
/// `Access-Control-Allow-Origin` is stored only with `Vary: Origin`;
/// only negotiation headers reach the origin.
async fn reflected_cors_origin_needs_vary(backend: Backend) {
    let b = Behaviour {
        reflect_origin: true,
        ..Behaviour::default()
    };
    let s = Setup::start(backend, b, |_| {}).await;
    let from = |o: &'static str| {
        let s = &s;
        async move {
            let h = format!("Origin: {o}\r\nX-Forwarded-Host: evil\r\nUser-Agent: u\r\n");
            s.get_with("/api/cors", &h).await
        }
    };
    let a = from("https://a.example").await;
    assert_eq!(
        a.header("access-control-allow-origin"),
        Some("https://a.example")
    );
    let head = s.origin.last_head();
    assert!(
        !head.contains("X-Forwarded-Host") && !head.contains("User-Agent"),
        "{head}"
    );
    let b = from("https://b.example").await;
    assert_eq!(
        b.header("access-control-allow-origin"),
        Some("https://b.example")
    );
    assert_eq!(s.origin.count("/v1/cors"), 2, "not stored");

    s.origin.set(|b| b.vary = Some("Origin".into()));
    let stores = counter(&stats(s.addr()).await, "cache_stores");
    from("https://a.example").await;
    s.stored(stores + 1).await;
    let again = from("https://a.example").await;
    assert!(cache_status(&again).contains("hit"), "{again:?}");
    let other = from("https://b.example").await;
    assert_eq!(
        other.header("access-control-allow-origin"),
        Some("https://b.example")
    );
}

macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Memory).await
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Redis).await
                }
            )*
        }
    };
}

on_both_stores!(
    miss_then_hit,
    coalesces_concurrent_misses,
    one_origin_request_per_cold_key_every_time,
    origin_slots_serve_every_queued_request,
    ttl_expiry,
    no_store_is_never_stored,
    stale_if_error,
    origin_down_without_stale_is_502,
    origin_timeout_is_504,
    if_none_match_is_304,
    purge_needs_the_token,
    chunked_origin_bodies,
    head_uses_the_get_entry,
    vary_keys_on_request_headers,
    stale_while_revalidate,
    no_cache_revalidates_with_the_etag,
    personal_requests_bypass_the_cache,
    expires_pragma_and_the_heuristic,
    reflected_cors_origin_needs_vary,
);

/// The store on a Redis Cluster: keys land on every master; a prefix
/// purge walks each master's keys.
mod cluster {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn miss_then_hit() {
        super::miss_then_hit(super::Backend::Cluster).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn purge_needs_the_token() {
        super::purge_needs_the_token(super::Backend::Cluster).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ttl_expiry() {
        super::ttl_expiry(super::Backend::Cluster).await
    }
}

// ------------------------------------------------ store-independent --

/// Redis killed mid-test: requests keep being answered from the origin,
/// still coalesced; the cache works again once Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_test_requests_are_still_answered() {
    let b = Behaviour {
        delay: ms(300),
        ..Behaviour::default()
    };
    let mut s = Setup::start(Backend::Redis, b, |_| {}).await;
    assert_eq!(s.get("/api/r").await.status, 200);
    s.stored(1).await;
    assert!(cache_status(&s.get("/api/r").await).contains("hit"));

    s.redis.as_mut().expect("redis").kill();
    let t = Instant::now();
    let r = s.get("/api/r").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(!cache_status(&r).contains("hit"));
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "Redis stalled a request: {:?}",
        t.elapsed()
    );
    wait_stat(s.addr(), "redis_connected", |c| c == 0).await;

    let before = s.origin.count("/v1/down");
    let addr = s.addr();
    let tasks: Vec<_> = (0..50)
        .map(|_| tokio::spawn(async move { get(addr, "/api/down").await }))
        .collect();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200);
        assert!(cache_status(&r).contains("fwd=bypass"), "{r:?}");
    }
    let fetched = (s.origin.count("/v1/down") - before) as u64;
    assert!(
        (1..=workers()).contains(&fetched),
        "still coalesced: {fetched}"
    );
    assert!(counter(&stats(addr).await, "cache_store_errors") >= 1);

    s.redis.as_mut().expect("redis").restart().await;
    wait_readyz(addr, 200).await;
    let stores = counter(&stats(addr).await, "cache_stores");
    let again = s.get("/api/r").await;
    assert!(cache_status(&again).contains("stored"), "{again:?}");
    s.stored(stores + 1).await;
    assert!(cache_status(&s.get("/api/r").await).contains("hit"));
}

/// Without `--origin` the prefix is not routed; with it, the gateway's own
/// routes come first, only GET/HEAD are cached, dot segments are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_without_and_with_an_origin() {
    let srv = TestServer::start(|_| {});
    assert_eq!(get(srv.addr, "/api/x").await.status, 404);
    let s = Setup::start(Backend::Memory, Behaviour::default(), |_| {}).await;
    assert_eq!(
        get(s.addr(), "/healthz").await.status,
        200,
        "own routes first"
    );
    let r = post(s.addr(), "/api/x", b"x").await;
    assert_eq!(r.status, 405);
    // The origin would resolve dot segments and leave its base path.
    assert_eq!(get(s.addr(), "/api/../admin").await.status, 400);
    assert_eq!(get(s.addr(), "/api/%2e%2E/admin").await.status, 400);
    // Issue 12 item 12: every form an origin (or what is behind it) may
    // take for traversal.
    for bad in [
        "/api/..%2fadmin",
        "/api/%2e%2e%2Fadmin",
        "/api/..;/admin",
        "/api/..\\admin",
        "/api/..%5cadmin",
        "/api/%252e%252e/admin",
        "/api/%252e%252e%252fadmin",
    ] {
        assert_eq!(get(s.addr(), bad).await.status, 400, "{bad}");
    }
    assert_eq!(s.origin.total(), 0);
    assert_eq!(
        get(s.addr(), "/api/a%2fb").await.status,
        200,
        "not traversal"
    );
}

/// Private responses and ones with cookies are passed to their client
/// with their headers, but never stored or handed to a waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_responses_are_not_shared() {
    let b = Behaviour {
        cache_control: Some("private, max-age=60".into()),
        delay: ms(200),
        ..Behaviour::default()
    };
    let s = Setup::start(Backend::Memory, b, |_| {}).await;
    let addr = s.addr();
    let tasks: Vec<_> = (0..5)
        .map(|_| tokio::spawn(async move { get(addr, "/api/mine").await }))
        .collect();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-origin"), Some("test"), "all end-to-end headers");
        assert!(!cache_status(&r).contains("collapsed"));
    }
    assert_eq!(s.origin.count("/v1/mine"), 5);
}

/// Issue 12 item 5: an origin named by host name is resolved (at start,
/// then off the worker thread every `--origin-dns-ttl`), and one whose
/// name does not resolve is a 502 while WebSocket traffic goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_by_host_name_resolves_off_the_worker() {
    let origin = Origin::start(Behaviour::default()).await;
    let url = format!("http://localhost:{}/v1", origin.addr.port());
    let srv = TestServer::start(|c| {
        c.cache.origin = Some(url.parse().expect("origin url"));
        // Expired at once: every connect re-resolves in the background.
        c.cache.origin_dns_ttl = Duration::from_millis(1);
        c.cache.origin_pool_size = 0;
    });
    for i in 0..5 {
        let r = get(srv.addr, &format!("/api/n{i}")).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    assert_eq!(origin.total(), 5);

    let srv = TestServer::start(|c| {
        c.cache.origin = Some("http://no-such-host.invalid:1/v1".parse().expect("url"));
        c.cache.origin_dns_ttl = Duration::from_millis(1);
    });
    let mut ws = ws_connect(srv.addr, "/ws/live").await;
    for i in 0..3 {
        let r = get(srv.addr, &format!("/api/x{i}")).await;
        assert_eq!(r.status, 502, "{r:?}");
        assert!(body(&r).contains("origin unreachable"), "{r:?}");
        publish(srv.addr, "live", &format!("m{i}")).await;
        assert_eq!(next_text(&mut ws).await, format!("m{i}"));
    }
}

/// A cache write over `--cache-redis-write-buffer` is skipped and counted;
/// the response is still served and publishes keep their own budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_writes_over_their_budget_are_skipped_publishes_unaffected() {
    let s = Setup::start(Backend::Redis, Behaviour::default(), |c| {
        c.redis.cache_write_buffer = 16;
    })
    .await;
    let r = s.get("/api/big").await;
    assert_eq!(r.status, 200, "{r:?}");
    wait_stat(s.addr(), "cache_store_skipped", |n| n >= 1).await;
    assert_eq!(counter(&stats(s.addr()).await, "cache_stores"), 0);
    assert_eq!(counter(&stats(s.addr()).await, "cache_store_errors"), 0);
    assert_eq!(
        s.get("/api/big").await.status,
        200,
        "not stored, fetched again"
    );
    wait_stat(s.addr(), "cache_store_skipped", |n| n >= 2).await;
    publish(s.addr(), "room", "still published").await;
    let m = get(s.addr(), "/metrics").await;
    assert!(
        body(&m).contains("corecast_cache_store_skipped_total 2"),
        "{m:?}"
    );
}
