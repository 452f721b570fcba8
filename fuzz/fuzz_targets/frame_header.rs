//! Frame headers: a parsed header re-encodes to the same bytes it came from
//! (we only accept what we could have written, modulo non-minimal lengths).
#![no_main]
use corecast::ws::frame::{FrameHeader, MAX_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((h, len))) = FrameHeader::parse(data) {
        assert!(len <= data.len() && len <= MAX_HEADER_LEN);
        let mut out = [0u8; MAX_HEADER_LEN];
        let n = h.encode(&mut out);
        let (again, n2) = FrameHeader::parse(&out[..n]).unwrap().unwrap();
        assert_eq!((again, n2), (h, n));
    }
});
