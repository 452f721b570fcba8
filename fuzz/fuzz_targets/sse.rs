//! `GET /sse`'s client input — the query and `Last-Event-ID` (before and
//! after the first newline) — and the event encoder over arbitrary data.
//! Never a panic; a parsed request names 1..=bound valid channels, its
//! positions name its channels and read back as written; an event is one
//! exactly sized chunk whose every line is a field (a line break in the
//! data never ends the event early).
#![no_main]
use corecast::sse::{event_chunk, parse_event_id, parse_request, Event};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (q, last) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    if let Ok(Ok(sub)) = std::str::from_utf8(q).map(|q| parse_request(Some(q), last, 8)) {
        assert!((1..=8).contains(&sub.channels.len()));
        for p in &sub.positions {
            assert!(sub.channels.contains(&p.channel));
            let id = format!("{}:{}:{}", p.channel, p.epoch, p.offset);
            assert_eq!(parse_event_id(&id).as_ref(), Some(p));
        }
    }
    let chunk = event_chunk(&Event {
        id: None,
        name: "message",
        data: &[data],
    });
    let line = chunk.iter().position(|&b| b == b'\r').expect("a size line");
    let size = std::str::from_utf8(&chunk[..line]).expect("hex");
    let size = usize::from_str_radix(size, 16).expect("hex");
    assert_eq!(chunk.len(), line + 2 + size + 2);
    let body = &chunk[line + 2..line + 2 + size];
    assert!(body.ends_with(b"\n\n") && !body.contains(&b'\r'));
    let fields = &body[..body.len() - 2];
    for l in fields.split(|&b| b == b'\n') {
        assert!(l.starts_with(b"event: ") || l.starts_with(b"data: "));
    }
});
