//! The HTTP response cache, sans-I/O: everything the cache decides without
//! touching a socket. The monoio side (origin connections, store calls,
//! request coalescing, background revalidation) is `server::cache`.
//!
//! # Layout
//! - [`config`]: [`CacheConfig`], the cache's settings.
//! - [`policy`]: `Cache-Control` parsing (RFC 9111 section 5.2, RFC 5861),
//!   storability and freshness lifetimes, classifying a stored response as
//!   fresh / stale-while-revalidate / stale-if-error / expired.
//! - [`key`]: cache keys — normalized query, `Vary` names and the variant
//!   key built from the request's values of them.
//! - [`date`]: HTTP dates (IMF-fixdate) for `Expires` and `Date`.
//! - [`dns`]: the origin's addresses with a TTL (what a connect should do).
//! - [`entry`]: one stored response (or a `Vary` marker) in a compact
//!   binary encoding, the same bytes in Redis and in memory.
//! - [`memory`]: the embedded store, bounded in bytes, LRU eviction.
//! - [`chunked`]: the `Transfer-Encoding: chunked` decoder.
//! - [`origin`]: the origin URL, request encoding, response heads and body
//!   framing of the origin client.
//! - [`request`]: the client's request head as the cache needs it.
//! - [`response`]: client responses with `Age`, `ETag` and an RFC 9211
//!   `Cache-Status`; `If-None-Match` and 304s.
//! - [`stored`]: an origin response made into an entry (kept headers,
//!   ETag, date, verdict), and an entry refreshed by a 304.
//! - [`purge`]: the purge request body and its bearer-token check.

pub mod chunked;
pub mod config;
pub mod date;
pub mod dns;
pub mod entry;
pub mod key;
pub mod memory;
pub mod origin;
pub mod policy;
pub mod purge;
pub mod request;
pub mod response;
pub mod stored;

pub use config::CacheConfig;

/// Milliseconds since the Unix epoch: entries are shared between instances
/// through Redis, so their timestamps are wall-clock, not monotonic.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
