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
//!
//! Imports go one way: `resume` → `recall`, `relay`. The Redis reads
//! themselves are `server::redis`'s (`backfill`).

pub mod recall;
pub mod relay;
pub mod resume;
