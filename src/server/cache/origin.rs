//! The origin client on monoio: HTTP/1.1 `GET`s over a small per-worker
//! pool of keep-alive connections, bounded in concurrency, time and size;
//! over TLS for an `https://` origin (the handshake under
//! `--origin-connect-timeout`, the certificate always verified).
//!
//! Protocol work (request encoding, response heads, body framing, chunked
//! decoding) is the sans-I/O `cache::origin`; this file only moves bytes.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use monoio::net::TcpStream;
use rustls::ClientConfig;

use crate::cache::origin::{parse_response_head, BodyDecoder, OriginUrl, ResponseError};
use crate::cache::CacheConfig;
use crate::log;
use crate::server::resolve::Resolver;
use crate::server::sys;
use crate::server::tls::client::{ClientStream, HandshakeError};

/// A complete origin response.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Status code.
    pub status: u16,
    /// Header lines.
    pub headers: Vec<(Bytes, Bytes)>,
    /// The decoded body.
    pub body: Bytes,
}

/// Why no response came back, mapped to a status at the edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// Connecting failed, or the connection broke (502).
    Unreachable(String),
    /// Connecting or the exchange took too long (504).
    Timeout,
    /// The origin broke HTTP/1.1 or a size bound (502).
    Invalid(ResponseError),
}

impl FetchError {
    /// The status the client gets.
    pub fn status(&self) -> u16 {
        match self {
            FetchError::Timeout => 504,
            _ => 502,
        }
    }

    /// The short message of the client's `{"error": ...}`.
    pub fn message(&self) -> &'static str {
        match self {
            FetchError::Unreachable(_) => "origin unreachable",
            FetchError::Timeout => "origin timed out",
            FetchError::Invalid(ResponseError::BodyTooLarge) => "origin response too large",
            FetchError::Invalid(_) => "malformed origin response",
        }
    }
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::Unreachable(e) => write!(f, "origin unreachable: {e}"),
            FetchError::Timeout => f.write_str("origin timed out"),
            FetchError::Invalid(e) => write!(f, "invalid origin response: {e}"),
        }
    }
}

struct Conn {
    stream: ClientStream,
    buf: BytesMut,
}

/// How one exchange on one connection ended badly.
enum Attempt {
    /// The connection was dead before any response byte: a pooled
    /// connection the origin had closed. Worth one retry on a new one.
    Stale(io::Error),
    /// A real failure.
    Failed(FetchError),
}

/// How a client reaches its server. Only an `http://` URL is ever
/// [`Transport::Plain`]: an `https://` one is TLS with the certificate
/// verified, or (no roots to verify with) refused on every call — never
/// a silent downgrade, whichever configuration the caller had built.
enum Transport {
    Plain,
    Tls(Arc<ClientConfig>),
    /// `https://` without a usable client configuration: why.
    Unavailable(String),
}

impl Transport {
    /// `url`'s transport; `tls`: the process's client configuration, if
    /// it built one (else the system roots are loaded here).
    fn for_url(url: &OriginUrl, tls: Option<Arc<ClientConfig>>) -> Transport {
        if !url.tls {
            return Transport::Plain;
        }
        match tls.map_or_else(|| crate::tls::client::config(None), Ok) {
            Ok(cfg) => Transport::Tls(cfg),
            Err(e) => Transport::Unavailable(format!("no tls client configuration: {e}")),
        }
    }
}

/// One worker's client for the configured origin.
pub struct OriginClient {
    url: OriginUrl,
    resolver: Rc<Resolver>,
    idle: RefCell<Vec<(Conn, Instant)>>,
    slots: Slots,
    connect_timeout: Duration,
    timeout: Duration,
    pool_size: usize,
    idle_timeout: Duration,
    max_body: usize,
    max_head: usize,
    connects: Cell<u64>,
    /// How the origin is reached: decided by the URL's scheme alone.
    transport: Transport,
    /// Failed TLS handshakes (certificate refused, not TLS, timed out).
    tls_failures: Cell<u64>,
}

impl OriginClient {
    /// A client for `cfg.origin` (which must be set). The host name is
    /// resolved here, at start-up; later lookups (after a failure, or once
    /// `--origin-dns-ttl` has passed) run off the worker thread. `tls`:
    /// the process's TLS client configuration, needed for `https://`.
    pub fn new(url: OriginUrl, cfg: &CacheConfig, tls: Option<Arc<ClientConfig>>) -> OriginClient {
        let client = OriginClient {
            resolver: Resolver::new("origin", &url.host, url.port, cfg.origin_dns_ttl),
            idle: RefCell::new(Vec::new()),
            slots: Slots::new(cfg.origin_max_connections),
            connect_timeout: cfg.origin_connect_timeout,
            timeout: cfg.origin_timeout,
            pool_size: cfg.origin_pool_size,
            idle_timeout: cfg.origin_idle_timeout,
            max_body: cfg.origin_max_body,
            max_head: cfg.origin_max_head,
            connects: Cell::new(0),
            transport: Transport::for_url(&url, tls),
            url,
            tls_failures: Cell::new(0),
        };
        if let Err(e) = client.resolver.prime() {
            log!(
                Warn,
                "cannot resolve origin, will retry",
                origin = client.url,
                error = e
            );
        }
        client
    }

    /// The origin URL.
    pub fn url(&self) -> &OriginUrl {
        &self.url
    }

    /// Connections opened so far.
    pub fn connects(&self) -> u64 {
        self.connects.get()
    }

    /// TLS handshakes that failed so far.
    pub fn tls_failures(&self) -> u64 {
        self.tls_failures.get()
    }

    /// Sends `request` (a complete GET) and reads the whole response,
    /// within `--origin-timeout` including the wait for a free slot.
    pub async fn fetch(&self, request: Bytes) -> Result<Fetched, FetchError> {
        let work = async {
            let _slot = self.slots.acquire().await;
            self.exchange_with_retry(&request).await
        };
        monoio::time::timeout(self.timeout, work)
            .await
            .unwrap_or(Err(FetchError::Timeout))
    }

    async fn exchange_with_retry(&self, request: &Bytes) -> Result<Fetched, FetchError> {
        if let Some(conn) = self.take_idle() {
            match self.exchange(conn, request).await {
                Ok(f) => return Ok(f),
                Err(Attempt::Failed(e)) => return Err(e),
                // GET is idempotent: a pooled connection that turned out
                // closed is retried once on a fresh one.
                Err(Attempt::Stale(e)) => {
                    log!(Debug, "pooled origin connection was closed", error = e)
                }
            }
        }
        let conn = self.connect().await?;
        self.exchange(conn, request).await.map_err(|a| match a {
            Attempt::Stale(e) => FetchError::Unreachable(e.to_string()),
            Attempt::Failed(e) => e,
        })
    }

    /// A pooled connection that is still open and not too old.
    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.borrow_mut();
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < self.idle_timeout && still_open(&conn.stream) {
                return Some(conn);
            }
        }
        None
    }

    fn put_idle(&self, conn: Conn) {
        let mut idle = self.idle.borrow_mut();
        if idle.len() < self.pool_size {
            idle.push((conn, Instant::now()));
        }
    }

    async fn connect(&self) -> Result<Conn, FetchError> {
        let addrs = self
            .resolver
            .addrs()
            .await
            .map_err(FetchError::Unreachable)?;
        let mut last = FetchError::Unreachable("no address".into());
        for addr in addrs {
            let attempt =
                monoio::time::timeout(self.connect_timeout, TcpStream::connect_addr(addr));
            match attempt.await {
                Ok(Ok(tcp)) => {
                    let _ = tcp.set_nodelay(true);
                    let stream = self.secure(tcp).await?;
                    self.connects.set(self.connects.get() + 1);
                    return Ok(Conn {
                        stream,
                        buf: BytesMut::new(),
                    });
                }
                Ok(Err(e)) => last = FetchError::Unreachable(e.to_string()),
                Err(_) => last = FetchError::Timeout,
            }
        }
        Err(last)
    }

    /// With `https://`, the TLS handshake (within
    /// `--origin-connect-timeout`); a failure is logged and counted.
    async fn secure(&self, tcp: TcpStream) -> Result<ClientStream, FetchError> {
        let cfg = match &self.transport {
            Transport::Plain => return Ok(ClientStream::plain(tcp)),
            Transport::Tls(cfg) => cfg.clone(),
            Transport::Unavailable(why) => {
                self.tls_failures.set(self.tls_failures.get() + 1);
                log!(
                    Warn,
                    "origin tls unavailable",
                    origin = self.url,
                    error = why
                );
                return Err(FetchError::Unreachable(why.clone()));
            }
        };
        let handshake = ClientStream::handshake(tcp, cfg, &self.url.host);
        let e = match monoio::time::timeout(self.connect_timeout, handshake).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => e,
            Err(_) => HandshakeError::TimedOut,
        };
        self.tls_failures.set(self.tls_failures.get() + 1);
        log!(Warn, "origin tls failed", origin = self.url, error = e);
        Err(FetchError::Unreachable(e.to_string()))
    }

    async fn exchange(&self, mut conn: Conn, request: &Bytes) -> Result<Fetched, Attempt> {
        let res = conn.stream.write_all(request.clone()).await;
        res.map_err(Attempt::Stale)?;
        let head = loop {
            match parse_response_head(&mut conn.buf, self.max_head) {
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(e) => return Err(Attempt::Failed(FetchError::Invalid(e))),
            }
            let nothing_yet = conn.buf.is_empty();
            match conn.stream.read_some(&mut conn.buf).await {
                Ok(0) if nothing_yet => {
                    return Err(Attempt::Stale(io::ErrorKind::UnexpectedEof.into()))
                }
                Ok(0) => {
                    return Err(Attempt::Failed(FetchError::Invalid(
                        ResponseError::Truncated,
                    )))
                }
                Ok(_) => {}
                Err(e) if nothing_yet => return Err(Attempt::Stale(e)),
                Err(e) => return Err(Attempt::Failed(FetchError::Unreachable(e.to_string()))),
            }
        };
        let invalid = |e| Attempt::Failed(FetchError::Invalid(e));
        let mut decoder =
            BodyDecoder::new(head.framing, self.max_body, self.max_head).map_err(invalid)?;
        let mut body = BytesMut::with_capacity(decoder.expected().unwrap_or(0));
        loop {
            if decoder.decode(&mut conn.buf, &mut body).map_err(invalid)? {
                break;
            }
            match conn.stream.read_some(&mut conn.buf).await {
                Ok(0) => {
                    decoder.at_eof().map_err(invalid)?;
                    break;
                }
                Ok(_) => {}
                Err(e) => return Err(Attempt::Failed(FetchError::Unreachable(e.to_string()))),
            }
        }
        // Bytes after the response would be a second, unasked-for response.
        if head.reusable && conn.buf.is_empty() {
            self.put_idle(conn);
        }
        Ok(Fetched {
            status: head.status,
            headers: head.headers,
            body: body.freeze(),
        })
    }
}

/// An idle connection is usable only if the origin has neither closed it
/// nor sent anything on it.
fn still_open(stream: &ClientStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(
        sys::recv_nonblocking(stream.as_raw_fd(), &mut probe),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock
    )
}

/// A counting semaphore for one thread: origin requests in flight.
///
/// Fair and cancel-safe: each waiting `acquire` has exactly one entry in
/// a FIFO queue (its waker replaced, not added, on every poll); a freed
/// slot is handed to the first entry directly (a newcomer cannot take it
/// first), and a waiter dropped before it ran (its request timed out)
/// leaves the queue, passing on a slot it had been handed.
pub struct Slots {
    free: Cell<usize>,
    next_id: Cell<u64>,
    /// Waiting acquires in arrival order.
    queue: RefCell<VecDeque<u64>>,
    /// Each waiting acquire's waker, and whether a slot was handed to it.
    waiting: RefCell<HashMap<u64, (Waker, bool)>>,
}

impl Slots {
    /// `n` slots, all free.
    pub fn new(n: usize) -> Self {
        Slots {
            free: Cell::new(n),
            next_id: Cell::new(0),
            queue: RefCell::new(VecDeque::new()),
            waiting: RefCell::new(HashMap::new()),
        }
    }

    /// Waits for a free slot (in arrival order); the slot is freed when
    /// the returned guard is dropped.
    pub fn acquire(&self) -> Acquire<'_> {
        Acquire {
            slots: self,
            id: None,
        }
    }

    /// A slot is free: to the first waiter, or back to the pool.
    fn release(&self) {
        let next = self.queue.borrow_mut().pop_front();
        match next {
            Some(id) => {
                let mut waiting = self.waiting.borrow_mut();
                let entry = waiting.get_mut(&id).expect("queued waiters are waiting");
                entry.1 = true;
                entry.0.wake_by_ref();
            }
            None => self.free.set(self.free.get() + 1),
        }
    }
}

/// A wait for a slot ([`Slots::acquire`]).
pub struct Acquire<'a> {
    slots: &'a Slots,
    /// Its entry, once it had to wait.
    id: Option<u64>,
}

impl<'a> Future for Acquire<'a> {
    type Output = Slot<'a>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Slot<'a>> {
        let slots = self.slots;
        let Some(id) = self.id else {
            let free = slots.free.get();
            if free > 0 {
                slots.free.set(free - 1);
                return Poll::Ready(Slot(slots));
            }
            let id = slots.next_id.get();
            slots.next_id.set(id + 1);
            slots.queue.borrow_mut().push_back(id);
            slots
                .waiting
                .borrow_mut()
                .insert(id, (cx.waker().clone(), false));
            self.id = Some(id);
            return Poll::Pending;
        };
        let mut waiting = slots.waiting.borrow_mut();
        let entry = waiting.get_mut(&id).expect("a pending acquire is waiting");
        if entry.1 {
            waiting.remove(&id);
            self.id = None;
            return Poll::Ready(Slot(slots));
        }
        if !entry.0.will_wake(cx.waker()) {
            entry.0 = cx.waker().clone();
        }
        Poll::Pending
    }
}

impl Drop for Acquire<'_> {
    /// A waiter that gives up leaves the queue; if a slot had already been
    /// handed to it, the slot goes to the next one, so it never sits unused.
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let handed = self.slots.waiting.borrow_mut().remove(&id).map(|e| e.1);
        match handed {
            Some(true) => self.slots.release(),
            _ => self.slots.queue.borrow_mut().retain(|q| *q != id),
        }
    }
}

/// A held slot, freed when dropped.
pub struct Slot<'a>(&'a Slots);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Resolves when `f` does; for tests of the semaphore.
#[cfg(test)]
fn now_or_never<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_bound_concurrency_and_hand_over() {
        let s = Slots::new(1);
        let a = now_or_never(s.acquire()).expect("one free slot");
        let mut waiting = std::pin::pin!(s.acquire());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        drop(a);
        let b = waiting.as_mut().poll(&mut cx);
        assert!(b.is_ready());
        assert_eq!(s.free.get(), 0);
        drop(b);
        assert_eq!(s.free.get(), 1);
    }

    /// Counts its wake-ups.
    struct Woken(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Woken {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn counter() -> (std::sync::Arc<Woken>, Waker) {
        let w = std::sync::Arc::new(Woken(Default::default()));
        (w.clone(), Waker::from(w))
    }

    fn woken(w: &Woken) -> usize {
        w.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waiters are served in order, one entry each however often polled;
    /// one that gives up (timed out) leaves no stale entry behind; a
    /// newcomer does not take a slot freed for a waiter.
    #[test]
    fn slots_are_fair_and_cancel_safe() {
        let s = Slots::new(1);
        let held = now_or_never(s.acquire()).expect("one free slot");
        let (wa, a_waker) = counter();
        let (wb, b_waker) = counter();
        let (wc, c_waker) = counter();
        let mut a = Box::pin(s.acquire());
        let mut b = Box::pin(s.acquire());
        let mut c = Box::pin(s.acquire());
        for _ in 0..3 {
            assert!(a
                .as_mut()
                .poll(&mut Context::from_waker(&a_waker))
                .is_pending());
        }
        assert!(b
            .as_mut()
            .poll(&mut Context::from_waker(&b_waker))
            .is_pending());
        assert!(c
            .as_mut()
            .poll(&mut Context::from_waker(&c_waker))
            .is_pending());
        drop(b);
        drop(held);
        assert_eq!((woken(&wa), woken(&wc)), (1, 0), "the first waiter first");
        assert!(
            now_or_never(s.acquire()).is_none(),
            "a newcomer does not take a slot freed for a waiter"
        );
        let Poll::Ready(slot) = a.as_mut().poll(&mut Context::from_waker(&a_waker)) else {
            panic!("the slot was freed for the first waiter");
        };
        drop(slot);
        assert_eq!(woken(&wc), 1, "the next live waiter is woken");
        assert_eq!(woken(&wb), 0, "not the one that gave up");
        let slot = c.as_mut().poll(&mut Context::from_waker(&c_waker));
        assert!(slot.is_ready());
        drop(slot);
        assert_eq!(s.free.get(), 1);
    }

    /// A slot freed for a waiter that then gives up goes on to the next.
    #[test]
    fn a_slot_handed_to_a_waiter_that_gives_up_passes_on() {
        let s = Slots::new(1);
        let held = now_or_never(s.acquire()).expect("one free slot");
        let (_, a_waker) = counter();
        let (wb, b_waker) = counter();
        let mut a = Box::pin(s.acquire());
        let mut b = Box::pin(s.acquire());
        assert!(a
            .as_mut()
            .poll(&mut Context::from_waker(&a_waker))
            .is_pending());
        assert!(b
            .as_mut()
            .poll(&mut Context::from_waker(&b_waker))
            .is_pending());
        drop(held);
        drop(a);
        assert_eq!(woken(&wb), 1);
        assert!(b
            .as_mut()
            .poll(&mut Context::from_waker(&b_waker))
            .is_ready());
    }

    #[test]
    fn errors_map_to_gateway_statuses() {
        assert_eq!(FetchError::Timeout.status(), 504);
        assert_eq!(FetchError::Unreachable("refused".into()).status(), 502);
        let big = FetchError::Invalid(ResponseError::BodyTooLarge);
        assert_eq!(
            (big.status(), big.message()),
            (502, "origin response too large")
        );
    }
}
