//! HTTP request heads and the WebSocket upgrade checks: any bytes must give
//! a request, "need more", or an error with a status — never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(req)) = corecast::http::parse_request(data, 8192) {
        assert!(req.head_len <= data.len());
        let _ = corecast::http::route(req.method, &req.path, Some("root"));
    }
});
