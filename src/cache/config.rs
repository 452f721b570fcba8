//! The HTTP cache's settings (`--origin` and the `--cache-*` options),
//! owned by the cache; the configuration table fills them in.

use std::time::Duration;

use crate::secret::Secret;

/// The HTTP response cache (`--origin` and the `--cache-*` options).
#[derive(Debug, Clone, Default)]
pub struct CacheConfig {
    /// The origin; without it the cache prefix is not routed.
    pub origin: Option<crate::cache::origin::OriginUrl>,
    /// Paths under this prefix are cached (`GET`/`HEAD`).
    pub prefix: String,
    /// Largest origin response body; larger ones are a 502.
    pub origin_max_body: usize,
    /// Largest origin response head (also bounds chunk extensions and
    /// trailers together).
    pub origin_max_head: usize,
    /// Timeout of one connection attempt to the origin (504).
    pub origin_connect_timeout: Duration,
    /// Time for a whole origin exchange, from waiting for a connection to
    /// the last body byte (504).
    pub origin_timeout: Duration,
    /// How long resolved origin addresses are used before they are
    /// resolved again (in the background, off the worker thread).
    pub origin_dns_ttl: Duration,
    /// Idle keep-alive connections kept per worker.
    pub origin_pool_size: usize,
    /// An idle pooled connection older than this is closed, not reused.
    pub origin_idle_timeout: Duration,
    /// Origin requests in flight at once per worker; more wait.
    pub origin_max_connections: usize,
    /// Bytes of the in-memory store (without Redis).
    pub max_bytes: usize,
    /// Freshness when the origin gives neither `max-age` nor `s-maxage`.
    pub default_ttl: Duration,
    /// Longest wait for another request's fetch of the same key.
    pub coalesce_timeout: Duration,
    /// `stale-while-revalidate` when the origin gives none.
    pub stale_while_revalidate: Duration,
    /// `stale-if-error` when the origin gives none.
    pub stale_if_error: Duration,
    /// Bound of every Redis wait on the request path.
    pub redis_timeout: Duration,
    /// Bearer token of `POST /cache/purge` (unset: purge is not routed).
    pub purge_token: Option<Secret>,
    /// Most keys one prefix purge deletes.
    pub purge_max_keys: usize,
    /// Request headers (lowercase) that make a request personal: it is
    /// neither served from nor stored into the shared cache unless the
    /// response says `public` or `s-maxage`.
    pub bypass_headers: Vec<String>,
}
