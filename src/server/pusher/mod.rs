//! Pusher's edge.

pub mod api;
pub mod occupancy;
pub mod presence;
pub mod webhook;
pub mod ws;
