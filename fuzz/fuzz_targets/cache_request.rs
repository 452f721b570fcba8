//! The cache's request normaliser over arbitrary heads: parse, traversal
//! check, key, forwarded headers. Never a panic; a path the check lets
//! through has no plain `.`/`..` segment.
#![no_main]
use bytes::Bytes;
use corecast::cache::request::ClientRequest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let head = Bytes::copy_from_slice(data);
    let Ok(req) = ClientRequest::parse(&head) else {
        return;
    };
    if !req.has_dot_segment() {
        assert!(req.path.split(['/', '\\']).all(|s| s != ".." && s != "."));
    }
    let bypass = vec!["cookie".to_string(), "authorization".to_string()];
    let _ = req.has_any(&bypass);
    let _ = req.base_key();
    let _ = req.vary_values(&["accept-language".to_string()]);
    assert!(req.forwarded(&[]).count() <= req.headers.len());
});
