//! The hooks of a JSON connection's session: its welcome (the connect
//! hook's `connected` frame and server-side channels), and subscribe,
//! publish and rpc asked of the backend before they are done.

use crate::hub::{ConnId, Hub};
use crate::log;
use crate::server::hooks::connect::Welcome;

/// Queues a hook-admitted connection's first frame and subscribes it to
/// the channels the backend listed (checked names; at most
/// `--max-subscriptions`).
pub fn welcome(hub: &mut Hub, id: ConnId, welcome: Welcome) {
    if let Some(frame) = welcome.frame {
        hub.send_to(id, frame);
    }
    for c in &welcome.channels {
        if hub.subscribe(id, c).is_err() {
            log!(
                Debug,
                "server-side subscription refused",
                conn = id,
                channel = c
            );
        }
    }
}
