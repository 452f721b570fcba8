//! Pusher webhooks, sans-I/O: the events, each app's bounded queue of
//! them, and the signed request that carries a batch.
//!
//! Pusher's format: `POST` with `X-Pusher-Key` (the app key) and
//! `X-Pusher-Signature` (hex HMAC-SHA256 of the body with the app
//! secret), body `{"time_ms":…,"events":[{"name":"channel_occupied",
//! "channel":…},…]}`. The server SDKs' `webhook(...).isValid()` checks
//! exactly this.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use serde_json::value::RawValue;

use super::config::App;
use super::sign::sign;
use crate::cache::origin::OriginUrl;

/// Most events in one request.
pub const MAX_BATCH: usize = 100;
/// Attempts per batch (the first and four retries) before it is dropped.
pub const MAX_ATTEMPTS: u32 = 5;
/// The wait before the first retry; doubled for each further one
/// (1, 2, 4, 8 s: a batch is given up about 15 s after it first failed).
pub const FIRST_RETRY: Duration = Duration::from_secs(1);

/// One thing that happened, as Pusher names it.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// The channel's first subscriber (on this instance) arrived.
    ChannelOccupied { channel: &'a str },
    /// The channel's last subscriber (on this instance) left.
    ChannelVacated { channel: &'a str },
    /// A user's first connection joined the presence channel.
    MemberAdded { channel: &'a str, user_id: &'a str },
    /// A user's last connection left the presence channel.
    MemberRemoved { channel: &'a str, user_id: &'a str },
    /// A client sent a `client-*` event.
    ClientEvent {
        channel: &'a str,
        event: &'a str,
        data: &'a RawValue,
        socket_id: &'a str,
        user_id: Option<&'a str>,
    },
}

impl Event<'_> {
    /// The event's JSON object.
    pub fn json(&self) -> String {
        let v = match *self {
            Event::ChannelOccupied { channel } => {
                json!({"name": "channel_occupied", "channel": channel})
            }
            Event::ChannelVacated { channel } => {
                json!({"name": "channel_vacated", "channel": channel})
            }
            Event::MemberAdded { channel, user_id } => {
                json!({"name": "member_added", "channel": channel, "user_id": user_id})
            }
            Event::MemberRemoved { channel, user_id } => {
                json!({"name": "member_removed", "channel": channel, "user_id": user_id})
            }
            Event::ClientEvent {
                channel,
                event,
                data,
                socket_id,
                user_id,
            } => {
                // Pusher sends `data` as the string the client sent.
                let data = match serde_json::from_str::<String>(data.get()) {
                    Ok(s) => s,
                    Err(_) => data.get().to_string(),
                };
                let mut v = json!({"name": "client_event", "channel": channel,
                    "event": event, "data": data, "socket_id": socket_id});
                if let Some(u) = user_id {
                    v["user_id"] = json!(u);
                }
                v
            }
        };
        v.to_string()
    }
}

/// An app's events waiting to be sent, at most `max`: past it the oldest
/// is dropped (and counted), so a dead endpoint costs bounded memory.
#[derive(Debug)]
pub struct Queue {
    events: VecDeque<String>,
    max: usize,
}

impl Queue {
    /// An empty queue of at most `max` events.
    pub fn new(max: usize) -> Self {
        Queue {
            events: VecDeque::new(),
            max: max.max(1),
        }
    }

    /// Queues `event`; true if the oldest had to be dropped for it.
    pub fn push(&mut self, event: String) -> bool {
        let dropped = self.events.len() >= self.max;
        if dropped {
            self.events.pop_front();
        }
        self.events.push_back(event);
        dropped
    }

    /// Takes the oldest [`MAX_BATCH`] events (or fewer).
    pub fn take_batch(&mut self) -> Vec<String> {
        let n = self.events.len().min(MAX_BATCH);
        self.events.drain(..n).collect()
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether none are waiting.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// The body carrying `events` (JSON objects) at `time_ms`.
pub fn body(time_ms: u64, events: &[String]) -> String {
    format!(
        "{{\"time_ms\":{time_ms},\"events\":[{}]}}",
        events.join(",")
    )
}

/// The complete request posting `body` to `url` for `app`.
pub fn request(url: &OriginUrl, app: &App, body: &str) -> Bytes {
    let path = if url.base_path.is_empty() {
        "/"
    } else {
        &url.base_path
    };
    let signature = sign(app.secret.expose(), body);
    Bytes::from(format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         X-Pusher-Key: {}\r\nX-Pusher-Signature: {signature}\r\n\
         User-Agent: corecast\r\nContent-Length: {}\r\n\r\n{body}",
        url.authority(),
        app.key,
        body.len()
    ))
}

/// The wait before attempt `attempt` (1 = the first retry).
pub fn backoff(attempt: u32) -> Duration {
    FIRST_RETRY * (1u32 << attempt.saturating_sub(1).min(10))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;

    #[test]
    fn events_are_pushers_objects() {
        let occupied = Event::ChannelOccupied { channel: "c" }.json();
        assert_eq!(occupied, r#"{"channel":"c","name":"channel_occupied"}"#);
        let data = RawValue::from_string(r#""{\"x\":1}""#.into()).unwrap();
        let ev = Event::ClientEvent {
            channel: "presence-r",
            event: "client-typing",
            data: &data,
            socket_id: "1.2",
            user_id: Some("u"),
        };
        let v: serde_json::Value = serde_json::from_str(&ev.json()).unwrap();
        assert_eq!(v["name"], "client_event");
        assert_eq!(v["data"], r#"{"x":1}"#, "the string the client sent");
        assert_eq!(v["user_id"], "u");
        assert_eq!(
            (v["event"].as_str(), v["socket_id"].as_str()),
            (Some("client-typing"), Some("1.2"))
        );
    }

    #[test]
    fn the_queue_is_bounded_and_batches_in_order() {
        let mut q = Queue::new(150);
        for i in 0..160 {
            assert_eq!(q.push(i.to_string()), i >= 150, "{i}");
        }
        let first = q.take_batch();
        assert_eq!(first.len(), MAX_BATCH);
        assert_eq!(first[0], "10", "the oldest went first");
        assert_eq!(q.take_batch().len(), 50);
        assert!(q.is_empty());
    }

    #[test]
    fn requests_are_signed_over_the_body() {
        let app = App {
            id: "1".into(),
            key: "k".into(),
            secret: Secret::new("s"),
            client_events: false,
        };
        let url: OriginUrl = "http://hooks.example:9000/pusher".parse().unwrap();
        let b = body(5, &[Event::ChannelVacated { channel: "c" }.json()]);
        assert_eq!(
            b,
            r#"{"time_ms":5,"events":[{"channel":"c","name":"channel_vacated"}]}"#
        );
        let req = String::from_utf8(request(&url, &app, &b).to_vec()).unwrap();
        assert!(req.starts_with("POST /pusher HTTP/1.1\r\nHost: hooks.example:9000\r\n"));
        assert!(req.contains(&format!("X-Pusher-Signature: {}\r\n", sign("s", &b))));
        assert!(req.contains("X-Pusher-Key: k\r\n"));
        assert!(req.ends_with(&format!("Content-Length: {}\r\n\r\n{b}", b.len())));
    }

    #[test]
    fn retries_back_off() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(4), Duration::from_secs(8));
    }
}
