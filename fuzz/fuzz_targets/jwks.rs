//! The JWKS reader over arbitrary bytes: never panics, and whatever it
//! takes is within its bounds (at most `MAX_PUBLIC_KEYS` keys, each a
//! shape ring accepts).
#![no_main]
use corecast::auth::{jwks, MAX_PUBLIC_KEYS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(set) = jwks::parse(data) {
        assert!(set.keys.len() <= MAX_PUBLIC_KEYS);
    }
});
