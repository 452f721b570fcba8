//! What every consumer on the thread shares (the bridge, its counters,
//! the stop flag) and the loop that keeps one running: a session until
//! it fails, then a pause (100 ms doubling to 5 s) and another, each
//! distinct error logged once.

use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::client::Bridge;
use super::counters::Counters;
use crate::log;

const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// First pause after a failure (and after a session that got going).
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// What a consumer shares with the thread.
pub struct Ctx {
    pub bridge: Rc<Bridge>,
    pub counters: Arc<Counters>,
    pub stop: Arc<AtomicBool>,
    pub max_message: usize,
}

impl Ctx {
    /// The server is stopping (or its worker end is gone).
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.bridge.closed()
    }
}

/// Runs `session` again after each failure until the server stops; a
/// session resets `backoff` once it is going.
pub async fn forever<F, Fut>(name: &str, ctx: &Ctx, mut session: F)
where
    F: FnMut(Rc<std::cell::Cell<Duration>>) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let backoff = Rc::new(std::cell::Cell::new(MIN_BACKOFF));
    let mut logged: Option<String> = None;
    while !ctx.stopping() {
        let out = session(backoff.clone()).await;
        ctx.counters.connected.store(0, Ordering::Relaxed);
        let Err(e) = out else { return };
        Counters::add(&ctx.counters.errors, 1);
        if logged.as_deref() != Some(e.as_str()) {
            log!(
                Error,
                "outbox consumer failed, retrying",
                consumer = name,
                error = e
            );
            logged = Some(e);
        }
        tokio::time::sleep(backoff.get()).await;
        backoff.set((backoff.get() * 2).min(MAX_BACKOFF));
    }
}
