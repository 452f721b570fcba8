//! The HTTP events API's bodies: `POST /apps/{id}/events` (one event to
//! up to [`MAX_CHANNELS`] channels) and `POST /apps/{id}/batch_events` (up
//! to [`MAX_BATCH`] events), with Pusher's documented limits.

use serde::Deserialize;

use super::protocol::{valid_channel_or_user, MAX_EVENT_NAME};

/// Most channels one `events` call may name (Pusher: 100).
pub const MAX_CHANNELS: usize = 100;
/// Most events in one `batch_events` call (Pusher: 10).
pub const MAX_BATCH: usize = 10;
/// Largest `data` of one event, in bytes (Pusher: 10 KB).
pub const MAX_DATA: usize = 10 * 1024;

/// One event to publish.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Event {
    /// Event name.
    pub name: String,
    /// The payload (a string, as the SDKs send it).
    pub data: String,
    /// Channels to publish on.
    #[serde(default)]
    pub channels: Vec<String>,
    /// A single channel (the other spelling; folded into `channels`).
    #[serde(default)]
    channel: Option<String>,
    /// A connection not to deliver to (`"N.N"`).
    #[serde(default)]
    pub socket_id: Option<String>,
}

#[derive(Deserialize)]
struct Batch {
    batch: Vec<Event>,
}

/// Why a body was refused (answered 400 or 413).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiError {
    /// Not the expected JSON.
    BadJson,
    /// No channel, or more than [`MAX_CHANNELS`].
    Channels,
    /// A channel or event name outside the rules.
    BadName,
    /// More than [`MAX_BATCH`] events.
    BatchTooLarge,
    /// `data` over [`MAX_DATA`].
    DataTooLarge,
}

impl ApiError {
    /// HTTP status and message.
    pub fn answer(self) -> (u16, &'static str) {
        match self {
            ApiError::BadJson => (400, "expected a JSON body with name, data and channels"),
            ApiError::Channels => (400, "an event names 1 to 100 channels"),
            ApiError::BadName => (400, "invalid channel or event name"),
            ApiError::BatchTooLarge => (400, "a batch holds at most 10 events"),
            ApiError::DataTooLarge => (413, "event data is limited to 10 KiB"),
        }
    }
}

fn check(mut e: Event) -> Result<Event, ApiError> {
    if let Some(c) = e.channel.take() {
        e.channels.push(c);
    }
    if e.channels.is_empty() || e.channels.len() > MAX_CHANNELS {
        return Err(ApiError::Channels);
    }
    if e.name.is_empty()
        || e.name.len() > MAX_EVENT_NAME
        || !e.channels.iter().all(|c| valid_channel_or_user(c))
    {
        return Err(ApiError::BadName);
    }
    if e.data.len() > MAX_DATA {
        return Err(ApiError::DataTooLarge);
    }
    Ok(e)
}

/// Parses an `events` body.
pub fn parse_events(body: &[u8]) -> Result<Event, ApiError> {
    check(serde_json::from_slice(body).map_err(|_| ApiError::BadJson)?)
}

/// Parses a `batch_events` body.
pub fn parse_batch(body: &[u8]) -> Result<Vec<Event>, ApiError> {
    let b: Batch = serde_json::from_slice(body).map_err(|_| ApiError::BadJson)?;
    if b.batch.len() > MAX_BATCH {
        return Err(ApiError::BatchTooLarge);
    }
    b.batch.into_iter().map(check).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_and_batches_parse_within_limits() {
        let e = parse_events(br#"{"name":"e","data":"x","channels":["a","b"],"socket_id":"1.2"}"#)
            .unwrap();
        assert_eq!(e.channels, ["a", "b"]);
        assert_eq!(e.socket_id.as_deref(), Some("1.2"));
        let b = parse_batch(br#"{"batch":[{"name":"e","data":"x","channel":"a"}]}"#).unwrap();
        assert_eq!(b[0].channels, ["a"]);
    }

    #[test]
    fn limits_are_enforced() {
        let many: Vec<String> = (0..101).map(|i| format!("c{i}")).collect();
        let body = serde_json::json!({"name":"e","data":"x","channels":many}).to_string();
        assert_eq!(parse_events(body.as_bytes()), Err(ApiError::Channels));
        let big = serde_json::json!({"name":"e","data":"x".repeat(MAX_DATA + 1),"channel":"a"})
            .to_string();
        assert_eq!(parse_events(big.as_bytes()), Err(ApiError::DataTooLarge));
        let ev = serde_json::json!({"name":"e","data":"x","channel":"a"});
        let batch = serde_json::json!({"batch": vec![ev; 11]}).to_string();
        assert_eq!(parse_batch(batch.as_bytes()), Err(ApiError::BatchTooLarge));
        assert_eq!(
            parse_events(br#"{"name":"e","data":"x","channel":"a b"}"#),
            Err(ApiError::BadName)
        );
        assert_eq!(parse_events(b"[]"), Err(ApiError::BadJson));
    }
}
