//! Stored cache values are read back from Redis, which anything may have
//! written: decoding arbitrary bytes yields an entry, a marker or an error,
//! and whatever decodes encodes back to the same bytes.
#![no_main]
use bytes::Bytes;
use corecast::cache::entry::{decode, encode, encode_marker, Stored};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    match decode(bytes.clone()) {
        Ok(Stored::Response(e)) => assert_eq!(encode(&e), bytes),
        Ok(Stored::Vary(m)) => assert_eq!(encode_marker(&m), bytes),
        Err(_) => {}
    }
});
