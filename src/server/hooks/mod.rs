//! Hooks to the application's backend at the edge: each configured hook
//! (`--proxy-*`) calls its URL through one pooled, keep-alive origin
//! client per backend origin (the cache's client: hooks on the same
//! `host:port` share its `--proxy-max-connections`), under its own
//! concurrency limit (`--proxy-concurrency`) and the call's deadline
//! (`--proxy-timeout`, the wait for a slot included). Every call is
//! counted per hook. A namespace may pick its own subscribe and publish
//! hooks (`subscribe-proxy`, `publish-proxy`: a named `--proxy`, or
//! `none`); [`HookEdge::for_channel`] finds a channel's. A failed call —
//! backend down, slow, a non-2xx status, an answer that is not the
//! proxy's JSON or is too large — refuses the client (fail closed).
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
use crate::namespace::{Proxy, Table};
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

/// One hook's backend: a global `--proxy-*` hook, or a named proxy
/// (`--proxy NAME=URL`) as some namespace's subscribe or publish hook.
pub struct Hook {
    kind: HookKind,
    url: OriginUrl,
    client: Rc<OriginClient>,
    slots: Slots,
}

/// The worker's hooks.
pub struct HookEdge {
    cfg: HookConfig,
    /// The global hooks (at most one per kind).
    hooks: Vec<Hook>,
    /// The named proxies namespaces use: `(kind, index in --proxy, hook)`.
    named: Vec<(HookKind, u8, Hook)>,
    /// Which hook each namespace's channels use.
    namespaces: Table,
    clients: Vec<Rc<OriginClient>>,
    /// Counters per kind (a named proxy's calls count under its kind).
    stats: [RefCell<HookStats>; 5],
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
        let mut hook = |kind: HookKind, url: &OriginUrl| {
            let key = (url.tls, url.host.clone(), url.port);
            let client = by_origin.entry(key).or_insert_with(|| {
                Rc::new(OriginClient::new(
                    url.clone(),
                    &client_config(h),
                    tls.clone(),
                ))
            });
            Hook {
                kind,
                url: url.clone(),
                client: client.clone(),
                slots: Slots::new(h.concurrency),
            }
        };
        let hooks = HookKind::ALL
            .into_iter()
            .filter_map(|k| h.url(k).map(|u| hook(k, u)))
            .collect();
        let table = &cfg.namespaces.table;
        let named = named_in_use(table)
            .into_iter()
            .map(|(k, i)| (k, i, hook(k, &h.named[usize::from(i)].url)))
            .collect();
        Some(HookEdge {
            cfg: h.clone(),
            clients: by_origin.into_values().collect(),
            hooks,
            named,
            namespaces: table.clone(),
            stats: Default::default(),
            max_channels: cfg.max_subscriptions,
        })
    }

    /// Whether the global hook `kind` is on.
    pub fn has(&self, kind: HookKind) -> bool {
        self.hook(kind).is_some()
    }

    /// Whether some channel has a publish hook (global or a namespace's):
    /// then a connect-hook connection may publish, through it.
    pub fn any_publish(&self) -> bool {
        self.has(HookKind::Publish) || self.named.iter().any(|n| n.0 == HookKind::Publish)
    }

    fn hook(&self, kind: HookKind) -> Option<&Hook> {
        self.hooks.iter().find(|h| h.kind == kind)
    }

    /// The subscribe or publish hook of `channel`: its namespace's
    /// (`subscribe-proxy`, `publish-proxy`), else the global one.
    pub fn for_channel(&self, kind: HookKind, channel: &str) -> Option<&Hook> {
        let publish = kind == HookKind::Publish;
        match self.namespaces.proxy_of(channel, publish) {
            Proxy::Global => self.hook(kind),
            Proxy::Off => None,
            Proxy::Named(i) => self
                .named
                .iter()
                .find(|n| n.0 == kind && n.1 == i)
                .map(|n| &n.2),
        }
    }

    /// The settings.
    pub fn config(&self) -> &HookConfig {
        &self.cfg
    }

    /// Each hook's counters (the kinds that are on).
    pub fn stats(&self) -> Vec<(HookKind, HookStats)> {
        let on = |k: &HookKind| self.has(*k) || self.named.iter().any(|n| n.0 == *k);
        HookKind::ALL
            .into_iter()
            .filter(on)
            .map(|k| (k, self.stats[k.index()].borrow().clone()))
            .collect()
    }

    /// Connections opened to the backends so far (all origins).
    pub fn backend_connects(&self) -> u64 {
        self.clients.iter().map(|c| c.connects()).sum()
    }

    /// Calls the global hook `kind` (which must be on); see [`HookEdge::call_hook`].
    pub async fn call<T>(
        &self,
        kind: HookKind,
        forwarded: &[(String, Vec<u8>)],
        body: &[u8],
        parse: impl FnOnce(&[u8]) -> Result<Answer<T>, ReplyError>,
    ) -> Result<Answer<T>, Failure> {
        let hook = self.hook(kind).expect("only configured hooks are called");
        self.call_hook(hook, forwarded, body, parse).await
    }

    /// Calls `hook` with `body`, `forwarded` header lines added, and reads
    /// its answer with `parse`; counted under its kind.
    pub async fn call_hook<T>(
        &self,
        hook: &Hook,
        forwarded: &[(String, Vec<u8>)],
        body: &[u8],
        parse: impl FnOnce(&[u8]) -> Result<Answer<T>, ReplyError>,
    ) -> Result<Answer<T>, Failure> {
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
        count(
            hook.kind,
            &self.stats[hook.kind.index()],
            &outcome,
            started.elapsed(),
        );
        outcome
    }
}

/// The `(kind, named proxy)` pairs some namespace uses, each once.
fn named_in_use(table: &Table) -> Vec<(HookKind, u8)> {
    let mut out = Vec::new();
    for r in table.all_rules() {
        for (kind, p) in [
            (HookKind::Subscribe, r.subscribe_proxy),
            (HookKind::Publish, r.publish_proxy),
        ] {
            if let Proxy::Named(i) = p {
                if !out.contains(&(kind, i)) {
                    out.push((kind, i));
                }
            }
        }
    }
    out
}

fn count<T>(
    kind: HookKind,
    stats: &RefCell<HookStats>,
    outcome: &Result<Answer<T>, Failure>,
    took: Duration,
) {
    let mut s = stats.borrow_mut();
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
            log!(Debug, "hook failed", hook = kind.name(), error = why);
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
