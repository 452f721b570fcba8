//! Presence's edge.

pub mod edge;
pub mod redis;
