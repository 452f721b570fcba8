//! A hook backend's answer over arbitrary bytes: never panics, and what
//! it takes is within its bounds (close codes 3000-4999 and reasons that
//! fit a close frame; a connect result's user, info and channels).
#![no_main]
use corecast::hooks::reply::{self, Answer, RpcResult, MAX_REASON, MAX_USER};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Answer::Result(r)) = reply::parse_connect(data, 8) {
        assert!(r.user.len() <= MAX_USER && r.channels.len() <= 8);
    }
    if let Ok(Answer::Disconnect { code, reason }) = reply::parse::<RpcResult>(data) {
        assert!((3000..=4999).contains(&code) && reason.len() <= MAX_REASON);
    }
});
