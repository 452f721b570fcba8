//! Redis mode's history actions applied to the hub: deliveries with the
//! offset Redis gave them, and gap notices — `{"type":"gap"}` to JSON
//! subscribers, a `gap` event to event streams, close 1012 to path-mode subscribers (their wire has no
//! way to say "you missed something", so they reconnect and reload).

use crate::control::{self, At};
use crate::history::relay::Action;
use crate::hub::{CloseReason, ConnKind, Hub};
use crate::server::formats;
use crate::sse;

/// Close code for path-mode subscribers of a channel whose messages
/// could not all be delivered: 1012 ("service restart": reconnect).
pub const CLOSE_HISTORY_GAP: u16 = 1012;

/// Applies `actions` for `channel`; `skip`: the local publisher of the
/// live message among them (`--exclude-sender`).
pub fn apply(hub: &mut Hub, channel: &str, actions: Vec<Action>, skip: Option<u64>) {
    for a in actions {
        match a {
            Action::Deliver(e, epoch) => {
                let at = (&*epoch, e.offset);
                let msg = (channel, e.opcode, &e.payload[..], e.meta.as_ref());
                hub.publish_in(msg, skip, at);
            }
            Action::Gap { at, lost } => {
                let at = At {
                    epoch: &at.epoch,
                    offset: at.offset,
                };
                gap(hub, channel, at, lost);
            }
        }
    }
}

/// A gap notice; path-mode subscribers are closed only when messages
/// were `lost` (a new epoch alone leaves nothing for them to reload).
/// Event streams get a `gap` event, its id the position to go on from.
fn gap(hub: &mut Hub, channel: &str, at: At<'_>, lost: bool) {
    let frame = control::gap(channel, at);
    let mut event = None;
    for (id, kind) in hub.subscribers(channel) {
        if kind == ConnKind::Ws(formats::JSON) {
            hub.send_to(id, frame.clone());
        } else if kind == ConnKind::Ws(formats::SSE) {
            let pos = Some((at.epoch, at.offset));
            let e = event.get_or_insert_with(|| sse::position_event("gap", channel, pos, None));
            hub.send_to(id, e.clone());
        } else if lost && kind == ConnKind::Ws(formats::PATH) {
            hub.close(
                id,
                CLOSE_HISTORY_GAP,
                "missed messages, reconnect",
                CloseReason::Overloaded,
            );
        }
    }
}
