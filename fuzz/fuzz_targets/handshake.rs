//! HTTP request heads and the WebSocket upgrade checks: any bytes must give
//! a request, "need more", or an error with a status — never a panic. The
//! same bytes as a `Sec-WebSocket-Extensions` value: an accepted
//! permessage-deflate offer's answer is itself an offer the server accepts
//! with the same window.
#![no_main]
use corecast::ws::extension::negotiate;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(req)) = corecast::http::parse_request(data, 8192) {
        assert!(req.head_len <= data.len());
        let _ = corecast::http::route(req.method, &req.path, Some("root"));
    }
    if let Some(agreed) = negotiate(data.split(|&b| b == b'\n')) {
        let answer = agreed.response_value();
        assert_eq!(negotiate([answer.as_bytes()]), Some(agreed), "{answer}");
    }
});
