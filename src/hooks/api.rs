//! The server API's commands (sans-I/O): the application acts on its
//! users' connections — on every instance in Redis mode, where the same
//! JSON goes to all of them through one control channel.
//!
//! ```text
//! POST /api/disconnect  {"user":"42"}                    close 4005 on every connection of 42
//! POST /api/disconnect  {"user":"42","client":"7.19"}    close 4005 on that one connection of 42
//! POST /api/unsubscribe {"user":"42","channel":"doc.9"}  its JSON connections leave doc.9
//! POST /api/subscribe   {"user":"42","channel":"doc.9"}  its JSON connections join doc.9
//! GET  /api/connections?user=42                          the cluster's connections of 42
//! ```
//!
//! In Redis mode `GET /api/connections` is a request and replies: the
//! asking instance publishes [`Command::Connections`] on the control
//! channel; every instance answers with its connections of the user on
//! the asker's reply channel ([`reply_channel`]), one bounded
//! [`ConnectionsAnswer`] each; the asker gathers them ([`Gathering`])
//! until every instance Redis delivered the request to has answered or
//! its deadline passes, and says which answered and how many did not.

use std::collections::{BTreeSet, HashMap};
use std::task::Waker;

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
    /// List the user's connections: every instance answers on
    /// `reply_channel(reply_to)` with request `id`.
    Connections {
        /// The user.
        user: String,
        /// The asking instance's tag.
        reply_to: u32,
        /// The asker's request number.
        id: u64,
    },
}

impl Command {
    /// The user it acts on.
    pub fn user(&self) -> &str {
        match self {
            Command::Disconnect { user }
            | Command::DisconnectClient { user, .. }
            | Command::Unsubscribe { user, .. }
            | Command::Subscribe { user, .. }
            | Command::Connections { user, .. } => user,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// Largest answer one instance sends (its connections of the user past
/// it are left out and the answer says `truncated`); also the largest
/// one the asker reads.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Most answers one request gathers (instances past it are counted in
/// `overflow`, their connections not listed): with
/// [`MAX_ANSWER_BYTES`], 8 MiB per request at most.
pub const MAX_ANSWERS: usize = 128;

/// One instance's answer to [`Command::Connections`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionsAnswer {
    /// The request it answers.
    pub id: u64,
    /// The answering instance's tag.
    pub instance: u32,
    /// Its connections of the user (as many as fit).
    pub connections: Vec<ConnectionInfo>,
    /// Whether some were left out to stay under [`MAX_ANSWER_BYTES`].
    pub truncated: bool,
}

/// The reply channel of the instance tagged `tag` (`!`: no client can
/// name it).
pub fn reply_channel(tag: u32) -> String {
    format!("{CONTROL_CHANNEL}.{tag}")
}

/// Instance `instance`'s answer to request `id`: as many of `conns` as
/// fit in [`MAX_ANSWER_BYTES`], in order.
pub fn encode_answer(id: u64, instance: u32, conns: Vec<ConnectionInfo>) -> Vec<u8> {
    serde_json::to_vec(&answer(id, instance, conns)).expect("answers serialize")
}

/// Instance (or worker) `instance`'s answer to request `id`: as many of
/// `conns` as fit in [`MAX_ANSWER_BYTES`] encoded, in order.
pub fn answer(id: u64, instance: u32, conns: Vec<ConnectionInfo>) -> ConnectionsAnswer {
    // The envelope's own fields take well under 128 bytes.
    let mut budget = MAX_ANSWER_BYTES - 128;
    let mut kept = Vec::with_capacity(conns.len());
    let total = conns.len();
    for c in conns {
        let len = serde_json::to_vec(&c).map_or(usize::MAX, |v| v.len() + 1);
        if len > budget {
            break;
        }
        budget -= len;
        kept.push(c);
    }
    ConnectionsAnswer {
        id,
        instance,
        truncated: kept.len() < total,
        connections: kept,
    }
}

/// An answer heard on a reply channel; `None` if it is not one or is
/// larger than any instance sends.
pub fn decode_answer(payload: &[u8]) -> Option<ConnectionsAnswer> {
    if payload.len() > MAX_ANSWER_BYTES {
        return None;
    }
    serde_json::from_slice(payload).ok()
}

/// One `GET /api/connections` request's answers so far.
#[derive(Debug, Default)]
pub struct Gathering {
    /// How many instances Redis delivered the request to (its PUBLISH
    /// count), once known.
    pub expected: Option<u64>,
    answers: Vec<ConnectionsAnswer>,
    heard: BTreeSet<u32>,
    overflow: u64,
}

impl Gathering {
    /// Adds an answer (a second one from the same instance is dropped).
    pub fn add(&mut self, a: ConnectionsAnswer) {
        if !self.heard.insert(a.instance) {
            return;
        }
        match self.answers.len() < MAX_ANSWERS {
            true => self.answers.push(a),
            false => self.overflow += 1,
        }
    }

    /// Whether every instance the request reached has answered.
    pub fn complete(&self) -> bool {
        self.expected.is_some_and(|n| self.heard.len() as u64 >= n)
    }

    /// The response body: every listed connection, and which instances
    /// answered (`answered`, by tag), how many were asked (`asked`: the
    /// PUBLISH count, which includes any other subscriber of the control
    /// channel) and how many did not answer in time (`missing`).
    pub fn into_json(self, user: &str) -> serde_json::Value {
        let heard = self.heard.len() as u64;
        let asked = self.expected.unwrap_or(heard);
        let truncated: Vec<u32> = self
            .answers
            .iter()
            .filter(|a| a.truncated)
            .map(|a| a.instance)
            .collect();
        let answered: Vec<u32> = self.answers.iter().map(|a| a.instance).collect();
        let connections: Vec<ConnectionInfo> = self
            .answers
            .into_iter()
            .flat_map(|a| a.connections)
            .collect();
        serde_json::json!({
            "user": user,
            "connections": connections,
            "instances": {
                "asked": asked,
                "answered": answered,
                "missing": asked.saturating_sub(heard),
                "truncated": truncated,
                "overflow": self.overflow,
            },
        })
    }
}

/// Most `GET /api/connections` waiting for answers at once on one
/// instance; more are answered `503`.
pub const MAX_WAITING: usize = 64;

/// The `GET /api/connections` requests of this instance waiting for
/// answers, by number, each with the waker of its handler.
#[derive(Default)]
pub struct Waits {
    next: u64,
    open: HashMap<u64, (Gathering, Option<Waker>)>,
}

impl Waits {
    /// A new request's number; `None` when [`MAX_WAITING`] wait already.
    pub fn open(&mut self) -> Option<u64> {
        if self.open.len() >= MAX_WAITING {
            return None;
        }
        self.next += 1;
        self.open.insert(self.next, Default::default());
        Some(self.next)
    }

    /// An instance's answer: kept if its request still waits, which is
    /// woken.
    pub fn answer(&mut self, a: ConnectionsAnswer) {
        let Some((g, waker)) = self.open.get_mut(&a.id) else {
            return; // Late (past its deadline) or not ours: dropped.
        };
        g.add(a);
        if let Some(waker) = waker.take() {
            waker.wake();
        }
    }

    /// Request `id`'s answers so far and its handler's waker.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut (Gathering, Option<Waker>)> {
        self.open.get_mut(&id)
    }

    /// Request `id` is done: its answers (later ones are dropped).
    pub fn close(&mut self, id: u64) -> Option<Gathering> {
        self.open.remove(&id).map(|(g, _)| g)
    }
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
        let c = Command::Connections {
            user: "42".into(),
            reply_to: 7,
            id: 3,
        };
        assert_eq!(decode(&encode(&c)), Some(c));
        assert_eq!(reply_channel(7), "!api.7");
    }

    fn conn(instance: u32, channels: usize) -> ConnectionInfo {
        ConnectionInfo {
            instance,
            client: format!("{instance}.1"),
            channels: (0..channels).map(|i| format!("channel-{i:05}")).collect(),
            connected_since_ms: 1,
        }
    }

    #[test]
    fn waits_are_bounded_and_drop_late_answers() {
        let mut w = Waits::default();
        let ids: Vec<u64> = (0..MAX_WAITING).map(|_| w.open().unwrap()).collect();
        assert_eq!(w.open(), None, "the bound");
        let first = ids[0];
        let answer = |id| ConnectionsAnswer {
            id,
            instance: 4,
            connections: Vec::new(),
            truncated: false,
        };
        w.answer(answer(first));
        let g = w.close(first).unwrap();
        assert_eq!(
            g.into_json("u")["instances"]["answered"],
            serde_json::json!([4])
        );
        w.answer(answer(first));
        assert!(w.close(first).is_none(), "a late answer is dropped");
        assert!(w.open().is_some(), "room again once one is done");
    }

    #[test]
    fn answers_stay_under_their_bound() {
        let small = encode_answer(1, 5, vec![conn(5, 2), conn(5, 3)]);
        let a = decode_answer(&small).unwrap();
        assert_eq!((a.connections.len(), a.truncated), (2, false));
        // 40 connections of 100 channels each: about 160 KiB in all.
        let big = encode_answer(2, 5, (0..40).map(|_| conn(5, 100)).collect());
        assert!(big.len() <= MAX_ANSWER_BYTES, "{}", big.len());
        let a = decode_answer(&big).unwrap();
        assert!(a.truncated && a.connections.len() < 40 && !a.connections.is_empty());
        assert_eq!(decode_answer(&vec![b' '; MAX_ANSWER_BYTES + 1]), None);
        assert_eq!(decode_answer(b"{}"), None);
    }

    #[test]
    fn a_gathering_says_who_answered_and_who_did_not() {
        let answer = |instance, id| ConnectionsAnswer {
            id,
            instance,
            connections: vec![conn(instance, 1)],
            truncated: false,
        };
        let mut g = Gathering::default();
        g.add(answer(1, 9));
        assert!(!g.complete(), "the count is not known yet");
        g.expected = Some(3);
        g.add(answer(1, 9));
        g.add(answer(2, 9));
        assert!(!g.complete(), "one instance to go (the repeat is dropped)");
        let j = g.into_json("42");
        assert_eq!(j["connections"].as_array().unwrap().len(), 2);
        assert_eq!(j["instances"]["answered"], serde_json::json!([1, 2]));
        assert_eq!(
            (&j["instances"]["asked"], &j["instances"]["missing"]),
            (&3.into(), &1.into())
        );
        let mut g = Gathering {
            expected: Some(MAX_ANSWERS as u64 + 2),
            ..Default::default()
        };
        for i in 0..MAX_ANSWERS as u32 + 2 {
            g.add(answer(i, 1));
        }
        assert!(g.complete());
        let j = g.into_json("42");
        assert_eq!(j["instances"]["overflow"], 2);
        assert_eq!(j["instances"]["missing"], 0);
    }
}
