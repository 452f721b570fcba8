//! Presence at the edge (`--presence-channels`); who is in a channel is
//! the sans-I/O `crate::presence`.
//!
//! # Layout
//! - `edge`: presence for the JSON protocol — members on subscribe,
//!   `"presence":true` events, `{"op":"presence"}`, `GET /presence`.
//! - `redis`: Redis mode — the scripts' commands, the refresh/prune loop;
//!   shared with Pusher presence channels (`pusher::presence`).
//!
//! Imports go one way: `edge` → `redis`.

pub mod edge;
pub mod redis;
