//! The WebSocket part of the HTTP/1.1 upgrade, RFC 6455 section 4.
//!
//! The HTTP request head is parsed elsewhere (with `httparse`); this module
//! checks the headers the opening handshake requires and builds the `101`
//! response. The client side (used by the load generator and tests) builds
//! the request and validates the server's response head.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// The GUID the server appends to the client's key (4.2.2).
pub const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Why an upgrade request was refused; see [`HandshakeError::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeError {
    /// "The method of the request MUST be GET" (4.1).
    NotGet,
    /// "the HTTP version MUST be at least 1.1" (4.1).
    NotHttp11,
    /// No `Upgrade` header with the token `websocket`.
    MissingUpgrade,
    /// No `Connection` header with the token `Upgrade`.
    MissingConnectionUpgrade,
    /// `Sec-WebSocket-Version` missing or not 13.
    UnsupportedVersion,
    /// No `Sec-WebSocket-Key` header.
    MissingKey,
    /// A `Sec-WebSocket-Key` that is not a base64-encoded 16-byte value, or
    /// more than one of them.
    InvalidKey,
}

impl HandshakeError {
    /// The HTTP status to answer with: 405 for a wrong method, 426 (with a
    /// `Sec-WebSocket-Version: 13` header, 4.4) for a wrong version, 400
    /// otherwise.
    pub fn status(&self) -> u16 {
        match self {
            Self::NotGet => 405,
            Self::UnsupportedVersion => 426,
            _ => 400,
        }
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotGet => "upgrade request method is not GET",
            Self::NotHttp11 => "upgrade request is not HTTP/1.1",
            Self::MissingUpgrade => "missing `Upgrade: websocket` header",
            Self::MissingConnectionUpgrade => "missing `Connection: Upgrade` header",
            Self::UnsupportedVersion => "Sec-WebSocket-Version is not 13",
            Self::MissingKey => "missing Sec-WebSocket-Key header",
            Self::InvalidKey => "Sec-WebSocket-Key is not 16 base64-encoded bytes",
        })
    }
}

impl std::error::Error for HandshakeError {}

/// Validates an upgrade request and returns the `Sec-WebSocket-Accept`
/// value.
///
/// Requires method `GET`, HTTP/1.1 (`version == 1` as httparse reports it),
/// an `Upgrade` header containing the token `websocket`, a `Connection`
/// header containing the token `upgrade` (comma-separated token lists,
/// case-insensitive, as are header names), `Sec-WebSocket-Version: 13` and a
/// single `Sec-WebSocket-Key` that base64-decodes to exactly 16 bytes.
pub fn validate_upgrade(
    method: &str,
    version: u8,
    headers: &[httparse::Header<'_>],
) -> Result<String, HandshakeError> {
    if method != "GET" {
        return Err(HandshakeError::NotGet);
    }
    if version != 1 {
        return Err(HandshakeError::NotHttp11);
    }
    // "An |Upgrade| header field containing the value "websocket", treated
    // as an ASCII case-insensitive value." (4.2.1)
    if !has_token(headers, "upgrade", "websocket") {
        return Err(HandshakeError::MissingUpgrade);
    }
    // "A |Connection| header field that includes the token "Upgrade",
    // treated as an ASCII case-insensitive value." (4.2.1)
    if !has_token(headers, "connection", "upgrade") {
        return Err(HandshakeError::MissingConnectionUpgrade);
    }
    // "A |Sec-WebSocket-Version| header field, with a value of 13." (4.2.1)
    if single_value(headers, "sec-websocket-version") != Some(Ok(b"13")) {
        return Err(HandshakeError::UnsupportedVersion);
    }
    let key = match single_value(headers, "sec-websocket-key") {
        None => return Err(HandshakeError::MissingKey),
        Some(Err(Duplicate)) => return Err(HandshakeError::InvalidKey),
        Some(Ok(key)) => key,
    };
    check_key(key)?;
    Ok(accept_key(key))
}

/// "A |Sec-WebSocket-Key| header field with a base64-encoded value that,
/// when decoded, is 16 bytes in length." (4.2.1)
fn check_key(key: &[u8]) -> Result<(), HandshakeError> {
    // 16 bytes encode to 24 characters (with "==" padding); checking the
    // length first means a huge header is never decoded.
    if key.len() != 24 {
        return Err(HandshakeError::InvalidKey);
    }
    let mut decoded = [0u8; 18];
    match STANDARD.decode_slice(key, &mut decoded) {
        Ok(16) => Ok(()),
        _ => Err(HandshakeError::InvalidKey),
    }
}

/// The `Sec-WebSocket-Accept` value for a key: base64(SHA-1(key + GUID))
/// (4.2.2).
pub fn accept_key(key: &[u8]) -> String {
    let mut sha1 = sha1_smol::Sha1::new();
    sha1.update(key);
    sha1.update(WS_GUID.as_bytes());
    STANDARD.encode(sha1.digest().bytes())
}

/// The `101 Switching Protocols` response head for an accepted upgrade.
pub fn response_101(accept: &str) -> Vec<u8> {
    response_101_with(accept, None)
}

/// Same, selecting an extension: `extensions` is the
/// `Sec-WebSocket-Extensions` value (our own text, e.g.
/// [`Agreed::response_value`](super::extension::Agreed::response_value)).
pub fn response_101_with(accept: &str, extensions: Option<&str>) -> Vec<u8> {
    let ext = extensions
        .map(|e| format!("Sec-WebSocket-Extensions: {e}\r\n"))
        .unwrap_or_default();
    format!(
        "HTTP/1.1 101 Switching Protocols\r\n\
         Upgrade: websocket\r\n\
         Connection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\n{ext}\r\n"
    )
    .into_bytes()
}

/// Marker: a header that must appear once appeared several times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Duplicate;

/// The trimmed value of the header `name` if it appears; `Err` if it
/// appears more than once.
fn single_value<'h>(
    headers: &[httparse::Header<'h>],
    name: &str,
) -> Option<Result<&'h [u8], Duplicate>> {
    let mut values = values(headers, name);
    let first = values.next()?;
    Some(match values.next() {
        None => Ok(first),
        Some(_) => Err(Duplicate),
    })
}

/// True if any `name` header lists `token` in its comma-separated value.
fn has_token(headers: &[httparse::Header<'_>], name: &str, token: &str) -> bool {
    values(headers, name)
        .flat_map(|value| value.split(|&b| b == b','))
        .any(|item| trim(item).eq_ignore_ascii_case(token.as_bytes()))
}

/// The trimmed values of every header called `name` (case-insensitive).
fn values<'a, 'h>(
    headers: &'a [httparse::Header<'h>],
    name: &'a str,
) -> impl Iterator<Item = &'h [u8]> + 'a {
    headers
        .iter()
        .filter(move |h| h.name.eq_ignore_ascii_case(name))
        .map(|h| trim(h.value))
}

/// Strips optional whitespace (spaces and tabs) around a header value or
/// list item.
fn trim(bytes: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes.iter().position(|b| !is_ows(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i.saturating_add(1));
    bytes.get(start..end).unwrap_or_default()
}

/// Why the server's answer to our upgrade request was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientHandshakeError {
    /// The response head is not valid HTTP.
    Http(httparse::Error),
    /// The response head exceeds [`MAX_RESPONSE_HEAD_LEN`] bytes.
    HeadTooLarge,
    /// The response is not HTTP/1.1.
    NotHttp11,
    /// "If the status code received from the server is not 101, the client
    /// handles the response per HTTP procedures" (4.1) — for us, a failure.
    BadStatus(u16),
    /// No `Upgrade: websocket` header (4.1).
    MissingUpgrade,
    /// No `Connection: Upgrade` header (4.1).
    MissingConnectionUpgrade,
    /// `Sec-WebSocket-Accept` missing or not derived from our key (4.1).
    BadAccept,
    /// The server selected an extension we did not offer (4.1).
    UnexpectedExtension,
    /// The server selected a subprotocol we did not offer (4.1).
    UnexpectedSubprotocol,
}

impl fmt::Display for ClientHandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Http(err) => write!(f, "malformed response head: {err}"),
            Self::HeadTooLarge => f.write_str("response head too large"),
            Self::NotHttp11 => f.write_str("response is not HTTP/1.1"),
            Self::BadStatus(code) => write!(f, "expected status 101, got {code}"),
            Self::MissingUpgrade => f.write_str("missing `Upgrade: websocket` header"),
            Self::MissingConnectionUpgrade => f.write_str("missing `Connection: Upgrade` header"),
            Self::BadAccept => f.write_str("Sec-WebSocket-Accept does not match the key"),
            Self::UnexpectedExtension => f.write_str("server selected an unrequested extension"),
            Self::UnexpectedSubprotocol => {
                f.write_str("server selected an unrequested subprotocol")
            }
        }
    }
}

impl std::error::Error for ClientHandshakeError {}

/// Longest response head [`parse_server_response`] waits for.
pub const MAX_RESPONSE_HEAD_LEN: usize = 8192;

/// Most headers accepted in a response head.
const MAX_RESPONSE_HEADERS: usize = 32;

/// Client role: a GET upgrade request for `host` and `path` with the given
/// base64 key (16 random bytes). The arguments are written verbatim: they
/// come from our own configuration, not from a peer.
pub fn client_request(host: &str, path: &str, key_b64: &str) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\n\
         Host: {host}\r\n\
         Upgrade: websocket\r\n\
         Connection: Upgrade\r\n\
         Sec-WebSocket-Key: {key_b64}\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n"
    )
    .into_bytes()
}

/// Client role: validates the server's response head at the start of `buf`.
///
/// `Ok(Some(head_len))` when the head is complete and accepts the upgrade
/// (frames start at `buf[head_len..]`), `Ok(None)` when more bytes are
/// needed.
pub fn parse_server_response(
    buf: &[u8],
    key_b64: &str,
) -> Result<Option<usize>, ClientHandshakeError> {
    parse_server_response_offering(buf, key_b64, None)
}

/// [`parse_server_response`] after offering the extension `offered`
/// (e.g. `permessage-deflate`): the server may select it, nothing else.
pub fn parse_server_response_offering(
    buf: &[u8],
    key_b64: &str,
    offered: Option<&str>,
) -> Result<Option<usize>, ClientHandshakeError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf).map_err(ClientHandshakeError::Http)? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial if buf.len() >= MAX_RESPONSE_HEAD_LEN => {
            return Err(ClientHandshakeError::HeadTooLarge);
        }
        httparse::Status::Partial => return Ok(None),
    };
    check_response(&response, key_b64, offered)?;
    Ok(Some(head_len))
}

/// The checks of section 4.1 on a complete response head.
fn check_response(
    response: &httparse::Response<'_, '_>,
    key_b64: &str,
    offered: Option<&str>,
) -> Result<(), ClientHandshakeError> {
    if response.version != Some(1) {
        return Err(ClientHandshakeError::NotHttp11);
    }
    match response.code {
        Some(101) => {}
        code => return Err(ClientHandshakeError::BadStatus(code.unwrap_or(0))),
    }
    let headers = &*response.headers;
    // "If the response lacks an |Upgrade| header field or the |Upgrade|
    // header field contains a value that is not an ASCII case-insensitive
    // match for the value "websocket", the client MUST _Fail the WebSocket
    // Connection_." (4.1; likewise for |Connection|.)
    if !has_token(headers, "upgrade", "websocket") {
        return Err(ClientHandshakeError::MissingUpgrade);
    }
    if !has_token(headers, "connection", "upgrade") {
        return Err(ClientHandshakeError::MissingConnectionUpgrade);
    }
    let expected = accept_key(key_b64.as_bytes());
    if single_value(headers, "sec-websocket-accept") != Some(Ok(expected.as_bytes())) {
        return Err(ClientHandshakeError::BadAccept);
    }
    // Any extension but the one offered (if any) is one "that was not
    // present in the client's handshake" (4.1); we offer no subprotocol.
    let selected_only_offered = values(headers, "sec-websocket-extensions").all(|v| {
        let name = v.split(|&b| b == b';').next().unwrap_or_default();
        offered.is_some_and(|o| name.trim_ascii().eq_ignore_ascii_case(o.as_bytes()))
    });
    if !selected_only_offered {
        return Err(ClientHandshakeError::UnexpectedExtension);
    }
    if values(headers, "sec-websocket-protocol").next().is_some() {
        return Err(ClientHandshakeError::UnexpectedSubprotocol);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use httparse::Header;

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
    const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

    fn h<'a>(name: &'a str, value: &'a str) -> Header<'a> {
        Header {
            name,
            value: value.as_bytes(),
        }
    }

    fn good_headers() -> Vec<Header<'static>> {
        vec![
            h("Host", "server.example.com"),
            h("Upgrade", "websocket"),
            h("Connection", "Upgrade"),
            h("Sec-WebSocket-Key", KEY),
            h("Sec-WebSocket-Version", "13"),
        ]
    }

    /// The good headers with `name` removed, or given `value` instead.
    fn replace(name: &'static str, value: Option<&'static str>) -> Vec<Header<'static>> {
        let mut headers: Vec<_> = good_headers()
            .into_iter()
            .filter(|h| !h.name.eq_ignore_ascii_case(name))
            .collect();
        headers.extend(value.map(|value| h(name, value)));
        headers
    }

    #[test]
    fn rfc_6455_accept_key_example() {
        assert_eq!(accept_key(KEY.as_bytes()), ACCEPT);
    }

    #[test]
    fn valid_upgrade_returns_the_accept_value() {
        assert_eq!(
            validate_upgrade("GET", 1, &good_headers()),
            Ok(ACCEPT.to_owned())
        );
    }

    #[test]
    fn header_names_and_tokens_are_case_insensitive_lists() {
        let headers = [
            h("upgrade", "h2c, WebSocket"),
            h("CONNECTION", "keep-alive,  UPGRADE "),
            h("sec-websocket-key", " dGhlIHNhbXBsZSBub25jZQ== "),
            h("Sec-Websocket-Version", "13"),
        ];
        assert_eq!(validate_upgrade("GET", 1, &headers), Ok(ACCEPT.to_owned()));
    }

    #[test]
    fn each_rule_has_its_error_and_status() {
        use HandshakeError as E;
        let cases: Vec<(&str, u8, Vec<Header<'static>>, E, u16)> = vec![
            ("POST", 1, good_headers(), E::NotGet, 405),
            ("get", 1, good_headers(), E::NotGet, 405),
            ("GET", 0, good_headers(), E::NotHttp11, 400),
            ("GET", 1, replace("upgrade", None), E::MissingUpgrade, 400),
            (
                "GET",
                1,
                replace("upgrade", Some("websockets")),
                E::MissingUpgrade,
                400,
            ),
            (
                "GET",
                1,
                replace("connection", None),
                E::MissingConnectionUpgrade,
                400,
            ),
            (
                "GET",
                1,
                replace("connection", Some("keep-alive")),
                E::MissingConnectionUpgrade,
                400,
            ),
            (
                "GET",
                1,
                replace("sec-websocket-version", None),
                E::UnsupportedVersion,
                426,
            ),
            (
                "GET",
                1,
                replace("sec-websocket-version", Some("8")),
                E::UnsupportedVersion,
                426,
            ),
            (
                "GET",
                1,
                replace("sec-websocket-key", None),
                E::MissingKey,
                400,
            ),
            (
                "GET",
                1,
                replace("sec-websocket-key", Some("c2hvcnQ=")),
                E::InvalidKey,
                400,
            ),
            (
                "GET",
                1,
                replace("sec-websocket-key", Some("not base64 at all!!!!!!!")),
                E::InvalidKey,
                400,
            ),
            (
                "GET",
                1,
                replace("sec-websocket-key", Some("AAAAAAAAAAAAAAAAAAAAAAAAAAAA")),
                E::InvalidKey,
                400,
            ),
        ];
        for (method, version, headers, err, status) in cases {
            assert_eq!(
                validate_upgrade(method, version, &headers),
                Err(err.clone()),
                "{err}"
            );
            assert_eq!(err.status(), status);
        }
    }

    #[test]
    fn duplicate_key_is_rejected() {
        let mut headers = good_headers();
        headers.push(h("Sec-WebSocket-Key", KEY));
        assert_eq!(
            validate_upgrade("GET", 1, &headers),
            Err(HandshakeError::InvalidKey)
        );
    }

    #[test]
    fn response_101_layout() {
        let expected = head(STATUS_101, &[UPGRADE, CONNECTION, ACCEPT_LINE]);
        assert_eq!(response_101(ACCEPT), expected.as_bytes());
    }

    #[test]
    fn client_request_is_accepted_by_the_server_side() {
        let request = client_request("example.com:80", "/chat", KEY);
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut parsed = httparse::Request::new(&mut headers);
        let len = parsed.parse(&request).unwrap().unwrap();
        assert_eq!(len, request.len());
        assert_eq!(parsed.path, Some("/chat"));
        let accept = validate_upgrade(
            parsed.method.unwrap(),
            parsed.version.unwrap(),
            parsed.headers,
        );
        assert_eq!(accept, Ok(ACCEPT.to_owned()));
    }

    #[test]
    fn server_response_round_trip_and_partial_heads() {
        let mut response = response_101(ACCEPT);
        let head_len = response.len();
        response.extend_from_slice(&[0x81, 0x00]); // a frame right behind it
        assert_eq!(parse_server_response(&response, KEY), Ok(Some(head_len)));
        for cut in 0..head_len {
            assert_eq!(
                parse_server_response(&response[..cut], KEY),
                Ok(None),
                "{cut}"
            );
        }
    }

    const STATUS_101: &str = "HTTP/1.1 101 Switching Protocols";
    const UPGRADE: &str = "Upgrade: websocket\r\n";
    const CONNECTION: &str = "Connection: Upgrade\r\n";
    const ACCEPT_LINE: &str = "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n";

    fn head(status: &str, lines: &[&str]) -> String {
        format!("{status}\r\n{}\r\n", lines.concat())
    }

    #[test]
    fn server_response_rules() {
        use ClientHandshakeError as E;
        let (u, c, a) = (UPGRADE, CONNECTION, ACCEPT_LINE);
        let wrong_accept = "Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n";
        let extension = "Sec-WebSocket-Extensions: permessage-deflate\r\n";
        let protocol = "Sec-WebSocket-Protocol: chat\r\n";
        let cases = [
            (head("HTTP/1.1 200 OK", &[u, c, a]), E::BadStatus(200)),
            (head("HTTP/1.0 101 Switching", &[u, c, a]), E::NotHttp11),
            (head(STATUS_101, &[c, a]), E::MissingUpgrade),
            (head(STATUS_101, &[u, a]), E::MissingConnectionUpgrade),
            (head(STATUS_101, &[u, c, wrong_accept]), E::BadAccept),
            (head(STATUS_101, &[u, c]), E::BadAccept),
            (
                head(STATUS_101, &[u, c, a, extension]),
                E::UnexpectedExtension,
            ),
            (
                head(STATUS_101, &[u, c, a, protocol]),
                E::UnexpectedSubprotocol,
            ),
            (head("HTTP/1.1 abc", &[]), E::Http(httparse::Error::Status)),
        ];
        for (head, err) in cases {
            let result = parse_server_response(head.as_bytes(), KEY);
            assert_eq!(result, Err(err), "{head}");
        }
        let good = head(STATUS_101, &[u, c, a]);
        assert_eq!(
            parse_server_response(good.as_bytes(), KEY),
            Ok(Some(good.len()))
        );
        // An offered extension may be selected (with parameters); another
        // may not.
        let deflate = head(
            STATUS_101,
            &[
                u,
                c,
                a,
                "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n",
            ],
        );
        let offered = Some("permessage-deflate");
        assert_eq!(
            parse_server_response_offering(deflate.as_bytes(), KEY, offered),
            Ok(Some(deflate.len()))
        );
        let other = head(
            STATUS_101,
            &[u, c, a, "Sec-WebSocket-Extensions: x-webkit\r\n"],
        );
        assert_eq!(
            parse_server_response_offering(other.as_bytes(), KEY, offered),
            Err(E::UnexpectedExtension)
        );
    }

    #[test]
    fn endless_response_head_is_capped() {
        let mut long = b"HTTP/1.1 101 Switching Protocols\r\nX-Long: ".to_vec();
        long.resize(MAX_RESPONSE_HEAD_LEN, b'a');
        let err = ClientHandshakeError::HeadTooLarge;
        assert_eq!(parse_server_response(&long, KEY), Err(err));
        let mut many = b"HTTP/1.1 101 Switching Protocols\r\n".to_vec();
        for _ in 0..=MAX_RESPONSE_HEADERS {
            many.extend_from_slice(b"X-Filler: a\r\n");
        }
        let err = ClientHandshakeError::Http(httparse::Error::TooManyHeaders);
        assert_eq!(parse_server_response(&many, KEY), Err(err));
    }
}
