//! The Pusher protocol's parsers: client frames, the events API's bodies,
//! presence `channel_data`, signin `user_data` and API query strings take
//! any bytes without panicking.
#![no_main]
use corecast::pusher::{api, presence, protocol, sign};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = protocol::parse(data) {
        assert!(!e.message().is_empty());
    }
    let _ = api::parse_events(data);
    let _ = api::parse_batch(data);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(m) = presence::parse_member(text) {
            assert!(!m.user_id.is_empty() && m.user_id.len() <= presence::MAX_USER_ID);
        }
        let _ = protocol::user_id(text);
        let _ = sign::query_pairs(text);
    }
});
