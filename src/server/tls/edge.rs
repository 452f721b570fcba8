//! The worker's TLS: the rustls configuration new handshakes get, and
//! its reload on SIGHUP. Connections keep the configuration they started
//! with (rustls holds it per connection), so a reload drops none.

use std::cell::{Cell, RefCell};
use std::io;
use std::sync::Arc;

use rustls::ServerConfig;

use crate::log;
use crate::stats::Stats;
use crate::tls::{Files, Settings};

/// TLS on the public listener.
pub struct TlsEdge {
    settings: Settings,
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
            settings,
            current: RefCell::new(current),
            seen: Cell::new(crate::runtime::reloads()),
        }))
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
