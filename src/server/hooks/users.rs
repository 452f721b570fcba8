//! The worker's connections by user (a token's `sub` or the connect
//! hook's `user`), for the server API. One entry per native WebSocket
//! with a user, added at the upgrade and removed when it ends: bounded by
//! `--max-connections`.

use std::collections::HashMap;
use std::rc::Rc;

use crate::hooks::api::ConnectionInfo;
use crate::hub::{ConnId, Hub};
use crate::server::formats;

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

/// Whether a connection of `kind` speaks the JSON protocol (`/ws`).
pub fn is_json(kind: crate::hub::ConnKind) -> bool {
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
