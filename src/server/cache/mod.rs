//! The HTTP cache's network edge: `GET`/`HEAD` under `--cache-prefix`
//! served from the store or fetched from `--origin`, and
//! `POST /cache/purge`.
//!
//! A request goes through these steps (decisions are the sans-I/O
//! `cache` modules; this file sequences them around the awaits):
//! 1. a foreground fetch of the same key in flight → wait for it;
//! 2. look the key up (following a `Vary` marker to the variant);
//! 3. fresh → hit; stale within `stale-while-revalidate` → serve it and
//!    refresh once in the background; otherwise
//! 4. join any fetch in flight, or become the one fetch of this worker
//!    (revalidating with the stored validators when there is an entry) —
//!    with several workers, of the process: a key another worker is
//!    fetching is waited for and read from the shared store;
//!    an origin failure falls back to a stale entry within
//!    `stale-if-error`, else 502/504.
//!
//! The store is written after the response is handed to the waiters, in a
//! task of its own; the flight stays visible until then (see `flight`).
//!
//! # Layout
//! - `edge`: [`CacheEdge`] — settings, origin client, store, flights —
//!   and the steps of a request (lookup, fetch, settle, store, refresh).
//! - `job`: one cacheable request, sequenced over those steps.
//! - `purge`: `POST /cache/purge`.
//! - `flight`: coalescing — one fetch per key, waiters, purge epoch.
//! - `claim`: coalescing across the workers of a process (a table of the
//!   keys being fetched).
//! - `origin`: the pooled, bounded HTTP/1.1 client.
//! - `store`: Redis or the memory LRU behind one interface.

mod claim;
mod edge;
mod flight;
mod job;
pub mod origin;
mod purge;
mod store;

use std::rc::Rc;

use crate::cache::request::ClientRequest;
use crate::cache::response::Answer;
use crate::http::{self, HttpError, Route};

pub use edge::{CacheEdge, Incoming, SharedCache};
use job::Job;

/// Answers a cache route: the response, its body shared with the cache.
/// `renew` restarts the connection's request deadline while the answer
/// waits on the origin (the deadline measures the client, not the origin).
pub async fn respond(
    cache: Option<&Rc<CacheEdge>>,
    route: &Route<'_>,
    inc: Incoming,
    renew: &dyn Fn(),
) -> Answer {
    let bad = |status, message| {
        Answer::from(http::error_response(
            &HttpError { status, message },
            inc.keep_alive,
        ))
    };
    let Some(edge) = cache.cloned() else {
        return bad(404, "not found");
    };
    if *route == Route::CachePurge {
        return purge::purge(&edge, inc).await.into();
    }
    let req = match ClientRequest::parse(&inc.head) {
        Ok(r) if r.has_dot_segment() => {
            return bad(400, "dot segments are not allowed in cached paths")
        }
        Ok(r) => r,
        Err(_) => return bad(400, "malformed request"),
    };
    let job = Job {
        base: req.base_key(),
        req: Rc::new(req),
        renew,
        edge: &edge,
        keep_alive: inc.keep_alive,
        head_only: inc.head_only,
    };
    job.serve().await
}
