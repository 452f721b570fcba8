//! Redis mode's settings (`--redis-url` and the `--redis-*` options),
//! owned by the Redis layer; the configuration table fills them in.

use std::time::Duration;

use super::url::RedisUrl;

/// Redis mode's settings. Redis mode is off while `url` is unset.
#[derive(Debug, Clone, Default)]
pub struct RedisConfig {
    /// Publishes go through Redis pub/sub (None = in-process).
    pub url: Option<RedisUrl>,
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
