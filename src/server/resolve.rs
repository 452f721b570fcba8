//! Resolving host names (the origin's, Redis's) off the worker thread: a
//! blocking `getaddrinfo` on the worker would stop every connection for as
//! long as a slow DNS server takes. A lookup runs on a short-lived thread
//! of its own (at most one per host at a time, so a hung resolver holds one
//! thread, not one per request); it hands its result back through a socket
//! pair whose end the worker awaits like any other socket. Results are kept
//! for a TTL (`crate::cache::dns`: `--origin-dns-ttl` for the origin,
//! [`REDIS_DNS_TTL`] for Redis) and refreshed in the background after that.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use crate::cache::dns::{Need, Resolved};
use crate::log;

type Slot = Arc<Mutex<Option<Result<Vec<SocketAddr>, String>>>>;

/// How long a Redis host name's addresses are used before a background
/// refresh (old ones stay in use meanwhile and on failure).
pub const REDIS_DNS_TTL: Duration = Duration::from_secs(30);

/// One host's addresses, resolved off the worker.
pub(crate) struct Resolver {
    /// What the host is, for log lines ("origin", "redis").
    what: &'static str,
    host: String,
    port: u16,
    state: RefCell<Resolved>,
    busy: Cell<bool>,
    /// Bumped when a lookup finishes; waiters watch it.
    done: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl Resolver {
    pub(crate) fn new(what: &'static str, host: &str, port: u16, ttl: Duration) -> Rc<Resolver> {
        Rc::new(Resolver {
            what,
            host: host.to_string(),
            port,
            state: RefCell::new(Resolved::new(ttl)),
            busy: Cell::new(false),
            done: Cell::new(0),
            waiters: RefCell::new(Vec::new()),
        })
    }

    /// Resolves now, blocking: for start-up only, before any client is
    /// served.
    pub(crate) fn prime(&self) -> Result<(), String> {
        let result = lookup(&self.host, self.port);
        self.state.borrow_mut().update(Instant::now(), result);
        self.state.borrow().result().map(|_| ())
    }

    /// The addresses to connect to: cached ones, or (none yet) those of a
    /// lookup this waits for. The caller bounds the wait.
    pub(crate) async fn addrs(self: &Rc<Self>) -> Result<Vec<SocketAddr>, String> {
        let need = self.state.borrow().need(Instant::now());
        match need {
            Need::Use(addrs) => return Ok(addrs),
            Need::Refresh(addrs) => {
                self.start();
                return Ok(addrs);
            }
            Need::Resolve => {}
        }
        let seen = self.done.get();
        self.start();
        poll_fn(|cx| {
            if self.done.get() != seen {
                return Poll::Ready(());
            }
            self.waiters.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await;
        self.state.borrow().result()
    }

    /// Starts a background lookup unless one is running.
    fn start(self: &Rc<Self>) {
        if self.busy.replace(true) {
            return;
        }
        let me = self.clone();
        monoio::spawn(async move {
            let result = off_thread(&me.host, me.port)
                .await
                .unwrap_or_else(|e| Err(format!("resolver: {e}")));
            if let Err(e) = &result {
                log!(
                    Warn,
                    "cannot resolve",
                    what = me.what,
                    host = me.host,
                    error = e
                );
            }
            me.state.borrow_mut().update(Instant::now(), result);
            me.busy.set(false);
            me.done.set(me.done.get() + 1);
            for w in me.waiters.borrow_mut().drain(..) {
                w.wake();
            }
        });
    }
}

/// A blocking lookup.
fn lookup(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    (host, port)
        .to_socket_addrs()
        .map(Iterator::collect)
        .map_err(|e| format!("resolving {host}: {e}"))
}

/// Runs [`lookup`] on a thread of its own; the thread closes its end of a
/// socket pair when the result is in the slot, which wakes the worker.
async fn off_thread(host: &str, port: u16) -> io::Result<Result<Vec<SocketAddr>, String>> {
    let (ours, theirs) = StdUnixStream::pair()?;
    ours.set_nonblocking(true)?;
    let slot: Slot = Arc::default();
    let (h, s) = (host.to_string(), slot.clone());
    std::thread::Builder::new()
        .name("corecast-dns".into())
        .spawn(move || {
            let result = lookup(&h, port);
            *s.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
            drop(theirs);
        })?;
    let ours = monoio::net::UnixStream::from_std(ours)?;
    loop {
        if let Some(r) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Ok(r);
        }
        // Readable once the thread closed its end (EOF).
        ours.readable(false).await?;
    }
}
