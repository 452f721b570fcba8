//! The Pusher Channels protocol (version 7), sans-I/O: apps and limits
//! (`config`), client and server frames (`protocol`), signatures of
//! channel authorizations and HTTP API calls (`sign`), presence members
//! (`presence`), the HTTP events API's bodies (`api`) and what a worker's
//! connections share (`state`). The network
//! edge (`server::pusher`: `ws`, `api`) drives them.
//!
//! Pusher channels live in the hub under internal names
//! ([`internal_channel`]: `pusher/{app id}/{channel}`), which hold a `/`,
//! outside the native protocols' channel charset: native clients cannot
//! reach them, and two apps' channels never meet. What is published on
//! them is the complete Pusher event JSON, so the Pusher wire format's
//! encoder only frames it: one encode per publish for all Pusher
//! subscribers, locally and after the Redis hop.

pub mod api;
pub mod config;
pub mod presence;
pub mod protocol;
pub mod sign;
pub mod state;
pub mod webhook;

pub use config::{App, PusherConfig};
pub use state::PusherState;

/// The hub's name for `channel` of app `app_id`.
pub fn internal_channel(app_id: &str, channel: &str) -> String {
    format!("pusher/{app_id}/{channel}")
}

/// What kind of channel a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// Anyone may subscribe.
    Public,
    /// `private-` (and `private-encrypted-`): signed subscriptions.
    Private,
    /// `presence-`: signed, with member lists.
    Presence,
    /// `#server-to-user-{id}`: only the connection signed in as `id`.
    User,
}

impl ChannelKind {
    /// The kind of `name`.
    pub fn of(name: &str) -> ChannelKind {
        if name.starts_with(protocol::USER_CHANNEL_PREFIX) {
            ChannelKind::User
        } else if name.starts_with("presence-") {
            ChannelKind::Presence
        } else if name.starts_with("private-") {
            ChannelKind::Private
        } else {
            ChannelKind::Public
        }
    }
}

/// A connection's `socket_id`: `"{tag}.{serial}"`, where `tag` names the
/// worker (so an id from another instance is never taken for a local one)
/// and `serial` is the hub's connection serial.
pub fn socket_id(tag: u32, serial: u64) -> String {
    format!("{tag}.{serial}")
}

/// The serial of a `socket_id` made by this worker (`tag`), if it is one.
pub fn local_serial(tag: u32, socket_id: &str) -> Option<u64> {
    let (t, s) = socket_id.split_once('.')?;
    if t.parse::<u32>().ok()? != tag {
        return None;
    }
    s.parse().ok()
}

/// Checks `?protocol=` of an upgrade: `Ok` for 7, `Err(4007)` when missing
/// or another version.
pub fn check_protocol(query: Option<&str>) -> Result<(), u16> {
    let v = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|p| p.strip_prefix("protocol="));
    match v.and_then(|v| v.parse::<u32>().ok()) {
        Some(protocol::PROTOCOL) => Ok(()),
        _ => Err(protocol::code::UNSUPPORTED_PROTOCOL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_ids_round_trip_only_for_this_worker() {
        let id = socket_id(77, 12);
        assert_eq!(id, "77.12");
        assert_eq!(local_serial(77, &id), Some(12));
        assert_eq!(local_serial(78, &id), None);
        assert_eq!(local_serial(77, "x"), None);
    }

    #[test]
    fn only_protocol_7_is_served() {
        assert_eq!(
            check_protocol(Some("client=js&protocol=7&version=8")),
            Ok(())
        );
        for q in [
            None,
            Some(""),
            Some("protocol=6"),
            Some("protocol=x"),
            Some("protocol=8"),
        ] {
            assert_eq!(check_protocol(q), Err(4007), "{q:?}");
        }
    }

    #[test]
    fn kinds_and_internal_names() {
        assert_eq!(ChannelKind::of("presence-x"), ChannelKind::Presence);
        assert_eq!(ChannelKind::of("private-encrypted-x"), ChannelKind::Private);
        assert_eq!(ChannelKind::of("x"), ChannelKind::Public);
        assert_eq!(ChannelKind::of("#server-to-user-1"), ChannelKind::User);
        assert!(!crate::channel::valid_channel_name(&internal_channel(
            "1", "x"
        )));
    }
}
