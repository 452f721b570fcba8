//! The JSON control protocol: any text parses to a request or an error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match corecast::control::parse(data) {
        Ok(env) => drop(env),
        Err(e) => assert!(!e.message.is_empty()),
    }
});
