//! Hooks to the application's backend (`--proxy-*`), sans-I/O: the
//! options, the JSON requests and answers of Centrifugo's HTTP proxy (so
//! a backend written for it works unchanged), and the per-hook counters.
//! The calls themselves are the edge's (`server::hooks`), over the
//! cache's pooled origin client.
//!
//! # Layout
//! - `api`: the server API's commands (`/api/disconnect`, ...), their
//!   control-channel form, and the cluster listing's answers gathered
//!   (`GET /api/connections` in Redis mode, bounded).
//! - `kind`: the five hooks (connect, subscribe, publish, rpc, refresh).
//! - `config`: [`HookConfig`] — URLs, named proxies (`--proxy NAME=URL`,
//!   which namespaces pick), forwarded and static headers, timeout,
//!   concurrency, pool and answer-size bounds.
//! - `request`: the POST bodies and the HTTP request (allow-listed
//!   headers picked from the upgrade's head).
//! - `reply`: an answer parsed and checked — `result`, `error` or
//!   `disconnect` — into one typed result per hook.
//! - `frames`: the JSON protocol frames hooks add (`connected`, `rpc`,
//!   refusals).
//! - `stats`: requests, refusals, errors, timeouts and latency per hook,
//!   as `/stats` JSON and `/metrics` lines.

pub mod api;
mod config;
pub mod frames;
mod kind;
pub mod reply;
pub mod request;
pub mod stats;

pub use config::{at_least_one, HookConfig, NamedProxy, MAX_PROXIES, NO_PROXY};
pub use kind::HookKind;
pub use reply::{Answer, ReplyError};
pub use stats::HookStats;
