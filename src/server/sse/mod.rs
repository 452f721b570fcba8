//! Server-Sent Events at the edge (`GET /sse?channel=a&channel=b`): a
//! second wire under the same outbox. A stream is a hub connection of
//! format `formats::SSE` — subscribed like a WebSocket, fed by the same
//! fan-out (one SSE chunk per publish, shared), bounded by the same
//! outbound queue and slow-consumer policy, parked like a WebSocket when
//! quiet — whose peer sends nothing after its request.
//!
//! # Layout
//! - `open`: the request — auth (as a WebSocket subscriber's), its
//!   channels and positions (`crate::sse`), the `200` head, the
//!   subscribes and their first events (`subscribed`, replay, `gap`).
//! - `stream`: the stream's task — the writer spawned, the peer watched
//!   for its leaving, parking after `--park-after` of quiet, and resuming
//!   a parked stream.
//! - `parked`: a parked stream's heartbeat sent where it lies (one
//!   nonblocking send), the stream parked again without a task.
//! - `writer`: the hub's outbox drained to the socket; the WebSocket close
//!   frame the hub queues last (slow consumer, shutdown, token expiry)
//!   becomes a `close` event and the last chunk.
//!
//! Imports go one way: `open` → `stream` → `parked`, `writer`, each through the
//! seams and `conn`'s socket, transport and parking.

mod open;
mod parked;
mod stream;
mod writer;

pub use open::open;
pub use stream::{resume, start};
