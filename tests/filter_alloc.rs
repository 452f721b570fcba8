//! A tag filter is evaluated without allocating: counted by a global
//! allocator, on this thread only, over many evaluations of filters
//! that use every comparison.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use corecast::filter::{Filter, Tags};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counter is a const-initialised thread-local `Cell`, which neither
// allocates nor re-enters the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn evaluating_a_filter_never_allocates() {
    let tags = Tags::parse(br#"{"ticker":"BTC-USD","price":"50100.5","side":"buy"}"#).unwrap();
    let filters = [
        r#"{"op":"and","nodes":[{"key":"ticker","cmp":"in","vals":["ETH","BTC-USD"]},{"key":"price","cmp":"gt","val":"100"},{"op":"not","nodes":[{"key":"side","cmp":"eq","val":"sell"}]}]}"#,
        r#"{"op":"or","nodes":[{"key":"ticker","cmp":"sw","val":"X"},{"key":"ticker","cmp":"ew","val":"USD"},{"key":"ticker","cmp":"ct","val":"C-U"}]}"#,
        r#"{"op":"and","nodes":[{"key":"volume","cmp":"nex"},{"key":"price","cmp":"lte","val":"1e9"},{"key":"side","cmp":"nin","vals":["sell"]},{"key":"x","cmp":"neq","val":"y"}]}"#,
    ];
    let filters: Vec<Filter> = filters
        .iter()
        .map(|f| Filter::parse(f.as_bytes()).unwrap())
        .collect();
    let mut passed = 0;
    COUNTING.with(|c| c.set(true));
    for _ in 0..10_000 {
        for f in &filters {
            passed += usize::from(f.matches(&tags));
        }
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(passed, 30_000, "every filter passes these tags");
    assert_eq!(COUNT.with(Cell::get), 0, "allocations while evaluating");
}
