//! Pusher Channels (protocol 7) at the edge; the protocol itself is the
//! sans-I/O `crate::pusher`.
//!
//! # Layout
//! - `ws`: a Pusher connection's session (`GET /app/{key}`), run by the
//!   WebSocket's reader.
//! - `api`: the signed HTTP API (`/apps/{id}/...`), publishing through
//!   `publish`.
//! - `presence`: `presence-*` channels (members in this core, or through
//!   `presence::redis` in Redis mode).
//! - `occupancy`: which channels are occupied — the listings and
//!   `channel_occupied`/`channel_vacated`, across instances in Redis mode.
//! - `owner`: with several workers and no Redis, what a channel's owner
//!   worker decides: occupancy webhooks, presence events.
//! - `webhook`: each app's webhook queue and sender (the cache's origin
//!   client).
//!
//! Imports go one way: `ws`, `api` → `presence`, `occupancy` → `owner`.

pub mod api;
pub mod occupancy;
pub mod owner;
pub mod presence;
pub mod webhook;
pub mod ws;
