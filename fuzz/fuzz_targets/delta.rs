//! Fossil deltas over arbitrary bytes: applying any bytes as a delta to
//! any source never panics and never yields more than its bound, and a
//! delta written between two halves of the input applies back to the
//! second half.
#![no_main]
use corecast::delta;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| b as usize).min(data.len());
    let (source, rest) = data.split_at(split);
    if let Ok(out) = delta::apply(source, rest, 4096) {
        assert!(out.len() <= 4096);
    }
    let mut d = Vec::new();
    delta::create(source, rest, &mut d);
    assert_eq!(delta::apply(source, &d, rest.len()).as_deref(), Ok(rest));
});
