//! Hook requests: Centrifugo's HTTP proxy bodies (every one `POST` JSON
//! with `client`, `transport`, `protocol`, `encoding`; then `user`,
//! `channel`, `method`, `data` as the hook needs) and the HTTP/1.1
//! request that carries them.

use std::net::IpAddr;

use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::cache::origin::OriginUrl;
use crate::http::MAX_HEADERS;
use crate::ws::OpCode;

/// A hook request's JSON body (the members a hook does not use are left
/// out).
#[derive(Serialize)]
struct Body<'a> {
    client: &'a str,
    transport: &'static str,
    protocol: &'static str,
    encoding: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Data<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    b64data: Option<String>,
}

/// `data` as the client sent it: raw JSON (rpc) or a text message (a
/// JSON string).
#[derive(Serialize)]
#[serde(untagged)]
enum Data<'a> {
    Raw(&'a RawValue),
    Text(&'a str),
}

impl<'a> Body<'a> {
    fn new(client: &'a str) -> Self {
        Body {
            client,
            transport: "websocket",
            protocol: "json",
            encoding: "json",
            user: None,
            channel: None,
            method: None,
            data: None,
            b64data: None,
        }
    }

    fn json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("hook bodies always serialize")
    }
}

/// The connect hook's body: the connection's id (`client`) only; who
/// it is, the backend learns from the forwarded headers (cookies).
pub fn connect(client: &str) -> Vec<u8> {
    Body::new(client).json()
}

/// The subscribe hook's body.
pub fn subscribe(client: &str, user: &str, channel: &str) -> Vec<u8> {
    Body {
        user: Some(user),
        channel: Some(channel),
        ..Body::new(client)
    }
    .json()
}

/// The publish hook's body: a text message as `data` (a JSON string), a
/// binary one as `b64data`.
pub fn publish(client: &str, user: &str, channel: &str, (op, payload): (OpCode, &[u8])) -> Vec<u8> {
    let text = (op == OpCode::Text)
        .then(|| std::str::from_utf8(payload).ok())
        .flatten();
    let b64 = || base64::engine::general_purpose::STANDARD.encode(payload);
    Body {
        user: Some(user),
        channel: Some(channel),
        data: text.map(Data::Text),
        b64data: text.is_none().then(b64),
        ..Body::new(client)
    }
    .json()
}

/// The rpc hook's body: the method and the client's `data` as sent.
pub fn rpc(client: &str, user: &str, method: &str, data: Option<&RawValue>) -> Vec<u8> {
    Body {
        user: Some(user),
        method: Some(method),
        data: data.map(Data::Raw),
        ..Body::new(client)
    }
    .json()
}

/// The refresh hook's body.
pub fn refresh(client: &str, user: &str) -> Vec<u8> {
    Body {
        user: Some(user),
        ..Body::new(client)
    }
    .json()
}

/// The header lines forwarded to the connect hook: the request head's
/// allow-listed ones (`allow`: lowercase names), in order, then the
/// address corecast saw the request come from (`peer`), as proxies add
/// it: `X-Forwarded-For` is the client's value (when allow-listed) with
/// `peer` appended — so its last element is the one the backend may
/// trust — and `X-Real-IP` is `peer` alone (a client's own `X-Real-IP`
/// is never forwarded). The head was parsed before (under the same
/// header bound), so it parses again.
pub fn pick_headers(head: &[u8], allow: &[String], peer: IpAddr) -> Vec<(String, Vec<u8>)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let parsed = req.parse(head).is_ok();
    let allowed = |name: &str| allow.iter().any(|a| name.eq_ignore_ascii_case(a));
    let mut out = Vec::new();
    let mut chain: Vec<u8> = Vec::new();
    for h in req.headers.iter().filter(|_| parsed) {
        if h.name.eq_ignore_ascii_case(REAL_IP) || !allowed(h.name) {
            continue;
        }
        if h.name.eq_ignore_ascii_case(FORWARDED_FOR) {
            if !chain.is_empty() {
                chain.extend_from_slice(b", ");
            }
            chain.extend_from_slice(h.value);
            continue;
        }
        out.push((h.name.to_string(), h.value.to_vec()));
    }
    let peer = peer.to_string();
    if !chain.is_empty() {
        chain.extend_from_slice(b", ");
    }
    chain.extend_from_slice(peer.as_bytes());
    out.push((FORWARDED_FOR.to_string(), chain));
    out.push((REAL_IP.to_string(), peer.into_bytes()));
    out
}

/// The header the peer's address is appended to.
pub const FORWARDED_FOR: &str = "X-Forwarded-For";
/// The header that carries the peer's address alone.
pub const REAL_IP: &str = "X-Real-IP";

/// The whole `POST` of `body` to `url`: `Host`, JSON content type and
/// length, the forwarded header lines, then the static ones (so a
/// client cannot forge a static header the backend trusts: both are
/// sent, the static one last; and `--proxy-http-headers` should not list
/// it).
pub fn http_request(
    url: &OriginUrl,
    forwarded: &[(String, Vec<u8>)],
    statics: &[(String, String)],
    body: &[u8],
) -> Bytes {
    let path = if url.base_path.is_empty() {
        "/"
    } else {
        &url.base_path
    };
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(
        format!("POST {path} HTTP/1.1\r\nHost: {}\r\n", url.authority()).as_bytes(),
    );
    out.extend_from_slice(b"Content-Type: application/json\r\n");
    out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    for (name, value) in forwarded {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in statics {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(v: &[u8]) -> serde_json::Value {
        serde_json::from_slice(v).unwrap()
    }

    /// The shapes of Centrifugo's HTTP proxy requests.
    #[test]
    fn bodies_have_centrifugos_shapes() {
        let c = json(&connect("1.7"));
        assert_eq!(
            c,
            serde_json::json!({"client":"1.7","transport":"websocket","protocol":"json","encoding":"json"})
        );
        let s = json(&subscribe("1.7", "42", "doc.9"));
        assert_eq!(
            (s["user"].as_str(), s["channel"].as_str()),
            (Some("42"), Some("doc.9"))
        );
        let p = json(&publish("1.7", "42", "chat", (OpCode::Text, b"hi")));
        assert_eq!(p["data"], "hi");
        let b = json(&publish("1.7", "42", "chat", (OpCode::Binary, &[0, 1, 2])));
        assert_eq!((b.get("data"), b["b64data"].as_str()), (None, Some("AAEC")));
        let raw = RawValue::from_string(r#"{"x":[1,2]}"#.into()).unwrap();
        let r = json(&rpc("1.7", "", "sum", Some(&raw)));
        assert_eq!(
            (r["method"].as_str(), &r["data"]),
            (Some("sum"), &serde_json::json!({"x":[1,2]}))
        );
        assert_eq!(json(&refresh("1.7", "42"))["user"], "42");
    }

    #[test]
    fn only_allow_listed_headers_are_forwarded() {
        let head =
            b"GET /ws HTTP/1.1\r\nHost: a\r\nCookie: sid=1\r\nX-Other: no\r\nUser-Agent: t\r\n\r\n";
        let allow = vec!["cookie".to_string(), "user-agent".to_string()];
        let peer: IpAddr = "192.0.2.7".parse().unwrap();
        let got = pick_headers(head, &allow, peer);
        assert_eq!(
            got,
            [
                ("Cookie".into(), b"sid=1".to_vec()),
                ("User-Agent".into(), b"t".to_vec()),
                ("X-Forwarded-For".into(), b"192.0.2.7".to_vec()),
                ("X-Real-IP".into(), b"192.0.2.7".to_vec()),
            ]
        );
    }

    #[test]
    fn the_peer_is_appended_and_a_forged_real_ip_dropped() {
        let head = b"GET /ws HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1\r\nX-Real-IP: 6.6.6.6\r\n\
                     X-Forwarded-For: 2.2.2.2\r\n\r\n";
        let allow = vec!["x-forwarded-for".to_string(), "x-real-ip".to_string()];
        let got = pick_headers(head, &allow, "::1".parse().unwrap());
        assert_eq!(
            got,
            [
                ("X-Forwarded-For".into(), b"1.1.1.1, 2.2.2.2, ::1".to_vec()),
                ("X-Real-IP".into(), b"::1".to_vec()),
            ]
        );
    }

    #[test]
    fn the_request_is_a_complete_post() {
        let url: OriginUrl = "http://127.0.0.1:9000/hooks/connect".parse().unwrap();
        let fwd = vec![("Cookie".to_string(), b"sid=1".to_vec())];
        let statics = vec![("X-Secret".to_string(), "s".to_string())];
        let req = http_request(&url, &fwd, &statics, b"{}");
        let text = std::str::from_utf8(&req).unwrap();
        assert_eq!(
            text,
            "POST /hooks/connect HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nContent-Type: application/json\r\nContent-Length: 2\r\nCookie: sid=1\r\nX-Secret: s\r\n\r\n{}"
        );
    }
}
