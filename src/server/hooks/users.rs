//! The worker's connections by user (a token's `sub` or the connect
//! hook's `user`), for the server API. One entry per native WebSocket
//! with a user, added at the upgrade and removed when it ends: bounded by
//! `--max-connections`.

use std::collections::HashMap;
use std::rc::Rc;

use crate::hooks::api::{Command, ConnectionInfo, CLOSE_DISCONNECTED};
use crate::hub::{CloseReason, ConnId, Hub};
use crate::server::formats;
use crate::server::hooks::session;
use crate::server::worker::Worker;

/// Connections by user.
#[derive(Debug, Default)]
pub struct Users {
    by_user: HashMap<Rc<str>, Vec<(ConnId, u64)>>,
    /// Each connection's user and public info (presence shows it when
    /// the API subscribes the connection to a presence channel).
    by_conn: HashMap<ConnId, (Rc<str>, Option<Rc<str>>)>,
}

impl Users {
    /// Connection `id` of `user` with public `info`, connected at
    /// `since_ms` (unix ms).
    pub fn add(&mut self, (user, info): (&str, Option<&str>), id: ConnId, since_ms: u64) {
        let user: Rc<str> = Rc::from(user);
        self.by_user
            .entry(user.clone())
            .or_default()
            .push((id, since_ms));
        self.by_conn.insert(id, (user, info.map(Rc::from)));
    }

    /// The public info of connection `id`, if it has a user and info.
    pub fn info(&self, id: ConnId) -> Option<Rc<str>> {
        self.by_conn.get(&id).and_then(|(_, info)| info.clone())
    }

    /// Connection `id` ended (a no-op if it had no user).
    pub fn remove(&mut self, id: ConnId) {
        let Some((user, _)) = self.by_conn.remove(&id) else {
            return;
        };
        if let Some(list) = self.by_user.get_mut(&user) {
            list.retain(|&(c, _)| c != id);
            if list.is_empty() {
                self.by_user.remove(&user);
            }
        }
    }

    /// The connections of `user` and when each connected.
    pub fn of(&self, user: &str) -> Vec<(ConnId, u64)> {
        self.by_user.get(user).cloned().unwrap_or_default()
    }
}

/// Carries out `cmd` on this worker's connections of its user; how many
/// it acted on. Subscribe and unsubscribe act on JSON (`/ws`)
/// connections as their own subscribes would (`subscribed` with the
/// channel's position, presence joined; `unsubscribed`, presence left; no
/// `id`), counting those not yet (still) subscribed; a path-mode
/// connection has a single channel by its URL. `tag` is this instance's
/// (a `DisconnectClient` acts only on the instance its client id names).
pub fn apply(w: &Rc<Worker>, (cmd, tag): (&Command, u32)) -> usize {
    let mine = w.users.borrow().of(cmd.user());
    let mut hub = w.hub.borrow_mut();
    let mut n = 0;
    for (id, _) in mine {
        let json = hub.conn(id).is_some_and(|c| is_json(c.kind()));
        let serial = hub.conn(id).map(|c| c.serial());
        let done = match cmd {
            Command::Disconnect { .. } => {
                let why = "disconnected by the server API";
                hub.close(id, CLOSE_DISCONNECTED, why, CloseReason::Protocol);
                true
            }
            Command::DisconnectClient { client, .. }
                if serial.is_some() && crate::pusher::local_serial(tag, client) == serial =>
            {
                let why = "disconnected by the server API";
                hub.close(id, CLOSE_DISCONNECTED, why, CloseReason::Protocol);
                true
            }
            Command::Subscribe { channel, .. } if json && !hub.is_subscribed(id, channel) => {
                let info = w.users.borrow().info(id);
                let who = (cmd.user(), info.as_deref());
                session::api_subscribe(w, &mut hub, (id, who), channel);
                true
            }
            Command::Unsubscribe { channel, .. } if json => {
                session::server_unsubscribe(w, &mut hub, id, channel)
            }
            _ => false,
        };
        n += usize::from(done);
    }
    n
}

/// This instance's (tagged `tag`) connections of `user`, for
/// `GET /api/connections`.
pub fn list(hub: &Hub, users: &Users, tag: u32, user: &str) -> Vec<ConnectionInfo> {
    let listed = |(id, since): (ConnId, u64)| {
        let serial = hub.conn(id)?.serial();
        Some(ConnectionInfo {
            instance: tag,
            client: crate::pusher::socket_id(tag, serial),
            channels: hub.channels_of(id).iter().map(|c| c.to_string()).collect(),
            connected_since_ms: since,
        })
    };
    users.of(user).into_iter().filter_map(listed).collect()
}

fn is_json(kind: crate::hub::ConnKind) -> bool {
    let json = [
        formats::JSON,
        formats::JSON_DEFLATE,
        formats::JSON_DEFLATE_SMALL,
    ];
    matches!(kind, crate::hub::ConnKind::Ws(f) if json.contains(&f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_leave_with_their_connections() {
        let mut u = Users::default();
        u.add(("ana", None), 1, 10);
        u.add(("ana", Some("{}")), 2, 20);
        u.add(("bo", None), 3, 30);
        assert_eq!(u.info(2).as_deref(), Some("{}"));
        assert_eq!(u.of("ana"), [(1, 10), (2, 20)]);
        u.remove(1);
        u.remove(2);
        u.remove(9);
        assert!(u.of("ana").is_empty());
        assert!(!u.by_user.contains_key("ana"), "no empty lists kept");
        assert_eq!(u.of("bo"), [(3, 30)]);
    }
}
