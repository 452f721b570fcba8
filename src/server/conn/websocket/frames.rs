//! What a received message means for the connection: control frames are
//! answered here (RFC 6455 5.5: a ping's pong, the close handshake, data
//! after our close), data goes to the connection's session — a Pusher
//! session (`pusher::ws`) or corecast's own protocol (`native`).

use std::rc::Rc;

use bytes::Bytes;

use super::close::ReadEnd;
use crate::hub::{ConnId, ConnKind, ConnState, Hub};
use crate::server::conn::park::Session;
use crate::server::formats;
use crate::server::native::{self, Deferred};
use crate::server::pusher::ws as pusher_ws;
use crate::server::worker::Worker;
use crate::ws::{Message, OpCode};

/// Handles one message from connection `id` (`serial`, `session`): a
/// subscribe that waits for a read from Redis comes back (`Ok(Some)`);
/// `Err`: reading ends.
pub fn on_message(
    w: &Rc<Worker>,
    (id, serial, session): (ConnId, u64, &Session),
    msg: Message,
) -> Result<Option<Box<Deferred>>, ReadEnd> {
    let mut hub = w.hub.borrow_mut();
    let open = hub.conn(id).is_some_and(|c| c.state() == ConnState::Open);
    match msg {
        // RFC 6455 5.5.1: after sending a close frame, data is ignored.
        // Not silently: it is counted, and reading stops here (what the
        // peer sends next is only more of the same; our close frame is
        // queued, and the writer ends the connection after it).
        Message::Text(_) | Message::Binary(_) if !open => {
            hub.stats.messages_not_delivered += 1;
            return Err(ReadEnd::Failed);
        }
        Message::Text(p) => {
            return Ok(on_data(w, &mut hub, (id, serial, session), OpCode::Text, p))
        }
        Message::Binary(p) => {
            return Ok(on_data(
                w,
                &mut hub,
                (id, serial, session),
                OpCode::Binary,
                p,
            ))
        }
        Message::Ping(p) => hub.queue_pong(id, &p),
        Message::Pong(_) => {}
        Message::Close(frame) => {
            hub.peer_closed(id, frame.map(|f| f.code));
            return Err(ReadEnd::CloseReceived);
        }
    }
    Ok(None)
}

/// A data message, to the connection's session.
fn on_data(
    w: &Rc<Worker>,
    hub: &mut Hub,
    who: (ConnId, u64, &Session),
    opcode: OpCode,
    payload: Bytes,
) -> Option<Box<Deferred>> {
    let (id, serial, session) = who;
    // A Pusher connection (`GET /app/{key}`): its session lives in
    // the worker, not in this task, which every connection pays for.
    if hub.conn(id).map(|c| c.kind()) == Some(ConnKind::Ws(formats::PUSHER)) {
        pusher_ws::on_frame(w, hub, id, opcode, &payload);
        return None;
    }
    let channel = session.channel.as_deref();
    native::on_data(
        w,
        hub,
        (id, serial),
        (channel, &session.grants),
        opcode,
        &payload,
    )
}
