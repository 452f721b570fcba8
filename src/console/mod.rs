//! The operator console (`/console`, `--admin-key`), sans-I/O: who is
//! logged in (sessions, the cookie, the login form and its per-address
//! rate limit) and what the feed says each second (the snapshot: top
//! channels, this instance, every instance in Redis mode, the 15-minute
//! series). Its edge is `server::console`.
//!
//! # Layout
//! - `session`: the key check, session tokens and their bounded table,
//!   the cookie and the login form, the per-address login limiter.
//! - `snapshot`: the top channels (bounded), instance summaries and the
//!   table of instances heard through Redis, the series ring.
//! - `top`: `corecast top` — its arguments, the login and feed requests,
//!   the cookie from the login's answer, a snapshot as text (the binary
//!   does the blocking I/O).

pub mod session;
pub mod snapshot;
pub mod top;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Shortest `--admin-key` accepted at start.
pub const MIN_KEY_LEN: usize = 16;
/// The feed's internal channel (`!`: no client may name it).
pub const FEED_CHANNEL: &str = "!console/feed";
/// The Redis channel every instance publishes its summary on, once a
/// second, in Redis mode (with `--admin-key`).
pub const INSTANCES_CHANNEL: &str = "!console";
/// The header every console action must carry (with the session cookie):
/// a cross-site form cannot set it, and a cross-site `fetch` that sets it
/// needs a CORS preflight the server never grants.
pub const ACTION_HEADER: &str = "x-corecast-console";

/// Who may use the console: the live sessions and the login limiter.
/// One per process, shared by its workers — a login on one worker is
/// valid on every worker, and an address's attempts count once however
/// the connections are spread. Locked only by console requests (a few a
/// second), never on the delivery path.
#[derive(Debug, Default, Clone)]
pub struct Access(Arc<Mutex<Gate>>);

/// What [`Access`] guards.
#[derive(Debug, Default)]
pub struct Gate {
    /// Live sessions.
    pub sessions: session::Sessions,
    /// Login attempts per address.
    pub logins: session::LoginLimiter,
}

impl Access {
    /// The gate (a worker that panicked aborts the process, so a
    /// poisoned lock holds consistent data).
    pub fn lock(&self) -> MutexGuard<'_, Gate> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the console keeps on a worker: the process's [`Access`], the
/// instances heard, the series, and last second's readings.
#[derive(Debug, Default)]
pub struct State {
    /// Sessions and login limits, the process's.
    pub access: Access,
    /// Instances heard through Redis (Redis mode).
    pub instances: snapshot::Instances,
    /// The last 15 minutes.
    pub series: snapshot::Series,
    /// Last second's counters (rates are differences).
    pub prev: snapshot::Counters,
    /// Last second's fan-out and loop-lag histograms (quantiles over the
    /// second are differences).
    pub hist_prev: (crate::histogram::Histogram, crate::histogram::Histogram),
    /// Last second's origin requests and time waiting for them (the
    /// cache's origin latency over the second).
    pub prev_origin: (u64, u64),
    /// When the channels were last looked at (their message counts are
    /// since then), ms.
    pub last_scan_ms: u64,
    /// What happened at the console.
    pub counts: Counts,
}

/// The console's counters (in its snapshot).
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Counts {
    /// Logins with the right key.
    pub logins: u64,
    /// Logins with a wrong key (`401`).
    pub logins_failed: u64,
    /// Logins over the per-address limit (`429`).
    pub logins_limited: u64,
    /// Actions carried out (each logged with the admin's address).
    pub actions: u64,
    /// Actions refused: no session, or no action header (CSRF).
    pub actions_refused: u64,
}
