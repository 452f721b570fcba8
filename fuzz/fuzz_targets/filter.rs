//! A tag filter and tags over arbitrary bytes: parsing never panics, what
//! is taken is within its bounds, and evaluating it against any tags
//! (those bytes read as tags, and fixed ones) never panics.
#![no_main]
use corecast::filter::{Filter, Tags};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let tags = Tags::parse(data).unwrap_or_default();
    let fixed = Tags::parse(br#"{"a":"1","b":"x","price":"-3.5e2"}"#).expect("valid tags");
    if let Ok(f) = Filter::parse(data) {
        let _ = f.matches(&tags);
        let _ = f.matches(&fixed);
        let _ = f.matches(&Tags::default());
    }
});
