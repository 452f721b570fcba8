use super::*;

/// The body of one chunk, checking its size line.
fn unchunk(chunk: &[u8]) -> String {
    let text = std::str::from_utf8(chunk).unwrap();
    let (size, rest) = text.split_once("\r\n").unwrap();
    let size = usize::from_str_radix(size, 16).unwrap();
    assert_eq!(rest.len(), size + 2, "size line matches");
    assert!(rest.ends_with("\r\n"));
    rest[..size].to_string()
}

#[test]
fn an_event_is_one_chunk_with_its_id_name_and_data() {
    let e = Event {
        id: Some(("a:b", "e1", 42)),
        name: "message",
        data: &[b"{\"x\":", b"1}"],
    };
    let chunk = event_chunk(&e);
    assert_eq!(&chunk[..4], b"2c\r\n");
    assert_eq!(
        unchunk(&chunk),
        "id: a:b:e1:42\nevent: message\ndata: {\"x\":1}\n\n"
    );
}

#[test]
fn every_line_break_starts_a_data_line() {
    let e = Event {
        id: None,
        name: "m",
        data: &[b"one\ntwo\r\nthree\rfour", b"\n"],
    };
    assert_eq!(
        unchunk(&event_chunk(&e)),
        "event: m\ndata: one\ndata: two\ndata: three\ndata: four\ndata: \n\n"
    );
}

#[test]
fn a_comment_is_a_chunk() {
    assert_eq!(&comment_chunk("heartbeat")[..], b"d\r\n: heartbeat\n\n\r\n");
}

#[test]
fn ids_are_read_from_the_right() {
    let id = parse_event_id("room:eu:1:00ab:17").unwrap();
    assert_eq!(
        (id.channel.as_str(), id.epoch.as_str(), id.offset),
        ("room:eu:1", "00ab", 17)
    );
    for bad in [
        "",
        "room",
        "room:17",
        "room::17",
        ":e:17",
        "room:e:",
        "room:e:-1",
        "room:e:+1",
        "room:e:1x",
        "room:e:99999999999999999999999",
        "ro om:e:1",
        "room:e-x:1",
    ] {
        assert_eq!(parse_event_id(bad), None, "{bad:?}");
    }
    let long = format!("{}:e:1", "c".repeat(MAX_ID_LEN));
    assert_eq!(parse_event_id(&long), None);
}

#[test]
fn a_request_names_channels_and_positions() {
    let q = "channel=a&token=t&channel=b%3Ax&since=b%3Ax%3Ae%3A4&channel=a";
    let sub = parse_request(Some(q), None, 8).unwrap();
    assert_eq!(sub.channels, ["a", "b:x"]);
    assert_eq!(sub.since("b:x").map(|p| p.offset), Some(4));
    assert!(!sub.reconnect);
    // Last-Event-ID wins for its channel, and marks a reconnect.
    let sub = parse_request(Some(q), Some(b" b:x:f:9 "), 8).unwrap();
    assert_eq!(sub.positions.len(), 1);
    assert_eq!(
        sub.since("b:x").map(|p| (p.epoch.as_str(), p.offset)),
        Some(("f", 9))
    );
    assert!(sub.reconnect);
}

#[test]
fn bad_requests_are_refused_with_their_reason() {
    let cases: [(&str, Option<&[u8]>, RequestError); 8] = [
        ("", None, RequestError::NoChannel),
        ("token=x", None, RequestError::NoChannel),
        ("channel=a%2Fb", None, RequestError::InvalidChannel),
        ("channel=%zz", None, RequestError::InvalidChannel),
        ("channel=a&since=a:e", None, RequestError::InvalidSince),
        ("channel=a&since=b:e:1", None, RequestError::InvalidSince),
        ("channel=a", Some(b"nope"), RequestError::InvalidLastEventId),
        (
            "channel=a",
            Some(b"b:e:1"),
            RequestError::InvalidLastEventId,
        ),
    ];
    for (q, last, want) in cases {
        assert_eq!(parse_request(Some(q), last, 8), Err(want), "{q:?}");
    }
}

#[test]
fn the_channel_bound_is_crossed_at_one_more() {
    let q = |n: usize| {
        (0..n)
            .map(|i| format!("channel=c{i}"))
            .collect::<Vec<_>>()
            .join("&")
    };
    assert_eq!(
        parse_request(Some(&q(3)), None, 3).unwrap().channels.len(),
        3
    );
    assert_eq!(
        parse_request(Some(&q(4)), None, 3),
        Err(RequestError::TooManyChannels)
    );
    // Repeats of one channel are one channel.
    let same = "channel=a&".repeat(50);
    assert_eq!(parse_request(Some(&same), None, 1).unwrap().channels, ["a"]);
}

#[test]
fn the_last_event_id_header_is_found_in_a_head() {
    let head = b"GET /sse?channel=a HTTP/1.1\r\nHost: x\r\nlast-event-id: a:e:3\r\n\r\n";
    assert_eq!(last_event_id(head), Some(&b"a:e:3"[..]));
    assert_eq!(last_event_id(b"GET / HTTP/1.1\r\n\r\n"), None);
}

#[test]
fn a_close_frame_becomes_a_close_event_and_the_last_chunk() {
    let frame = crate::ws::frame::encode_close_frame(1008, "slow consumer");
    let out = closing(&frame);
    let text = std::str::from_utf8(&out).unwrap();
    assert!(text.ends_with("\r\n0\r\n\r\n"), "{text:?}");
    let body = unchunk(&out[..out.len() - LAST_CHUNK.len()]);
    assert_eq!(
        body,
        "event: close\ndata: {\"type\":\"close\",\"code\":1008,\"reason\":\"slow consumer\"}\n\n"
    );
}

#[test]
fn position_events_carry_the_position_as_their_id() {
    let ev = position_event("gap", "a:b", Some(("e", 7)), None);
    let body = unchunk(&ev);
    assert!(
        body.starts_with("id: a:b:e:7\nevent: gap\ndata: {"),
        "{body}"
    );
    let json: serde_json::Value =
        serde_json::from_str(body.lines().nth(2).unwrap().strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"type":"gap","channel":"a:b","epoch":"e","offset":7})
    );
    let plain = unchunk(&position_event("subscribed", "a", None, None));
    assert_eq!(
        plain,
        "event: subscribed\ndata: {\"type\":\"subscribed\",\"channel\":\"a\"}\n\n"
    );
}
