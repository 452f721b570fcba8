//! The origin client's HTTP/1.1, sans-I/O: the `--origin` URL, request
//! encoding, response heads (httparse) and body framing (RFC 9112 6).

use std::fmt;
use std::str::FromStr;

use bytes::{Bytes, BytesMut};

use super::chunked::{ChunkedDecoder, ChunkedError};

/// Most header lines in one origin response head.
pub const MAX_RESPONSE_HEADERS: usize = 64;

/// `http[s]://host[:port][/base-path]`.
#[derive(Clone, PartialEq, Eq)]
pub struct OriginUrl {
    /// `https://`: TLS, the origin's certificate verified for `host`.
    pub tls: bool,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port (default 80, or 443 with `https://`).
    pub port: u16,
    /// Path prefix for every request, without a trailing `/` (may be empty).
    pub base_path: String,
}

impl fmt::Debug for OriginUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for OriginUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority(), self.base_path)
    }
}

impl FromStr for OriginUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (tls, rest) = match (s.strip_prefix("http://"), s.strip_prefix("https://")) {
            (Some(r), _) => (false, r),
            (_, Some(r)) => (true, r),
            _ => return Err("expected http[s]://host[:port][/base-path]".into()),
        };
        if rest.contains(['?', '#', '@', ' ']) {
            return Err("no user info, query or fragment allowed".into());
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (host, port) = split_host_port(authority, if tls { 443 } else { 80 })?;
        Ok(OriginUrl {
            tls,
            host,
            port,
            base_path: path.trim_end_matches('/').to_string(),
        })
    }
}

fn split_host_port(authority: &str, default: u16) -> Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or("unclosed [ in host")?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("missing host".into());
    }
    let port = match port {
        None => default,
        Some(p) => p.parse().map_err(|_| format!("invalid port `{p}`"))?,
    };
    Ok((host.to_string(), port))
}

impl OriginUrl {
    /// The `Host` header value: `host[:port]` (port omitted when it is
    /// the scheme's default).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match (self.port, self.tls) {
            (80, false) | (443, true) => host,
            (p, _) => format!("{host}:{p}"),
        }
    }

    /// The origin path for `rest` (the request path after the cache
    /// prefix): `{base}/{rest}`.
    pub fn path_for(&self, rest: &str) -> String {
        format!("{}/{}", self.base_path, rest)
    }
}

/// Validators of a stored response, sent to revalidate it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Validators<'a> {
    /// The origin's `ETag`, for `If-None-Match`.
    pub etag: Option<&'a [u8]>,
    /// `Last-Modified`, for `If-Modified-Since`.
    pub last_modified: Option<&'a [u8]>,
}

/// Encodes `GET {path}[?{query}]` with the forwarded header lines, a
/// `Host` for the origin, `Via`, and the validators if any.
pub fn encode_request<'a>(
    url: &OriginUrl,
    path: &str,
    query: &str,
    forwarded: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    validators: Validators<'_>,
) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(path.as_bytes());
    if !query.is_empty() {
        out.push(b'?');
        out.extend_from_slice(query.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(url.authority().as_bytes());
    out.extend_from_slice(b"\r\nVia: 1.1 corecast\r\n");
    let mut line = |k: &[u8], v: &[u8]| {
        out.extend_from_slice(k);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    };
    for (k, v) in forwarded {
        line(k, v);
    }
    if let Some(t) = validators.etag {
        line(b"If-None-Match", t);
    }
    if let Some(t) = validators.last_modified {
        line(b"If-Modified-Since", t);
    }
    out.extend_from_slice(b"\r\n");
    out.into()
}

/// How the body of a response is delimited (RFC 9112 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (204, 304).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the origin closes the connection.
    UntilClose,
}

/// A parsed origin response head.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    /// Status code.
    pub status: u16,
    /// Header lines (slices of the received head).
    pub headers: Vec<(Bytes, Bytes)>,
    /// Body framing.
    pub framing: Framing,
    /// Whether the connection may carry another request afterwards.
    pub reusable: bool,
}

/// Why an origin response is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseError {
    /// The head is over `max_head` bytes.
    HeadTooLarge,
    /// More than [`MAX_RESPONSE_HEADERS`] header lines.
    TooManyHeaders,
    /// Not HTTP/1.x.
    Malformed(&'static str),
    /// The body is over `max_body` bytes.
    BodyTooLarge,
    /// A broken chunked body.
    Chunked(ChunkedError),
    /// The connection ended before the body did.
    Truncated,
}

impl fmt::Display for ResponseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResponseError::HeadTooLarge => f.write_str("response head too large"),
            ResponseError::TooManyHeaders => f.write_str("too many response headers"),
            ResponseError::Malformed(why) => f.write_str(why),
            ResponseError::BodyTooLarge => f.write_str("response body too large"),
            ResponseError::Chunked(e) => write!(f, "{e}"),
            ResponseError::Truncated => f.write_str("connection closed inside the response"),
        }
    }
}

impl std::error::Error for ResponseError {}

/// Parses the next final response head at the front of `buf`, skipping
/// interim 1xx responses, and removes it from `buf` (the body follows).
/// `Ok(None)`: incomplete, nothing consumed beyond skipped 1xx heads.
pub fn parse_response_head(
    buf: &mut BytesMut,
    max_head: usize,
) -> Result<Option<ResponseHead>, ResponseError> {
    loop {
        let mut storage = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
        let mut resp = httparse::Response::new(&mut storage);
        let len = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) if n > max_head => {
                return Err(ResponseError::HeadTooLarge)
            }
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() >= max_head => {
                return Err(ResponseError::HeadTooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::TooManyHeaders),
            Err(_) => return Err(ResponseError::Malformed("malformed response head")),
        };
        let status = resp.code.unwrap_or(0);
        let version = resp.version.unwrap_or(0);
        let base = buf.as_ptr() as usize;
        let spans: Vec<_> = resp
            .headers
            .iter()
            .map(|h| {
                let n = h.name.as_ptr() as usize - base;
                let v = h.value.as_ptr() as usize - base;
                ((n, n + h.name.len()), (v, v + h.value.len()))
            })
            .collect();
        let head = buf.split_to(len).freeze();
        if status == 101 {
            return Err(ResponseError::Malformed("unexpected 101 from the origin"));
        }
        if (100..200).contains(&status) {
            continue;
        }
        let headers = spans
            .into_iter()
            .map(|((a, b), (c, d))| (head.slice(a..b), head.slice(c..d)))
            .collect();
        return head_of(status, version, headers).map(Some);
    }
}

fn head_of(
    status: u16,
    version: u8,
    headers: Vec<(Bytes, Bytes)>,
) -> Result<ResponseHead, ResponseError> {
    let framing = framing(status, &headers)?;
    let has_token = |token: &[u8]| {
        values(&headers, "connection")
            .flat_map(|v| v.split(|&b| b == b','))
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
    };
    let persistent = if version >= 1 {
        !has_token(b"close")
    } else {
        has_token(b"keep-alive")
    };
    let te_and_cl = values(&headers, "transfer-encoding").next().is_some()
        && values(&headers, "content-length").next().is_some();
    Ok(ResponseHead {
        status,
        reusable: persistent && framing != Framing::UntilClose && !te_and_cl,
        headers,
        framing,
    })
}

/// The values of header `name` (case-insensitive).
pub fn values<'a>(
    headers: &'a [(Bytes, Bytes)],
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, v)| &v[..])
}

fn framing(status: u16, headers: &[(Bytes, Bytes)]) -> Result<Framing, ResponseError> {
    if status == 204 || status == 304 {
        return Ok(Framing::Empty);
    }
    // Transfer-Encoding overrides Content-Length (RFC 9112 6.3 item 3);
    // such a connection is not reused (see `head_of`).
    let codings: Vec<&[u8]> = values(headers, "transfer-encoding")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|c| !c.is_empty())
        .collect();
    if let Some(last) = codings.last() {
        return Ok(if last.eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked
        } else {
            Framing::UntilClose
        });
    }
    let mut length = None;
    for v in values(headers, "content-length").flat_map(|v| v.split(|&b| b == b',')) {
        let v = v.trim_ascii();
        if v.is_empty() || !v.iter().all(u8::is_ascii_digit) || v.len() > 19 {
            return Err(ResponseError::Malformed("invalid Content-Length"));
        }
        let n: u64 = std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(ResponseError::Malformed("invalid Content-Length"))?;
        if length.is_some_and(|l| l != n) {
            return Err(ResponseError::Malformed("conflicting Content-Length"));
        }
        length = Some(n);
    }
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

/// Reads a body of some framing, bounded by `max_body`.
#[derive(Debug, Clone)]
pub enum BodyDecoder {
    /// `left` bytes to go.
    Length {
        /// Bytes still expected.
        left: usize,
    },
    /// A chunked body.
    Chunked(ChunkedDecoder),
    /// Everything until EOF.
    UntilClose {
        /// The bound.
        max: usize,
    },
}

impl BodyDecoder {
    /// A decoder for `framing`; a `Content-Length` over `max_body` is
    /// refused before anything is read. `max_line` bounds chunk extensions
    /// and trailers.
    pub fn new(framing: Framing, max_body: usize, max_line: usize) -> Result<Self, ResponseError> {
        Ok(match framing {
            Framing::Empty => BodyDecoder::Length { left: 0 },
            Framing::Length(n) => BodyDecoder::Length {
                left: usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= max_body)
                    .ok_or(ResponseError::BodyTooLarge)?,
            },
            Framing::Chunked => BodyDecoder::Chunked(ChunkedDecoder::new(max_body, max_line)),
            Framing::UntilClose => BodyDecoder::UntilClose { max: max_body },
        })
    }

    /// Bytes the body still needs, when known (to size the read buffer).
    pub fn expected(&self) -> Option<usize> {
        match self {
            BodyDecoder::Length { left } => Some(*left),
            _ => None,
        }
    }

    /// Moves body bytes from `input` to `out`; `Ok(true)` when complete.
    pub fn decode(
        &mut self,
        input: &mut BytesMut,
        out: &mut BytesMut,
    ) -> Result<bool, ResponseError> {
        match self {
            BodyDecoder::Length { left } => {
                let n = (*left).min(input.len());
                out.extend_from_slice(&input.split_to(n));
                *left -= n;
                Ok(*left == 0)
            }
            BodyDecoder::Chunked(d) => d.decode(input, out).map_err(|e| match e {
                ChunkedError::TooLarge { .. } => ResponseError::BodyTooLarge,
                e => ResponseError::Chunked(e),
            }),
            BodyDecoder::UntilClose { max } => {
                if out.len().saturating_add(input.len()) > *max {
                    return Err(ResponseError::BodyTooLarge);
                }
                out.extend_from_slice(&input.split());
                Ok(false)
            }
        }
    }

    /// The connection ended: complete for `UntilClose`, else truncated.
    pub fn at_eof(&self) -> Result<(), ResponseError> {
        match self {
            BodyDecoder::UntilClose { .. } => Ok(()),
            _ => Err(ResponseError::Truncated),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_urls_parse_with_defaults_and_base_paths() {
        let u: OriginUrl = "http://127.0.0.1:8081/v1/".parse().unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.base_path.as_str()),
            ("127.0.0.1", 8081, "/v1")
        );
        assert_eq!(u.authority(), "127.0.0.1:8081");
        assert_eq!(u.path_for("users/1"), "/v1/users/1");
        let u: OriginUrl = "http://example.com".parse().unwrap();
        assert_eq!((u.port, u.authority().as_str()), (80, "example.com"));
        assert_eq!(u.path_for(""), "/");
        let u: OriginUrl = "http://[::1]:9000".parse().unwrap();
        assert_eq!(
            (u.host.as_str(), u.authority().as_str()),
            ("::1", "[::1]:9000")
        );
        assert_eq!(u.to_string(), "http://[::1]:9000");
        assert!(!u.tls);
        let u: OriginUrl = "https://api.example/v2".parse().unwrap();
        assert!(u.tls);
        assert_eq!((u.port, u.authority().as_str()), (443, "api.example"));
        assert_eq!(u.to_string(), "https://api.example/v2");
        let u: OriginUrl = "https://api.example:8443".parse().unwrap();
        assert_eq!(u.authority(), "api.example:8443");
        for bad in [
            "https://",
            "ftp://a",
            "http://",
            "http://a:x",
            "http://a:99999",
            "http://u@a",
            "http://a/?q",
        ] {
            assert!(bad.parse::<OriginUrl>().is_err(), "{bad}");
        }
    }

    #[test]
    fn requests_carry_host_forwarded_headers_and_validators() {
        let u: OriginUrl = "http://o:81/base".parse().unwrap();
        let fwd: Vec<(&[u8], &[u8])> = vec![(b"Accept", b"*/*")];
        let v = Validators {
            etag: Some(b"\"x\""),
            last_modified: None,
        };
        let r = encode_request(&u, &u.path_for("a"), "b=1", fwd.into_iter(), v);
        assert_eq!(
            &r[..],
            &b"GET /base/a?b=1 HTTP/1.1\r\nHost: o:81\r\nVia: 1.1 corecast\r\n\
               Accept: */*\r\nIf-None-Match: \"x\"\r\n\r\n"[..]
        );
    }

    fn head(raw: &[u8]) -> Result<Option<ResponseHead>, ResponseError> {
        parse_response_head(&mut BytesMut::from(raw), 4096)
    }

    #[test]
    fn heads_decide_framing_and_reuse() {
        let h = head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.status, h.framing, h.reusable),
            (200, Framing::Length(5), true)
        );
        let h = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Chunked);
        let h = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.framing, h.reusable), (Framing::Chunked, false));
        let h = head(b"HTTP/1.1 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.framing, h.reusable), (Framing::UntilClose, false));
        let h = head(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Empty);
        let h = head(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.reusable, "1.0 without keep-alive");
        let h = head(b"HTTP/1.1 200 OK\r\nConnection: x, Close\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.reusable);
        let h = head(b"HTTP/1.1 200 OK\r\nContent-Length: 4, 4\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Length(4));
    }

    #[test]
    fn interim_responses_are_skipped_and_the_body_stays() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nX-A: b\r\nContent-Length: 2\r\n\r\nhi"[..],
        );
        let h = parse_response_head(&mut buf, 4096).unwrap().unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(
            h.headers[0],
            (Bytes::from_static(b"X-A"), Bytes::from_static(b"b"))
        );
        assert_eq!(&buf[..], b"hi");
    }

    #[test]
    fn bad_heads_are_refused() {
        assert_eq!(
            head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").unwrap_err(),
            ResponseError::Malformed("conflicting Content-Length")
        );
        assert!(head(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").is_err());
        assert!(head(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n").is_err());
        assert!(head(b"SMTP ready\r\n\r\n").is_err());
        assert!(head(b"HTTP/1.1 101 Switching\r\n\r\n").is_err());
        let big = format!("HTTP/1.1 200 OK\r\nX: {}\r\n", "a".repeat(5000));
        assert_eq!(
            head(big.as_bytes()).unwrap_err(),
            ResponseError::HeadTooLarge
        );
        let many: String = (0..70).map(|i| format!("H{i}: v\r\n")).collect();
        let many = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert_eq!(
            head(many.as_bytes()).unwrap_err(),
            ResponseError::TooManyHeaders
        );
        assert_eq!(
            head(b"HTTP/1.1 200 OK\r\nContent-")
                .unwrap()
                .map(|h| h.status),
            None
        );
    }

    #[test]
    fn bodies_are_bounded_per_framing() {
        assert_eq!(
            BodyDecoder::new(Framing::Length(11), 10, 64).unwrap_err(),
            ResponseError::BodyTooLarge
        );
        let mut d = BodyDecoder::new(Framing::Length(3), 10, 64).unwrap();
        let (mut input, mut out) = (BytesMut::from(&b"abcdef"[..]), BytesMut::new());
        assert_eq!(d.decode(&mut input, &mut out), Ok(true));
        assert_eq!((&out[..], &input[..]), (&b"abc"[..], &b"def"[..]));
        let mut d = BodyDecoder::new(Framing::UntilClose, 4, 64).unwrap();
        let mut out = BytesMut::new();
        assert_eq!(
            d.decode(&mut BytesMut::from(&b"abc"[..]), &mut out),
            Ok(false)
        );
        assert!(d.at_eof().is_ok());
        assert_eq!(
            d.decode(&mut BytesMut::from(&b"de"[..]), &mut out),
            Err(ResponseError::BodyTooLarge)
        );
        let mut d = BodyDecoder::new(Framing::Chunked, 4, 64).unwrap();
        let r = d.decode(&mut BytesMut::from(&b"5\r\n"[..]), &mut BytesMut::new());
        assert_eq!(r, Err(ResponseError::BodyTooLarge));
        assert_eq!(d.at_eof(), Err(ResponseError::Truncated));
    }
}
