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
    /// The channel's first subscriber arrived (in Redis mode: the first
    /// on any instance).
    ChannelOccupied { channel: &'a str },
    /// The channel's last subscriber left (in Redis mode: the last on
    /// every instance, after the grace).
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
    /// Whether it is a channel existence event (`channel_occupied`,
    /// `channel_vacated`): any anonymous client can cause those, so they
    /// are queued apart from the others (see [`Queue`]).
    pub fn is_existence(&self) -> bool {
        matches!(
            self,
            Event::ChannelOccupied { .. } | Event::ChannelVacated { .. }
        )
    }

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

/// An app's events waiting to be sent: channel existence events and the
/// others (members, client events) in two queues of at most `max` each;
/// past it a queue's oldest is dropped (and counted), so a dead endpoint
/// costs bounded memory, and a flood of existence events (anonymous
/// subscribes on fresh channels) never evicts a member or client event.
/// Each event carries a sequence number, so batches interleave the two
/// kinds in the order they happened.
#[derive(Debug)]
pub struct Queue {
    existence: VecDeque<(u64, String)>,
    others: VecDeque<(u64, String)>,
    next: u64,
    max: usize,
}

impl Queue {
    /// An empty queue of at most `max` events of each kind.
    pub fn new(max: usize) -> Self {
        Queue {
            existence: VecDeque::new(),
            others: VecDeque::new(),
            next: 0,
            max: max.max(1),
        }
    }

    /// Queues `event` (an existence event if `existence`); true if the
    /// oldest of its kind had to be dropped for it.
    pub fn push(&mut self, existence: bool, event: String) -> bool {
        let max = self.max;
        let q = if existence {
            &mut self.existence
        } else {
            &mut self.others
        };
        let dropped = q.len() >= max;
        if dropped {
            q.pop_front();
        }
        q.push_back((self.next, event));
        self.next += 1;
        dropped
    }

    /// Takes the oldest [`MAX_BATCH`] events (or fewer), both kinds in
    /// the order they were queued.
    pub fn take_batch(&mut self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.len().min(MAX_BATCH));
        while out.len() < MAX_BATCH {
            let q = match (self.existence.front(), self.others.front()) {
                (Some(a), Some(b)) if a.0 < b.0 => &mut self.existence,
                (Some(_), None) => &mut self.existence,
                (_, Some(_)) => &mut self.others,
                (None, None) => break,
            };
            out.extend(q.pop_front().map(|(_, e)| e));
        }
        out
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.existence.len() + self.others.len()
    }

    /// Whether none are waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
            assert_eq!(q.push(false, i.to_string()), i >= 150, "{i}");
        }
        let first = q.take_batch();
        assert_eq!(first.len(), MAX_BATCH);
        assert_eq!(first[0], "10", "the oldest went first");
        assert_eq!(q.take_batch().len(), 50);
        assert!(q.is_empty());
    }

    #[test]
    fn existence_events_never_evict_the_others() {
        let mut q = Queue::new(2);
        assert!(!q.push(false, "member".into()));
        assert!(!q.push(true, "o1".into()));
        assert!(!q.push(false, "client".into()));
        for i in 2..10 {
            let dropped = q.push(true, format!("o{i}"));
            assert_eq!(dropped, i >= 3, "the flood drops its own: {i}");
        }
        assert_eq!(q.len(), 4);
        assert_eq!(q.take_batch(), ["member", "client", "o8", "o9"]);
        let mut q = Queue::new(10);
        for (i, e) in ["a", "b", "c", "d"].iter().enumerate() {
            q.push(i % 2 == 0, e.to_string());
        }
        assert_eq!(q.take_batch(), ["a", "b", "c", "d"], "in queued order");
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
