//! RFC 6455 WebSocket protocol, sans-I/O: bytes in, frames, messages and
//! replies out. Nothing here owns a socket or a runtime, so the connection
//! code, the load generator, tests and fuzz targets all drive the same
//! plain functions.
//!
//! # Layout
//!
//! - [`handshake`]: the WebSocket part of the HTTP/1.1 upgrade (section 4):
//!   request validation, `Sec-WebSocket-Accept`, the `101` response, and
//!   the client side of the same exchange.
//! - [`frame`]: frame header parsing and encoding (5.2), including the
//!   one-allocation server frames shared by every broadcast subscriber.
//! - [`extension`]: permessage-deflate negotiation (RFC 7692 5, 7.1):
//!   strict offer parsing, the server's answer.
//! - [`deflate`] / [`inflate`]: compressed messages (RFC 7692 7.2): one
//!   shared RSV1 frame per broadcast; inflation bounded while it runs.
//! - [`mask`]: payload masking (5.3), word-at-a-time with a byte-wise
//!   reference.
//! - [`receiver`]: the role-aware state machine that turns a read buffer
//!   into [`Message`]s: masking rules, fragmentation (5.4), control frames
//!   (5.5), size limits.
//! - [`utf8`]: incremental UTF-8 validation of fragmented text (8.1).
//! - [`close`]: close frame bodies and status codes (5.5.1, 7.4).
//! - [`error`]: [`ProtocolError`], one variant per broken rule, each mapped
//!   to the close code to send.
//!
//! Nothing here sends anything on its own: a ping yields
//! [`Message::Ping`] and the caller queues the pong; an error yields a
//! [`ProtocolError`] and the caller sends `encode_close_frame(err.close_code(), ..)`.

#![warn(missing_docs)]
#![deny(unsafe_code)]
// Everything here parses input from the network and will be fuzzed: slice
// indexing and unchecked arithmetic are banned outside tests so that no
// input can panic or overflow.
#![warn(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

pub mod close;
pub mod deflate;
pub mod error;
pub mod extension;
pub mod frame;
pub mod handshake;
pub mod inflate;
pub mod mask;
pub mod receiver;
pub mod utf8;

pub use close::CloseFrame;
pub use error::ProtocolError;
pub use frame::{FrameHeader, OpCode};
pub use handshake::{ClientHandshakeError, HandshakeError};
pub use receiver::{Limits, Message, Receiver, Role};
