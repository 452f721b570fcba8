//! The worker's TLS: the rustls configuration new handshakes get, and
//! its reload on SIGHUP. Connections keep the configuration they started
//! with (rustls holds it per connection), so a reload drops none.

use std::cell::{Cell, RefCell};
use std::io;
use std::marker::PhantomData;
use std::sync::Arc;

use rustls::ServerConfig;

use crate::log;
use crate::stats::Stats;
use crate::tls::{Files, Settings};

thread_local! {
    /// Handshakes under way on this worker thread (each worker its own;
    /// a session never leaves the thread it started on).
    static PENDING: Cell<usize> = const { Cell::new(0) };
}

/// A place among the worker's pending handshakes, given back when
/// dropped (on the same thread: it is not `Send`).
pub struct HandshakeSlot(PhantomData<*const ()>);

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        PENDING.with(|p| p.set(p.get() - 1));
    }
}

/// A place for one more handshake, or `None` when `max` are under way
/// (0: unbounded).
pub fn begin_handshake(max: usize) -> Option<HandshakeSlot> {
    PENDING.with(|p| {
        if max != 0 && p.get() >= max {
            return None;
        }
        p.set(p.get() + 1);
        Some(HandshakeSlot(PhantomData))
    })
}

/// TLS on the public listener.
pub struct TlsEdge {
    settings: Settings,
    /// Handshakes under way at most (`--tls-max-handshakes`).
    max_pending: usize,
    current: RefCell<Arc<ServerConfig>>,
    /// The SIGHUP count last acted on (`runtime::reloads`).
    seen: Cell<u64>,
}

impl TlsEdge {
    /// Reads the certificate files (`None`: TLS off); an error names the
    /// file and the reason, and the server does not start.
    pub fn new(files: &Files) -> io::Result<Option<TlsEdge>> {
        if !files.enabled() {
            return Ok(None);
        }
        let settings = Settings::new(files.clone()).map_err(io::Error::other)?;
        let current = settings.server_config().map_err(io::Error::other)?;
        Ok(Some(TlsEdge {
            max_pending: files.max_handshakes,
            settings,
            current: RefCell::new(current),
            seen: Cell::new(crate::runtime::reloads()),
        }))
    }

    /// The same TLS for another worker: the configuration, and the
    /// session cache and ticket keys behind it, are shared, so a client
    /// resumes its session whichever worker it lands on.
    pub fn share(&self) -> TlsEdge {
        TlsEdge {
            settings: self.settings.clone(),
            max_pending: self.max_pending,
            current: RefCell::new(self.config()),
            seen: Cell::new(self.seen.get()),
        }
    }

    /// `--tls-max-handshakes`: handshakes under way at most (0:
    /// unbounded). A session takes its place when the peer's first
    /// bytes (its ClientHello) arrive ([`begin_handshake`]), not at
    /// accept: sockets that send nothing hold no place.
    pub fn max_handshakes(&self) -> usize {
        self.max_pending
    }

    /// The configuration a new connection's session starts with.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current.borrow().clone()
    }

    /// If a SIGHUP arrived since the last call: reads the files again and
    /// uses them for new handshakes, or keeps the old configuration and
    /// logs why.
    pub fn reload_if_asked(&self, stats: &mut Stats) {
        let asked = crate::runtime::reloads();
        if asked == self.seen.replace(asked) {
            return;
        }
        match self.settings.server_config() {
            Ok(cfg) => {
                *self.current.borrow_mut() = cfg;
                stats.tls_reloads += 1;
                log!(Info, "tls certificates reloaded");
            }
            Err(e) => {
                stats.tls_reload_failures += 1;
                log!(
                    Error,
                    "tls reload failed, keeping the certificates in use",
                    error = e
                );
            }
        }
    }
}
