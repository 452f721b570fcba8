//! A connection's life, from accept to close: the HTTP phase, the
//! upgrade, the WebSocket phase and parking. What a request or a message
//! means belongs to the features: the HTTP router (`http`) hands each
//! route to its folder, a WebSocket hands its data to its session
//! (`native`, `pusher::ws`).
//!
//! # Layout
//! - `accept`: the accept loop.
//! - `http`: one connection from accept: HTTP requests (head → route →
//!   dispatch) until one upgrades.
//! - `upgrade`: the WebSocket upgrade (auth, `101`, the wire format).
//! - `websocket/`: the WebSocket phase, by job, over the `transport` seam.
//! - `park`: the parked connections (fds in the worker's epoll set, the
//!   wakers that resume them).
//! - `sock`: the split socket and how the worker reads it.
//! - `stream`: the HTTP phase's bytes, plain or TLS (`server::tls`).
//!
//! Imports go one way: `accept` → `http` → `upgrade`, `websocket` →
//! `stream` → `park`, `sock`.

pub mod accept;
pub mod http;
pub mod park;
pub mod sock;
pub mod stream;
pub mod upgrade;
pub mod websocket;
