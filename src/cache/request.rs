//! The client's request as the cache needs it: path, normalized query and
//! header lines, all slices of the head the HTTP phase already validated.

use bytes::Bytes;

use crate::http::MAX_HEADERS;

use super::key;

/// Request headers forwarded to the origin: content negotiation and the
/// CORS `Origin` (a response echoing it is stored only with `Vary:
/// Origin`, see `policy::decide`). A
/// response fetched for one client may be served to every other, so
/// nothing that could make it about that client (`X-Forwarded-*`,
/// `User-Agent`, custom headers) reaches the origin; `Host` is the
/// origin's own, conditionals and ranges are the cache's business. The
/// bypass headers (`Cookie`, `Authorization`) are added by the caller,
/// for personal requests only, whose responses are not shared.
pub const FORWARDED: &[&str] = &["accept", "accept-encoding", "accept-language", "origin"];

/// Percent-decoding rounds before a path is judged (`%25` nests).
const MAX_DECODE_ROUNDS: usize = 4;

/// One round of percent-decoding; invalid escapes stay as they are.
fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let escaped = (s[i] == b'%')
            .then(|| Some(hex(*s.get(i + 1)?)? << 4 | hex(*s.get(i + 2)?)?))
            .flatten();
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    out
}

/// A cacheable request.
#[derive(Debug, Clone)]
pub struct ClientRequest {
    /// The path, as received.
    pub path: String,
    /// The query with parameters sorted (see [`key::normalize_query`]).
    pub query: String,
    /// Header lines, slices of the head.
    pub headers: Vec<(Bytes, Bytes)>,
}

/// The head is not a request (cannot happen for a head the HTTP phase
/// parsed; kept as an error rather than a panic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadHead;

impl ClientRequest {
    /// Parses a complete request head.
    pub fn parse(head: &Bytes) -> Result<ClientRequest, BadHead> {
        let mut storage = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut storage);
        match req.parse(head) {
            Ok(httparse::Status::Complete(_)) => {}
            _ => return Err(BadHead),
        }
        let target = req.path.ok_or(BadHead)?;
        let target = target.split('#').next().unwrap_or(target);
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let headers = req
            .headers
            .iter()
            .map(|h| (head.slice_ref(h.name.as_bytes()), head.slice_ref(h.value)))
            .collect();
        Ok(ClientRequest {
            path: path.to_string(),
            query: key::normalize_query(query),
            headers,
        })
    }

    /// Whether the path has a `.` or `..` segment in any form an origin
    /// (or a server behind it) may resolve, which could take the request
    /// out of the origin's base path: so such requests are refused rather
    /// than forwarded. The path is percent-decoded until it no longer
    /// changes (`%252e` → `%2e` → `.`), `\` counts as a separator (`..\`,
    /// `%5c`), as does an encoded `/` (`..%2f`), and a segment's `;`
    /// parameters are ignored (`..;/`, as servlet containers do).
    pub fn has_dot_segment(&self) -> bool {
        let mut path = self.path.as_bytes().to_vec();
        for _ in 0..MAX_DECODE_ROUNDS {
            let decoded = percent_decode(&path);
            if decoded == path {
                break;
            }
            path = decoded;
        }
        path.split(|&b| b == b'/' || b == b'\\').any(|seg| {
            let seg = seg.split(|&b| b == b';').next().unwrap_or(seg);
            seg == b"." || seg == b".."
        })
    }

    /// The values of header `name` (case-insensitive).
    pub fn values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s [u8]> + 's {
        self.headers
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| &v[..])
    }

    /// The first value of header `name`.
    pub fn header<'s>(&'s self, name: &'s str) -> Option<&'s [u8]> {
        self.values(name).next()
    }

    /// The base cache key.
    pub fn base_key(&self) -> Vec<u8> {
        key::base_key(&self.path, &self.query)
    }

    /// This request's values of the `Vary` names (see [`key::vary_values`]).
    pub fn vary_values(&self, names: &[String]) -> Vec<u8> {
        key::vary_values(names, &self.headers)
    }

    /// Whether the request carries one of `names` (lowercase): it is
    /// personal, and bypasses the shared cache.
    pub fn has_any(&self, names: &[String]) -> bool {
        self.headers
            .iter()
            .any(|(k, _)| names.iter().any(|n| k.eq_ignore_ascii_case(n.as_bytes())))
    }

    /// Header lines to forward to the origin: those in [`FORWARDED`] or
    /// `extra` (lowercase), minus those the `Connection` header names.
    pub fn forwarded<'s>(
        &'s self,
        extra: &'s [String],
    ) -> impl Iterator<Item = (&'s [u8], &'s [u8])> + 's {
        let listed: Vec<&[u8]> = self
            .values("connection")
            .flat_map(|v| v.split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .collect();
        self.headers
            .iter()
            .filter(move |(k, _)| {
                let allowed = FORWARDED
                    .iter()
                    .any(|n| k.eq_ignore_ascii_case(n.as_bytes()))
                    || extra.iter().any(|n| k.eq_ignore_ascii_case(n.as_bytes()));
                allowed && !listed.iter().any(|l| k.eq_ignore_ascii_case(l))
            })
            .map(|(k, v)| (&k[..], &v[..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_target_query_and_headers_as_slices() {
        let head = Bytes::from_static(
            b"GET /api/a%20b?z=1&a=2 HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\
              Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nIf-None-Match: \"e\"\r\n\
              Accept-Language: de\r\n\r\n",
        );
        let r = ClientRequest::parse(&head).unwrap();
        assert_eq!(r.path, "/api/a%20b");
        assert_eq!(r.query, "a=2&z=1");
        assert_eq!(r.base_key(), b"GET /api/a%20b?a=2&z=1");
        assert_eq!(r.header("if-none-match"), Some(&b"\"e\""[..]));
        let fwd: Vec<_> = r.forwarded(&[]).map(|(k, _)| k.to_vec()).collect();
        assert_eq!(fwd, vec![b"Accept".to_vec(), b"Accept-Language".to_vec()]);
        assert_eq!(
            r.vary_values(&["accept-language".into()]),
            b"accept-language:de\n"
        );
        let (name, _) = &r.headers[0];
        assert!(head.as_ptr_range().contains(&name.as_ptr()), "zero-copy");
    }

    #[test]
    fn only_negotiation_headers_are_forwarded_and_bypass_ones_on_request() {
        let head = Bytes::from_static(
            b"GET /api/x HTTP/1.1\r\nHost: x\r\nX-Forwarded-Host: evil\r\n\
              User-Agent: u\r\nCookie: s=1\r\nAccept-Encoding: gzip\r\n\
              Authorization: Bearer t\r\nConnection: accept-encoding\r\n\r\n",
        );
        let r = ClientRequest::parse(&head).unwrap();
        let bypass = vec!["cookie".to_string(), "authorization".to_string()];
        assert!(r.has_any(&bypass));
        assert!(!r.has_any(&["x-other".to_string()]));
        let names = |extra: &[String]| -> Vec<Vec<u8>> {
            r.forwarded(extra).map(|(k, _)| k.to_vec()).collect()
        };
        assert!(names(&[]).is_empty(), "Connection-listed one dropped too");
        assert_eq!(
            names(&bypass),
            vec![b"Cookie".to_vec(), b"Authorization".to_vec()]
        );
    }

    #[test]
    fn dot_segments_are_spotted() {
        let parse = |t: &str| {
            let head = format!("GET {t} HTTP/1.1\r\n\r\n");
            ClientRequest::parse(&Bytes::from(head)).unwrap()
        };
        for bad in [
            "/api/../x",
            "/api/./x",
            "/api/%2E%2e/x",
            "/api/..",
            "/api/..%2fadmin",
            "/api/..%2Fadmin",
            "/api/%2e%2e%2fadmin",
            "/api/%2e%2e/admin",
            "/api/.%2e/admin",
            "/api/..;/admin",
            "/api/..;jsessionid=1/admin",
            "/api/.;x/admin",
            "/api/..\\admin",
            "/api/..%5cadmin",
            "/api/..%5Cadmin",
            "/api/%252e%252e/admin",
            "/api/%252e%252e%252fadmin",
            "/api/%25252e%25252e/admin",
            "/api/x/..",
        ] {
            assert!(parse(bad).has_dot_segment(), "{bad}");
        }
        for ok in [
            "/api/x",
            "/api/..x/y",
            "/api/x.y",
            "/api/x?a=..",
            "/api/",
            "/api/a%2fb",
            "/api/...",
            "/api/x;v=1",
            "/api/%zz",
            "/api/50%",
            "/api/%2",
        ] {
            assert!(!parse(ok).has_dot_segment(), "{ok}");
        }
    }

    #[test]
    fn incomplete_heads_are_errors() {
        assert_eq!(
            ClientRequest::parse(&Bytes::from_static(b"GET / HTTP/1.1\r\n")).unwrap_err(),
            BadHead
        );
    }
}
