//! The origin's addresses with a time to live, sans-I/O: what a connect
//! should do — use the addresses, use them while they are re-resolved in
//! the background, or wait for a first resolution. The lookups themselves
//! run off the worker thread (`server::resolve`): resolving
//! blocks, and on the worker it froze every WebSocket.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// What a connect does now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Fresh addresses.
    Use(Vec<SocketAddr>),
    /// Addresses past their TTL: use them, and re-resolve in the background.
    Refresh(Vec<SocketAddr>),
    /// No address known: resolve and wait.
    Resolve,
}

/// The last resolution of one host.
#[derive(Debug, Clone)]
pub struct Resolved {
    addrs: Vec<SocketAddr>,
    at: Option<Instant>,
    ttl: Duration,
    error: Option<String>,
}

impl Resolved {
    /// Nothing resolved yet; results live for `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Resolved {
            addrs: Vec::new(),
            at: None,
            ttl,
            error: None,
        }
    }

    /// What to do at `now`.
    pub fn need(&self, now: Instant) -> Need {
        match self.at {
            _ if self.addrs.is_empty() => Need::Resolve,
            Some(at) if now.saturating_duration_since(at) < self.ttl => {
                Need::Use(self.addrs.clone())
            }
            _ => Need::Refresh(self.addrs.clone()),
        }
    }

    /// A lookup finished at `now`. A failure keeps the previous addresses
    /// (an origin that was reachable stays so through a DNS hiccup) and
    /// waits a TTL before the next try.
    pub fn update(&mut self, now: Instant, result: Result<Vec<SocketAddr>, String>) {
        self.at = Some(now);
        match result {
            Ok(addrs) if !addrs.is_empty() => {
                self.addrs = addrs;
                self.error = None;
            }
            Ok(_) => self.error = Some("no address".into()),
            Err(e) => self.error = Some(e),
        }
    }

    /// The addresses to use after a lookup, or why there are none.
    pub fn result(&self) -> Result<Vec<SocketAddr>, String> {
        if self.addrs.is_empty() {
            Err(self.error.clone().unwrap_or_else(|| "not resolved".into()))
        } else {
            Ok(self.addrs.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_live_for_their_ttl_and_survive_failed_lookups() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(30);
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.2:1".parse().unwrap();
        let mut r = Resolved::new(ttl);
        assert_eq!(r.need(t0), Need::Resolve);
        assert!(r.result().is_err());
        r.update(t0, Err("no such host".into()));
        assert_eq!(r.need(t0), Need::Resolve, "nothing to use yet");
        assert_eq!(r.result(), Err("no such host".into()));
        r.update(t0, Ok(vec![a]));
        assert_eq!(r.need(t0 + ttl / 2), Need::Use(vec![a]));
        assert_eq!(r.need(t0 + ttl), Need::Refresh(vec![a]));
        r.update(t0 + ttl, Err("timeout".into()));
        assert_eq!(
            r.need(t0 + ttl),
            Need::Use(vec![a]),
            "kept, retried after a TTL"
        );
        r.update(t0 + ttl * 2, Ok(vec![b]));
        assert_eq!(r.need(t0 + ttl * 2), Need::Use(vec![b]), "re-resolved");
        r.update(t0 + ttl * 3, Ok(vec![]));
        assert_eq!(r.result(), Ok(vec![b]));
    }
}
