//! Tests of the JSON control protocol's parsing and frames.

use super::*;

fn json_of(frame: &Bytes) -> serde_json::Value {
    let hdr = if frame[1] & 0x7f == 126 { 4 } else { 2 };
    serde_json::from_slice(&frame[hdr..]).unwrap()
}

/// `rpc` carries any JSON as `data`; a publish's `data` must still
/// be a string.
#[test]
fn rpc_parses_and_publish_data_stays_a_string() {
    let e = parse(br#"{"op":"rpc","method":"sum","data":{"a":[1,2]},"id":7}"#).unwrap();
    let want = Request::Rpc {
        method: "sum".into(),
        data: Some(r#"{"a":[1,2]}"#.into()),
    };
    assert_eq!(e.request, want);
    let e = parse(br#"{"op":"connect","id":2}"#).unwrap();
    assert_eq!((e.request, e.id.unwrap().get()), (Request::Connect, "2"));
    let e = parse(br#"{"op":"rpc","id":1}"#).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (ErrorCode::BadRequest, "missing \"method\"")
    );
    let e = parse(br#"{"op":"publish","channel":"a","data":{"x":1}}"#).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
}

#[test]
fn requests_parse() {
    let e = parse(br#"{"op":"subscribe","channel":"a","id":7}"#).unwrap();
    assert_eq!(
        e.request,
        Request::Subscribe {
            channel: "a".into(),
            since: None,
            presence: false,
            filter: None,
            server_filter: None,
            delta: false,
        }
    );
    assert_eq!(e.id.unwrap().get(), "7");
    let e = parse(br#"{"op":"publish","channel":"a","data":"h\u00e9"}"#).unwrap();
    assert_eq!(
        e.request,
        Request::Publish {
            channel: "a".into(),
            opcode: OpCode::Text,
            payload: "hé".as_bytes().to_vec(),
            meta: None,
        }
    );
    let e = parse(br#"{"op":"publish","channel":"a","data_base64":"AAEC"}"#).unwrap();
    assert!(
        matches!(e.request, Request::Publish { opcode: OpCode::Binary, ref payload, .. } if payload == &[0, 1, 2])
    );
}

#[test]
fn bad_requests_are_errors_with_the_id_when_readable() {
    let cases: [&[u8]; 7] = [
        b"not json",
        b"[1,2]",
        br#"{"op":"dance","channel":"a","id":"x"}"#,
        br#"{"channel":"a"}"#,
        br#"{"op":"subscribe"}"#,
        br#"{"op":"publish","channel":"a"}"#,
        br#"{"op":"publish","channel":"a","data":5}"#,
    ];
    for c in cases {
        let e = parse(c).unwrap_err();
        assert_eq!(
            e.code,
            ErrorCode::BadRequest,
            "{}",
            String::from_utf8_lossy(c)
        );
    }
    let e = parse(br#"{"op":"dance","channel":"a","id":"x"}"#).unwrap_err();
    assert_eq!(e.id.unwrap().get(), "\"x\"");
}

#[test]
fn replies_and_deliveries_are_valid_json() {
    let raw = RawValue::from_string("42".into()).unwrap();
    let v = json_of(&ack("published", "c", Some(3), Some(&raw)));
    assert_eq!(
        v,
        serde_json::json!({"type":"published","channel":"c","subscribers":3,"id":42})
    );
    let v = json_of(&error(ErrorCode::InvalidChannel, "bad \"name\"", None));
    assert_eq!(v["code"], "invalid_channel");
    let v = json_of(&encode_delivery(
        "c",
        OpCode::Text,
        "line\n\"q\"".as_bytes(),
        (0, None),
    ));
    assert_eq!(v["data"], "line\n\"q\"");
    let v = json_of(&encode_delivery("c", OpCode::Binary, &[0xff, 0], (0, None)));
    assert_eq!(v["data_base64"], "/wA=");
    let v = json_of(&encode_delivery("c", OpCode::Text, b"x", (7, None)));
    assert_eq!(
        v,
        serde_json::json!({"type":"message","channel":"c","offset":7,"data":"x"})
    );
    let at = At {
        epoch: "e1",
        offset: 9,
    };
    let v = json_of(&subscribed("c", at, (Some(false), false, false), None));
    assert_eq!(
        v,
        serde_json::json!({"type":"subscribed","channel":"c","recovered":false,"epoch":"e1","offset":9})
    );
    let e =
        parse(br#"{"op":"subscribe","channel":"a","since":{"epoch":"e1","offset":3}}"#).unwrap();
    let since = Some(Since {
        epoch: "e1".into(),
        offset: 3,
    });
    assert_eq!(
        e.request,
        Request::Subscribe {
            channel: "a".into(),
            since,
            presence: false,
            filter: None,
            server_filter: None,
            delta: false,
        }
    );
    let e = parse(br#"{"op":"subscribe","channel":"a","presence":true}"#).unwrap();
    assert!(matches!(
        e.request,
        Request::Subscribe { presence: true, .. }
    ));
    let e = parse(br#"{"op":"presence","channel":"a","id":1}"#).unwrap();
    assert_eq!(
        e.request,
        Request::Presence {
            channel: "a".into()
        }
    );
    assert!(parse(br#"{"op":"subscribe","channel":"a","since":{"offset":-1}}"#).is_err());
}
