//! Redis mode's settings (`--redis-url` and the `--redis-*` options),
//! owned by the Redis layer; the configuration table fills them in.

use std::path::PathBuf;
use std::time::Duration;

use super::sentinel::SentinelUrl;
use super::url::{ClusterSeeds, RedisUrl};

/// Redis mode's settings. Redis mode is off while `url`, `cluster` and
/// `sentinel` are unset.
#[derive(Debug, Clone, Default)]
pub struct RedisConfig {
    /// Publishes go through Redis pub/sub (None = in-process).
    pub url: Option<RedisUrl>,
    /// `--redis-cluster`: Redis Cluster mode (exclusive with `url`).
    pub cluster: Option<ClusterSeeds>,
    /// `--redis-url redis+sentinel://…`: a master found through Redis
    /// Sentinel (exclusive with `url` and `cluster`).
    pub sentinel: Option<SentinelUrl>,
    /// `--redis-tls-ca`: the PEM CA certificates a `rediss://` server's
    /// certificate must chain to, instead of the system's roots.
    pub tls_ca: Option<PathBuf>,
    /// Prefix of the Redis channels (and keys) corecast uses.
    pub prefix: String,
    /// Bytes of publishes held while Redis is unreachable.
    pub publish_buffer: usize,
    /// Bytes of cache store writes held (a budget apart from publishes).
    pub cache_write_buffer: usize,
    /// Timeout of a Redis connection attempt.
    pub connect_timeout: Duration,
    /// Time Redis has to answer a command before the connection is dropped.
    pub command_timeout: Duration,
    /// Interval of the readiness canary.
    pub canary_interval: Duration,
    /// Pause after (re)subscribing before buffered publishes are sent.
    pub resume_delay: Duration,
    /// Largest reply accepted from Redis (also bounds the read buffer).
    pub max_reply_size: usize,
}

impl RedisConfig {
    /// Whether Redis mode is on (one Redis, a cluster or a Sentinel-watched
    /// master).
    pub fn enabled(&self) -> bool {
        self.url.is_some() || self.cluster.is_some() || self.sentinel.is_some()
    }

    /// The URL the first connection is opened with: `--redis-url`, the
    /// first cluster seed with the cluster's credentials, or (Sentinel)
    /// the data nodes' URL with a placeholder address, re-pointed to the
    /// master before any connection is opened.
    pub fn first_url(&self) -> Option<RedisUrl> {
        self.url
            .clone()
            .or_else(|| self.cluster.as_ref().map(|c| c.url.clone()))
            .or_else(|| self.sentinel.as_ref().map(|s| s.data.clone()))
    }

    /// Sets `--redis-url`: a `redis[s]+sentinel://` URL selects Sentinel
    /// mode, anything else one Redis (the other is cleared).
    pub fn set_url(&mut self, v: &str) -> Result<(), String> {
        if v.starts_with("redis+sentinel://") || v.starts_with("rediss+sentinel://") {
            self.sentinel = Some(v.parse().map_err(|e| format!("{e}"))?);
            self.url = None;
        } else {
            self.url = Some(v.parse().map_err(|e| format!("{e}"))?);
            self.sentinel = None;
        }
        Ok(())
    }
}
