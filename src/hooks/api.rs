//! The server API's commands (sans-I/O): the application acts on its
//! users' connections — on every instance in Redis mode, where the same
//! JSON goes to all of them through one control channel.
//!
//! ```text
//! POST /api/disconnect  {"user":"42"}                    close 4005 on every connection of 42
//! POST /api/disconnect  {"user":"42","client":"7.19"}    close 4005 on that one connection of 42
//! POST /api/unsubscribe {"user":"42","channel":"doc.9"}  its JSON connections leave doc.9
//! POST /api/subscribe   {"user":"42","channel":"doc.9"}  its JSON connections join doc.9
//! GET  /api/connections?user=42                          this instance's connections of 42
//! ```

use serde::{Deserialize, Serialize};

use crate::channel::valid_channel_name;

/// The close code of a connection the server API disconnects.
pub const CLOSE_DISCONNECTED: u16 = 4005;

/// The Redis channel every instance hears commands on (`!`: outside the
/// native charset, no client can subscribe or publish to it).
pub const CONTROL_CHANNEL: &str = "!api";

/// One command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// Close every connection of `user` ([`CLOSE_DISCONNECTED`]).
    Disconnect {
        /// The user.
        user: String,
    },
    /// Close one connection of `user`: `client` is its id
    /// (`{instance}.{serial}`, as the hooks and `GET /api/connections`
    /// name it); only the instance it names acts.
    DisconnectClient {
        /// The user.
        user: String,
        /// The connection's id.
        client: String,
    },
    /// Unsubscribe the user's JSON connections from `channel`.
    Unsubscribe {
        /// The user.
        user: String,
        /// The channel.
        channel: String,
    },
    /// Subscribe the user's JSON connections to `channel`.
    Subscribe {
        /// The user.
        user: String,
        /// The channel.
        channel: String,
    },
}

impl Command {
    /// The user it acts on.
    pub fn user(&self) -> &str {
        match self {
            Command::Disconnect { user }
            | Command::DisconnectClient { user, .. }
            | Command::Unsubscribe { user, .. }
            | Command::Subscribe { user, .. } => user,
        }
    }
}

/// The users-index key of a Pusher connection signed in as `user` on app
/// `app_id` (`pusher:signin`): `POST /apps/{id}/users/{user}/terminate_connections`
/// disconnects it like `/api/disconnect` does a native user. The NUL
/// keeps it apart from native users.
pub fn pusher_user(app_id: &str, user: &str) -> String {
    format!("\0pusher\0{app_id}\0{user}")
}

/// A request the API refuses: status and reason.
pub type Refusal = (u16, &'static str);

#[derive(Deserialize)]
struct Body {
    user: Option<String>,
    channel: Option<String>,
    client: Option<String>,
}

/// The command of `POST /api/{name}` with `body`.
pub fn parse(name: &str, body: &[u8]) -> Result<Command, Refusal> {
    let b: Body = serde_json::from_slice(body).map_err(|_| (400, "body must be a JSON object"))?;
    let user = b
        .user
        .filter(|u| !u.is_empty())
        .ok_or((400, "missing \"user\""))?;
    let channel = || match b.channel {
        Some(c) if valid_channel_name(&c) => Ok(c),
        Some(_) => Err((400, "invalid channel name")),
        None => Err((400, "missing \"channel\"")),
    };
    match name {
        "disconnect" => Ok(match b.client {
            Some(client) => Command::DisconnectClient { user, client },
            None => Command::Disconnect { user },
        }),
        "unsubscribe" => Ok(Command::Unsubscribe {
            user,
            channel: channel()?,
        }),
        "subscribe" => Ok(Command::Subscribe {
            user,
            channel: channel()?,
        }),
        _ => Err((404, "not found")),
    }
}

/// A command as the control channel carries it.
pub fn encode(cmd: &Command) -> Vec<u8> {
    serde_json::to_vec(cmd).expect("commands serialize")
}

/// A command heard on the control channel; `None` if it is not one
/// (counted and dropped by the edge).
pub fn decode(payload: &[u8]) -> Option<Command> {
    serde_json::from_slice(payload).ok()
}

/// One connection in `GET /api/connections`.
#[derive(Debug, Serialize)]
pub struct ConnectionInfo {
    /// The instance's tag (the first part of `client`).
    pub instance: u32,
    /// The connection's id (as the hooks' `client`).
    pub client: String,
    /// Its channels.
    pub channels: Vec<String>,
    /// When it connected (unix milliseconds).
    pub connected_since_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_api_routes_are_four_exact_paths() {
        let r = crate::http::server_api_route(crate::http::Method::Post, "/api/disconnect");
        assert_eq!(r, Some(Ok(crate::http::Route::ServerApi("disconnect"))));
        let r = crate::http::server_api_route(crate::http::Method::Get, "/api/connections");
        assert_eq!(r, Some(Ok(crate::http::Route::ServerApi("connections"))));
        let r = crate::http::server_api_route(crate::http::Method::Get, "/api/subscribe");
        assert_eq!(
            r,
            Some(Err(crate::http::HttpError {
                status: 405,
                message: "method not allowed"
            }))
        );
        assert_eq!(
            crate::http::server_api_route(crate::http::Method::Get, "/api/users/7"),
            None
        );
        assert_eq!(
            crate::http::server_api_route(crate::http::Method::Post, "/apix/disconnect"),
            None
        );
    }

    #[test]
    fn commands_parse_and_round_trip() {
        let c = parse("subscribe", br#"{"user":"42","channel":"doc.9"}"#).unwrap();
        assert_eq!(
            c,
            Command::Subscribe {
                user: "42".into(),
                channel: "doc.9".into()
            }
        );
        assert_eq!(decode(&encode(&c)), Some(c));
        assert_eq!(
            parse("disconnect", br#"{"user":""}"#),
            Err((400, "missing \"user\""))
        );
        assert_eq!(
            parse("subscribe", br#"{"user":"1"}"#),
            Err((400, "missing \"channel\""))
        );
        assert_eq!(
            parse("unsubscribe", br#"{"user":"1","channel":"!api"}"#),
            Err((400, "invalid channel name"))
        );
        assert_eq!(
            parse("explode", br#"{"user":"1"}"#),
            Err((404, "not found"))
        );
        assert_eq!(
            parse("disconnect", b"nope"),
            Err((400, "body must be a JSON object"))
        );
        assert_eq!(decode(b"{\"op\":\"reboot\"}"), None);
        let one = parse("disconnect", br#"{"user":"1","client":"7.19"}"#).unwrap();
        assert_eq!(
            one,
            Command::DisconnectClient {
                user: "1".into(),
                client: "7.19".into()
            }
        );
        assert_eq!(decode(&encode(&one)), Some(one));
    }
}
