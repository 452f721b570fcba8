//! A publication's meta as Redis carries it (`Meta::from_wire`, the JSON
//! inside the `0xCC 0x03` envelope) over arbitrary bytes: reading never
//! panics, what is read keeps its bounds, and its wire form reads back
//! the same.
#![no_main]
use corecast::meta::{Meta, MAX_ID, MAX_KEY};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Meta::from_wire(data) {
        assert!(m.key().is_none_or(|k| !k.is_empty() && k.len() <= MAX_KEY));
        assert!(m.id().is_none_or(|i| !i.is_empty() && i.len() <= MAX_ID));
        assert!(m.tags().is_some() || m.key().is_some() || m.delta() || m.id().is_some());
        assert_eq!(Meta::from_wire(m.wire().as_bytes()).as_ref(), Ok(&m));
    }
});
