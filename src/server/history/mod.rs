//! Message history at the edge; offsets, epochs and rings are the
//! sans-I/O `crate::history`.
//!
//! # Layout
//! - `recall`: embedded mode — a JSON subscribe's reply and replay,
//!   `GET /history/{channel}`.
//! - `resume`: Redis mode — a JSON subscribe with history (read from
//!   Redis, then subscribe + replay in one step), `/history` from Redis.
//! - `relay`: Redis mode's history actions (deliveries in offset order,
//!   gap notices) applied to the hub.
//! - `owner`: several workers without Redis — the channel's owner keeps
//!   the ring, every other worker a copy; a worker without a copy asks
//!   the owner for the position before a subscribe.
//!
//! Imports go one way: `owner` → `resume` → `recall`, `relay`. The Redis
//! reads themselves are `server::redis`'s (`backfill`).

pub mod owner;
pub mod recall;
pub mod relay;
pub mod resume;

use std::rc::Rc;

use crate::hub::ConnId;
use crate::server::worker::Worker;

/// Runs a subscribe that waited for history to the end (reply queued):
/// read from Redis in Redis mode, else the channel's position from its
/// owner worker.
pub async fn subscribe_deferred(w: &Rc<Worker>, id: ConnId, d: resume::Deferred) {
    match w.redis {
        Some(_) => resume::subscribe(w, id, d).await,
        None => owner::subscribe(w, id, d).await,
    }
}
