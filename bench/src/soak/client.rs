//! One soak client of any kind (JSON, path mode, Pusher): what it counts as
//! a message, how many it expects, and how it leaves.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::ws::{abort, hang_up, Msg, Open, Ws};
use crate::wire::FastRng;

/// Longest wait for one reply (an ack, a close) or for a subscriber's
/// expected messages.
pub const REPLY_DEADLINE: Duration = Duration::from_secs(5);

/// The protocol a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `GET /ws`, the JSON control protocol.
    Json,
    /// `GET /ws/{channel}`: raw frames.
    Path,
    /// `GET /app/{key}`: the Pusher protocol.
    Pusher,
}

/// How a client leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// The close handshake.
    Close,
    /// An RST (`SO_LINGER` 0).
    Abort,
    /// A FIN without a close frame.
    HangUp,
    /// Unsubscribes from these channels (and waits for the answers), then
    /// closes.
    Unsubscribe(Vec<String>),
    /// Bytes that are not a WebSocket frame (a reserved opcode): the
    /// server closes with 1002; the client waits for the end.
    Garbage,
    /// Text the protocol does not understand (answered with an error, the
    /// connection stays), then an RST.
    Nonsense,
}

/// A connected client.
pub struct Client {
    /// For error messages.
    pub name: String,
    /// Its protocol.
    pub kind: Kind,
    /// Its socket.
    pub ws: Ws,
    /// Messages it must receive this cycle (`None`: whatever comes).
    pub expect: Option<u64>,
    /// Messages it received.
    pub got: u64,
    /// How it leaves.
    pub exit: Exit,
    /// The Pusher `socket_id` (Pusher clients).
    pub socket_id: String,
}

impl Client {
    /// Opens a client of `kind` at `path`.
    pub fn open(
        addr: SocketAddr,
        (kind, path): (Kind, &str),
        how: Open,
        exit: Exit,
        rng: &mut FastRng,
    ) -> Result<Client, String> {
        let ws = Ws::open(addr, path, how, rng).map_err(|e| format!("open {path}: {e}"))?;
        let mut c = Client {
            name: path.to_string(),
            kind,
            ws,
            expect: None,
            got: 0,
            exit,
            socket_id: String::new(),
        };
        if kind == Kind::Pusher {
            let hello = c.await_json(|v| v["event"] == "pusher:connection_established")?;
            let data: Value = serde_json::from_str(hello["data"].as_str().unwrap_or("{}"))
                .map_err(|e| format!("{}: connection_established: {e}", c.name))?;
            c.socket_id = data["socket_id"].as_str().unwrap_or_default().to_string();
        }
        Ok(c)
    }

    /// Sends a JSON value as a text frame.
    pub fn send(&mut self, v: &Value) -> Result<(), String> {
        self.ws
            .send_text(&v.to_string())
            .map_err(|e| format!("{}: send: {e}", self.name))
    }

    /// The next JSON text for which `want` holds, counting the messages
    /// that pass by; an error by the deadline.
    pub fn await_json(&mut self, want: impl Fn(&Value) -> bool) -> Result<Value, String> {
        let deadline = Instant::now() + REPLY_DEADLINE;
        let kind = self.kind;
        let mut passed = 0;
        let found = self.ws.next_json(deadline, |v| {
            if is_message(kind, v) {
                passed += 1;
            }
            want(v)
        });
        self.got += passed;
        match found {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(format!(
                "{}: no expected reply within {REPLY_DEADLINE:?}",
                self.name
            )),
            Err(e) => Err(format!("{}: {e}", self.name)),
        }
    }

    /// JSON-protocol subscribe (`extra` merged in); returns the ack.
    pub fn subscribe(&mut self, channel: &str, extra: Value) -> Result<Value, String> {
        let mut req = json!({"op": "subscribe", "channel": channel});
        if let (Some(r), Value::Object(m)) = (req.as_object_mut(), extra) {
            r.extend(m);
        }
        self.send(&req)?;
        let ack = self
            .await_json(|v| v["channel"] == channel && v["type"] != "message")
            .map_err(|e| format!("subscribe {channel}: {e}"))?;
        match ack["type"].as_str() {
            Some("subscribed") => Ok(ack),
            _ => Err(format!("{}: subscribe {channel}: {ack}", self.name)),
        }
    }

    /// Pusher subscribe with an optional signature and channel data.
    pub fn pusher_subscribe(
        &mut self,
        channel: &str,
        auth: Option<String>,
        channel_data: Option<String>,
    ) -> Result<(), String> {
        let data = json!({"channel": channel, "auth": auth, "channel_data": channel_data});
        self.send(&json!({"event": "pusher:subscribe", "data": data}))?;
        let ack = self.await_json(|v| {
            v["channel"] == channel
                && matches!(
                    v["event"].as_str(),
                    Some("pusher_internal:subscription_succeeded" | "pusher:subscription_error")
                )
        });
        let ack = ack.map_err(|e| format!("subscribe {channel}: {e}"))?;
        match ack["event"].as_str() {
            Some("pusher_internal:subscription_succeeded") => Ok(()),
            _ => Err(format!("{}: subscribe {channel}: {ack}", self.name)),
        }
    }

    /// Reads until the expected messages are in (or the deadline; those
    /// missing are the caller's to count). Without an expectation, takes
    /// only what is already there.
    pub fn drain(&mut self) -> Result<(), String> {
        let wait = if self.expect.is_some() {
            REPLY_DEADLINE
        } else {
            Duration::from_millis(1)
        };
        let deadline = Instant::now() + wait;
        while self.expect.is_none_or(|n| self.got < n) {
            match self.ws.next(deadline) {
                Ok(Some(m)) => self.got += u64::from(counts(self.kind, &m)),
                Ok(None) => break,
                Err(e) => return Err(format!("{}: read: {e}", self.name)),
            }
        }
        Ok(())
    }

    /// Leaves the way it was told to.
    pub fn leave(mut self) -> Result<(), String> {
        let deadline = Instant::now() + REPLY_DEADLINE;
        let name = self.name.clone();
        let fail = |e: io::Error| format!("{name}: leaving: {e}");
        match std::mem::replace(&mut self.exit, Exit::Close) {
            Exit::Close => self.ws.close(deadline).map_err(fail),
            Exit::Abort => abort(self.ws.into_stream()).map_err(fail),
            Exit::HangUp => {
                hang_up(self.ws.into_stream());
                Ok(())
            }
            Exit::Unsubscribe(channels) => {
                for ch in &channels {
                    self.unsubscribe(ch)?;
                }
                self.ws.close(deadline).map_err(fail)
            }
            Exit::Garbage => {
                // FIN + opcode 0xF (reserved), then noise.
                self.ws.send_raw(b"\x8f\x85garbage!!").map_err(fail)?;
                self.ws.await_end(deadline).map_err(fail)
            }
            Exit::Nonsense => {
                self.ws.send_text("{not json").map_err(fail)?;
                self.await_json(|v| v["type"] == "error" || v["event"] == "pusher:error")?;
                abort(self.ws.into_stream()).map_err(fail)
            }
        }
    }

    fn unsubscribe(&mut self, channel: &str) -> Result<(), String> {
        match self.kind {
            Kind::Json => {
                self.send(&json!({"op": "unsubscribe", "channel": channel}))?;
                self.await_json(|v| v["type"] == "unsubscribed" && v["channel"] == channel)?;
            }
            // Pusher does not answer an unsubscribe.
            _ => {
                self.send(&json!({"event": "pusher:unsubscribe", "data": {"channel": channel}}))?
            }
        }
        Ok(())
    }
}

/// Whether `m` is a published message for a client of `kind`.
fn counts(kind: Kind, m: &Msg) -> bool {
    match (kind, m) {
        (Kind::Path, Msg::Text(_) | Msg::Binary(_)) => true,
        (_, Msg::Text(t)) => serde_json::from_str(t).is_ok_and(|v| is_message(kind, &v)),
        _ => false,
    }
}

/// A JSON message delivery, or a Pusher event that is not the protocol's
/// own (`pusher:…`, `pusher_internal:…`).
fn is_message(kind: Kind, v: &Value) -> bool {
    match kind {
        Kind::Json => v["type"] == "message",
        Kind::Pusher => v["event"]
            .as_str()
            .is_some_and(|e| !e.starts_with("pusher")),
        Kind::Path => true,
    }
}
