//! A connection's life.

pub mod accept;
pub mod http;
pub mod park;
pub mod sock;
pub mod upgrade;
pub mod websocket;
