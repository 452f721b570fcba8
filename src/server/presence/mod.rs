//! Presence at the edge (`--presence-channels`); who is in a channel is
//! the sans-I/O `crate::presence`.
//!
//! # Layout
//! - `edge`: presence for the JSON protocol — members on subscribe,
//!   `"presence":true` events, `{"op":"presence"}`, `GET /presence`.
//! - `redis`: Redis mode — the scripts' commands, the refresh/prune loop;
//!   shared with Pusher presence channels (`pusher::presence`).
//! - `owner`: several workers without Redis — each channel's members kept
//!   by its owner worker, joins and leaves sent to it, members asked of it.
//!
//! Imports go one way: `edge` → `redis`, `owner`.

pub mod edge;
pub mod owner;
pub mod redis;
