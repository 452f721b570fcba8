//! The JSON protocol's frames the hooks add:
//! ```json
//! {"type":"connected","client":"3.17","user":"42","data":{"motd":"hi"}}
//! {"type":"rpc","id":7,"data":{"sum":3}}
//! {"type":"error","code":"refused","backend_code":403,"message":"not a member","id":4}
//! ```
//! `code` stays one of the protocol's names (`refused` for a backend's
//! `error` answer, `unavailable` for a failed call); the backend's own
//! number is `backend_code`.

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::ws::frame::{encode_server_frame, OpCode};

#[derive(Serialize)]
struct Frame<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    client: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backend_code: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a RawValue>,
}

impl<'a> Frame<'a> {
    fn new(kind: &'static str) -> Self {
        Frame {
            kind,
            client: None,
            user: None,
            code: None,
            backend_code: None,
            message: None,
            id: None,
            data: None,
        }
    }

    fn encode(&self) -> Bytes {
        let json = serde_json::to_vec(self).expect("frames always serialize");
        encode_server_frame(OpCode::Text, &json)
    }
}

/// A JSON client's first frame after a connect hook admitted it.
pub fn connected(client: &str, user: &str, data: Option<&RawValue>) -> Bytes {
    Frame {
        client: Some(client),
        user: Some(user),
        data,
        ..Frame::new("connected")
    }
    .encode()
}

/// The answer to `{"op":"connect"}`: the connection's client id and
/// user (none when anonymous).
pub fn connected_reply(client: &str, user: Option<&str>, id: Option<&RawValue>) -> Bytes {
    Frame {
        client: Some(client),
        user,
        id,
        ..Frame::new("connected")
    }
    .encode()
}

/// The answer to `{"op":"rpc"}`.
pub fn rpc(id: Option<&RawValue>, data: Option<&RawValue>) -> Bytes {
    Frame {
        id,
        data,
        ..Frame::new("rpc")
    }
    .encode()
}

/// A backend's `error` answer, passed on.
pub fn refused(backend_code: u32, message: &str, id: Option<&RawValue>) -> Bytes {
    Frame {
        code: Some("refused"),
        backend_code: Some(backend_code),
        message: Some(message),
        id,
        ..Frame::new("error")
    }
    .encode()
}

/// A hook call failed (down, slow, garbage): nothing was done.
pub fn unavailable(message: &str, id: Option<&RawValue>) -> Bytes {
    Frame {
        code: Some("unavailable"),
        message: Some(message),
        id,
        ..Frame::new("error")
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(frame: &Bytes) -> serde_json::Value {
        serde_json::from_slice(&frame[2..]).unwrap()
    }

    #[test]
    fn frames() {
        let data = RawValue::from_string(r#"{"a":1}"#.into()).unwrap();
        let c = text(&connected("1.2", "42", Some(&data)));
        assert_eq!(
            c,
            serde_json::json!({"type":"connected","client":"1.2","user":"42","data":{"a":1}})
        );
        let id = RawValue::from_string("7".into()).unwrap();
        let r = text(&rpc(Some(&id), None));
        assert_eq!(r, serde_json::json!({"type":"rpc","id":7}));
        let e = text(&refused(403, "no", Some(&id)));
        assert_eq!(
            e,
            serde_json::json!({"type":"error","code":"refused","backend_code":403,"message":"no","id":7})
        );
    }
}
