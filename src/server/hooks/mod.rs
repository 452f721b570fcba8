//! Hooks to the application's backend at the edge: each configured hook
//! (`--proxy-*`) calls its URL through one pooled, keep-alive origin
//! client per backend origin (the cache's client: hooks on the same
//! `host:port` share its `--proxy-max-connections`), under its own
//! concurrency limit (`--proxy-concurrency`) and the call's deadline
//! (`--proxy-timeout`, the wait for a slot included). Every call is
//! counted per hook. A failed call — backend down, slow, a non-2xx
//! status, an answer that is not the proxy's JSON or is too large —
//! refuses the client (fail closed).
//!
//! The requests and answers are the sans-I/O `crate::hooks`.
//! - `mod.rs`: [`HookEdge`], the call and its counting.
//! - `connect`: the connect hook at the upgrade.
//! - `session`: subscribe, publish and rpc of the JSON protocol.
//! - `refresh`: the refresh loop of connections with an `expire_at`.
//! - `users`: connections by user; `api`: the server API on them.

pub mod api;
pub mod connect;
pub mod refresh;
pub mod session;
pub mod users;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConfig;

use crate::cache::origin::OriginUrl;
use crate::cache::CacheConfig;
use crate::config::Config;
use crate::hooks::{request, Answer, HookConfig, HookKind, HookStats, ReplyError};
use crate::log;
use crate::server::cache::origin::{FetchError, OriginClient, Slots};

/// Why a hook call gave no usable answer.
#[derive(Debug)]
pub enum Failure {
    /// Over `--proxy-timeout`.
    Timeout,
    /// Unreachable, a broken or too large response, a non-2xx status,
    /// or an answer that is not the proxy's.
    Failed(String),
}

impl Failure {
    /// The short text a refused client is given.
    pub fn message(&self) -> &'static str {
        match self {
            Failure::Timeout => "backend timed out",
            Failure::Failed(_) => "backend unavailable",
        }
    }
}

struct Hook {
    kind: HookKind,
    url: OriginUrl,
    client: Rc<OriginClient>,
    slots: Slots,
    stats: RefCell<HookStats>,
}

/// The worker's hooks.
pub struct HookEdge {
    cfg: HookConfig,
    hooks: Vec<Hook>,
    clients: Vec<Rc<OriginClient>>,
    /// `--max-subscriptions`: the most channels a connect result may list.
    pub max_channels: usize,
}

impl HookEdge {
    /// The hooks of `cfg` (`None` when none is on); `tls`: the process's
    /// client configuration for `https://` backends.
    pub fn new(cfg: &Config, tls: Option<Arc<ClientConfig>>) -> Option<HookEdge> {
        let h = &cfg.proxy;
        if !h.any() {
            return None;
        }
        let mut by_origin: HashMap<(bool, String, u16), Rc<OriginClient>> = HashMap::new();
        let mut hooks = Vec::new();
        for kind in HookKind::ALL {
            let Some(url) = h.url(kind) else { continue };
            let key = (url.tls, url.host.clone(), url.port);
            let client = by_origin
                .entry(key)
                .or_insert_with(|| {
                    Rc::new(OriginClient::new(
                        url.clone(),
                        &client_config(h),
                        tls.clone(),
                    ))
                })
                .clone();
            hooks.push(Hook {
                kind,
                url: url.clone(),
                client,
                slots: Slots::new(h.concurrency),
                stats: RefCell::default(),
            });
        }
        Some(HookEdge {
            cfg: h.clone(),
            clients: by_origin.into_values().collect(),
            hooks,
            max_channels: cfg.max_subscriptions,
        })
    }

    /// Whether `kind` is on.
    pub fn has(&self, kind: HookKind) -> bool {
        self.hook(kind).is_some()
    }

    fn hook(&self, kind: HookKind) -> Option<&Hook> {
        self.hooks.iter().find(|h| h.kind == kind)
    }

    /// The settings.
    pub fn config(&self) -> &HookConfig {
        &self.cfg
    }

    /// Each hook's counters.
    pub fn stats(&self) -> Vec<(HookKind, HookStats)> {
        self.hooks
            .iter()
            .map(|h| (h.kind, h.stats.borrow().clone()))
            .collect()
    }

    /// Connections opened to the backends so far (all origins).
    pub fn backend_connects(&self) -> u64 {
        self.clients.iter().map(|c| c.connects()).sum()
    }

    /// Calls hook `kind` (which must be on) with `body`, `forwarded`
    /// header lines added, and reads its answer with `parse`; counted.
    pub async fn call<T>(
        &self,
        kind: HookKind,
        forwarded: &[(String, Vec<u8>)],
        body: &[u8],
        parse: impl FnOnce(&[u8]) -> Result<Answer<T>, ReplyError>,
    ) -> Result<Answer<T>, Failure> {
        let hook = self.hook(kind).expect("only configured hooks are called");
        let req = request::http_request(&hook.url, forwarded, &self.cfg.static_headers, body);
        let started = Instant::now();
        let work = async {
            let _slot = hook.slots.acquire().await;
            hook.client.fetch(req).await
        };
        let fetched = monoio::time::timeout(self.cfg.timeout, work)
            .await
            .unwrap_or(Err(FetchError::Timeout));
        let outcome = match fetched {
            Err(FetchError::Timeout) => Err(Failure::Timeout),
            Err(e) => Err(Failure::Failed(e.to_string())),
            Ok(f) if !(200..300).contains(&f.status) => {
                Err(Failure::Failed(format!("status {}", f.status)))
            }
            Ok(f) => parse(&f.body).map_err(|e| Failure::Failed(e.to_string())),
        };
        count(hook, &outcome, started.elapsed());
        outcome
    }
}

fn count<T>(hook: &Hook, outcome: &Result<Answer<T>, Failure>, took: Duration) {
    let mut s = hook.stats.borrow_mut();
    s.requests += 1;
    match outcome {
        Ok(a) => {
            s.latency.observe_ns(took.as_nanos() as u64);
            if !matches!(a, Answer::Result(_)) {
                s.refusals += 1;
            }
        }
        Err(Failure::Timeout) => s.timeouts += 1,
        Err(Failure::Failed(why)) => {
            s.errors += 1;
            log!(Debug, "hook failed", hook = hook.kind.name(), error = why);
        }
    }
}

/// The origin client's settings for a backend: `--proxy-max-connections`
/// in flight and kept alive, the call's deadline, `--proxy-max-body`.
fn client_config(h: &HookConfig) -> CacheConfig {
    CacheConfig {
        origin_max_connections: h.max_connections.max(1),
        origin_pool_size: h.max_connections.max(1),
        origin_connect_timeout: h.timeout,
        origin_timeout: h.timeout,
        origin_idle_timeout: Duration::from_secs(30),
        origin_dns_ttl: Duration::from_secs(30),
        origin_max_body: h.max_body,
        origin_max_head: 16 * 1024,
        ..CacheConfig::default()
    }
}
