//! How a WebSocket ends: the reader's outcome, the session's end (a
//! Pusher session, presence memberships), the writer finished or stopped,
//! the socket drained after a protocol error.

use std::rc::Rc;

use super::transport::{ReadHalf, WriteHalf};
use crate::hub::ConnId;
use crate::server::native;
use crate::server::pusher::ws as pusher_ws;
use crate::server::worker::Worker;

/// How reading a WebSocket ended.
pub enum ReadEnd {
    /// The peer's close frame arrived (and our echo is queued).
    CloseReceived,
    /// We failed the connection (protocol error), or we are closing and
    /// the peer still sends data; our close is queued and nothing more is
    /// read.
    Failed,
    /// End of stream or a socket error.
    Gone,
    /// Quiet for `--park-after` and parkable: the caller parks it.
    Quiet,
}

/// A WebSocket's reader ended with `outcome`: ends its session, lets
/// the writer finish (or stops it), drains after a protocol error.
pub async fn close(
    w: &Rc<Worker>,
    id: ConnId,
    (outcome, deflate): (ReadEnd, bool),
    rd: ReadHalf,
    writer: Option<monoio::task::JoinHandle<Option<WriteHalf>>>,
) {
    end_session(w, id);
    if !matches!(outcome, ReadEnd::CloseReceived | ReadEnd::Failed) {
        // The peer is gone or silent: unblock a writer stuck on a full socket.
        rd.shutdown();
        w.hub.borrow_mut().abort(id);
    }
    if let Some(writer) = writer {
        let _ = writer.await;
    }
    if matches!(outcome, ReadEnd::Failed) {
        // Our close frame is queued in the kernel (see `drain_close`).
        rd.drain_close().await;
    } else {
        drop(rd);
    }
    if deflate {
        count_compressed(w, false);
    }
}

/// What ends with a WebSocket besides its socket: a Pusher session, its
/// presence memberships (no-ops if it had none).
pub fn end_session(w: &Rc<Worker>, id: ConnId) {
    pusher_ws::close(w, id);
    native::close(w, id);
}

/// Counts open compressed connections (`compression_connections`).
pub fn count_compressed(w: &Worker, open: bool) {
    let mut stats = w.compression.borrow_mut();
    stats.connections = if open {
        stats.connections.saturating_add(1)
    } else {
        stats.connections.saturating_sub(1)
    };
}
