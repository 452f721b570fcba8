//! Responses to clients: the stored (or fetched) response with `Age`,
//! `ETag` and an RFC 9211 `Cache-Status`; 304s for a matching
//! `If-None-Match`; JSON errors for origin failures.

use std::fmt;

use bytes::Bytes;

use super::entry::Entry;

/// The cache's name in `Cache-Status`.
pub const CACHE_NAME: &str = "corecast";

/// Why a request went forward to the origin (RFC 9211 2.2 `fwd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// The store was not consulted (unavailable).
    Bypass,
    /// Nothing stored.
    Miss,
    /// Stored, but not for these `Vary` values.
    VaryMiss,
    /// Stored but stale.
    Stale,
}

impl Fwd {
    fn as_str(self) -> &'static str {
        match self {
            Fwd::Bypass => "bypass",
            Fwd::Miss => "miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Stale => "stale",
        }
    }
}

/// One `Cache-Status` entry (RFC 9211), e.g.
/// `corecast; hit; ttl=42` or `corecast; fwd=miss; fwd-status=200; stored`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStatus {
    /// Served from the store.
    pub hit: bool,
    /// Went (or is going, in the background) to the origin.
    pub fwd: Option<Fwd>,
    /// The origin's status, when it answered.
    pub fwd_status: Option<u16>,
    /// Remaining freshness in seconds (negative once stale).
    pub ttl_s: Option<i64>,
    /// The response was stored.
    pub stored: bool,
    /// Answered by another request's origin fetch (RFC 9211 `collapsed`).
    pub collapsed: bool,
    /// Extra detail (`stale-while-revalidate`, `stale-if-error`, ...).
    pub detail: Option<&'static str>,
}

impl fmt::Display for CacheStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(CACHE_NAME)?;
        if self.hit {
            f.write_str("; hit")?;
        }
        if let Some(fwd) = self.fwd {
            write!(f, "; fwd={}", fwd.as_str())?;
        }
        if let Some(s) = self.fwd_status {
            write!(f, "; fwd-status={s}")?;
        }
        if let Some(t) = self.ttl_s {
            write!(f, "; ttl={t}")?;
        }
        if self.stored {
            f.write_str("; stored")?;
        }
        if self.collapsed {
            f.write_str("; collapsed")?;
        }
        if let Some(d) = self.detail {
            write!(f, "; detail={d}")?;
        }
        Ok(())
    }
}

/// A strong validator for a body without one: `"cc-{FNV-1a 64 hex}"`.
/// FNV is not collision-resistant against an adversary, but the body comes
/// from the origin, not the client, and it is fast and stable across builds.
pub fn body_etag(body: &[u8]) -> Bytes {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in body {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Bytes::from(format!("\"cc-{h:016x}\""))
}

/// Whether `If-None-Match` lines match `etag`: `*`, or any listed tag by
/// weak comparison (RFC 9110 13.1.2: `W/` is ignored).
pub fn if_none_match<'a>(lines: impl IntoIterator<Item = &'a [u8]>, etag: &[u8]) -> bool {
    fn opaque(t: &[u8]) -> &[u8] {
        let t = t.trim_ascii();
        t.strip_prefix(b"W/").unwrap_or(t)
    }
    let want = opaque(etag);
    lines.into_iter().any(|line| {
        line.trim_ascii() == b"*" || split_tags(line).into_iter().any(|t| opaque(t) == want)
    })
}

/// Splits an entity-tag list at commas outside quotes.
fn split_tags(line: &[u8]) -> Vec<&[u8]> {
    let (mut out, mut start, mut quoted) = (Vec::new(), 0, false);
    for (i, &b) in line.iter().enumerate() {
        match b {
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                out.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&line[start..]);
    out
}

/// How to answer: connection handling and the client's conditional.
#[derive(Debug, Clone, Copy)]
pub struct Reply<'a> {
    /// Keep the connection open.
    pub keep_alive: bool,
    /// `HEAD`: describe the body, do not send it.
    pub head_only: bool,
    /// The client's `If-None-Match`, if any.
    pub if_none_match: Option<&'a [u8]>,
}

/// Headers a 304 repeats from the 200 (RFC 9110 15.4.5).
const NOT_MODIFIED_KEEPS: &[&str] = &[
    "cache-control",
    "content-location",
    "date",
    "expires",
    "vary",
];

/// A response ready to write: the status line and headers, and a body that
/// shares the stored entry's memory (a cached object answered to a
/// thousand clients at once is held once, not copied per response).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Status line, headers and the blank line.
    pub head: Vec<u8>,
    /// The body (empty for HEAD, 304 and errors whose body is in `head`).
    pub body: Bytes,
}

impl From<Vec<u8>> for Answer {
    /// A response whose bytes are all in one buffer.
    fn from(head: Vec<u8>) -> Self {
        Answer {
            head,
            body: Bytes::new(),
        }
    }
}

impl Answer {
    /// The whole response in one buffer (tests, small answers).
    pub fn to_vec(&self) -> Vec<u8> {
        [&self.head[..], &self.body[..]].concat()
    }
}

/// Encodes `entry` for the client, or a 304 when its ETag matches the
/// client's `If-None-Match` (only 200/203 responses have a current
/// representation to validate).
pub fn encode(entry: &Entry, age_s: u64, status: &CacheStatus, reply: &Reply<'_>) -> Answer {
    let etag = entry.etag.as_deref();
    let not_modified = matches!(entry.status, 200 | 203)
        && matches!((reply.if_none_match, etag), (Some(inm), Some(t)) if if_none_match([inm], t));
    let code = if not_modified { 304 } else { entry.status };
    let mut out = Vec::with_capacity(256);
    head_line(&mut out, code, reply.keep_alive);
    for (k, v) in &entry.headers {
        let keep = !not_modified
            || NOT_MODIFIED_KEEPS
                .iter()
                .any(|n| k.eq_ignore_ascii_case(n.as_bytes()));
        if keep {
            header(&mut out, k, v);
        }
    }
    if let Some(t) = etag {
        header(&mut out, b"ETag", t);
    }
    header(&mut out, b"Age", age_s.to_string().as_bytes());
    header(&mut out, b"Cache-Status", status.to_string().as_bytes());
    let bodyless = not_modified || entry.status == 204 || entry.status == 304;
    if !bodyless {
        header(
            &mut out,
            b"Content-Length",
            entry.body.len().to_string().as_bytes(),
        );
    }
    out.extend_from_slice(b"\r\n");
    let body = if bodyless || reply.head_only {
        Bytes::new()
    } else {
        // A reference, not a copy.
        entry.body.clone()
    };
    Answer { head: out, body }
}

/// A JSON error (`{"error": ...}`) with a `Cache-Status`.
pub fn error(code: u16, message: &str, status: &CacheStatus, keep_alive: bool) -> Vec<u8> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut out = Vec::with_capacity(200 + body.len());
    head_line(&mut out, code, keep_alive);
    header(&mut out, b"Content-Type", b"application/json");
    header(&mut out, b"Cache-Status", status.to_string().as_bytes());
    header(
        &mut out,
        b"Content-Length",
        body.len().to_string().as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body.as_bytes());
    out
}

fn head_line(out: &mut Vec<u8>, code: u16, keep_alive: bool) {
    let conn = if keep_alive { "keep-alive" } else { "close" };
    out.extend_from_slice(
        format!("HTTP/1.1 {code} {}\r\nConnection: {conn}\r\n", reason(code)).as_bytes(),
    );
}

fn header(out: &mut Vec<u8>, k: &[u8], v: &[u8]) {
    out.extend_from_slice(k);
    out.extend_from_slice(b": ");
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
}

/// Reason phrases of the statuses an origin commonly sends (the phrase is
/// informational; unknown codes get none, which HTTP/1.1 allows).
pub fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        414 => "URI Too Long",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::policy::Lifetimes;

    fn entry(status: u16, body: &'static [u8]) -> Entry {
        Entry {
            status,
            date_ms: 0,
            life: Lifetimes::default(),
            etag: Some(body_etag(body)),
            etag_from_origin: false,
            headers: vec![
                (
                    Bytes::from_static(b"Content-Type"),
                    Bytes::from_static(b"text/plain"),
                ),
                (
                    Bytes::from_static(b"Cache-Control"),
                    Bytes::from_static(b"max-age=9"),
                ),
            ],
            body: Bytes::from_static(body),
        }
    }

    const KEEP: Reply<'static> = Reply {
        keep_alive: true,
        head_only: false,
        if_none_match: None,
    };

    #[test]
    fn cache_status_follows_rfc_9211_syntax() {
        let hit = CacheStatus {
            hit: true,
            ttl_s: Some(42),
            ..Default::default()
        };
        assert_eq!(hit.to_string(), "corecast; hit; ttl=42");
        let miss = CacheStatus {
            fwd: Some(Fwd::Miss),
            fwd_status: Some(200),
            stored: true,
            collapsed: true,
            ..Default::default()
        };
        assert_eq!(
            miss.to_string(),
            "corecast; fwd=miss; fwd-status=200; stored; collapsed"
        );
        let stale = CacheStatus {
            hit: true,
            fwd: Some(Fwd::Stale),
            ttl_s: Some(-3),
            detail: Some("stale-while-revalidate"),
            ..Default::default()
        };
        assert_eq!(
            stale.to_string(),
            "corecast; hit; fwd=stale; ttl=-3; detail=stale-while-revalidate"
        );
    }

    #[test]
    fn etags_match_weakly_in_lists_and_star() {
        let t = b"\"abc\"";
        assert!(if_none_match([&b"\"abc\""[..]], t));
        assert!(if_none_match([&b"W/\"abc\""[..]], t));
        assert!(if_none_match([&b"\"x\", W/\"abc\" "[..]], t));
        assert!(if_none_match([&b"\"a,b\", \"abc\""[..]], t));
        assert!(if_none_match([&b"*"[..]], t));
        assert!(!if_none_match([&b"\"abcd\""[..], b"\"ab\""], t));
        assert!(!if_none_match(std::iter::empty::<&[u8]>(), t));
        assert_eq!(
            body_etag(b""),
            Bytes::from_static(b"\"cc-cbf29ce484222325\"")
        );
        assert_ne!(body_etag(b"a"), body_etag(b"b"));
    }

    fn text(v: impl Into<Answer>) -> String {
        String::from_utf8(v.into().to_vec()).unwrap()
    }

    #[test]
    fn a_cached_body_is_shared_not_copied() {
        let e = entry(200, &[7u8; 4096]);
        let a = encode(&e, 0, &CacheStatus::default(), &KEEP);
        assert_eq!(
            a.body.as_ptr(),
            e.body.as_ptr(),
            "the body must be the entry's memory"
        );
        assert!(a.head.len() < 512, "the head carries no body bytes");
        let head = encode(
            &e,
            0,
            &CacheStatus::default(),
            &Reply {
                head_only: true,
                ..KEEP
            },
        );
        assert!(head.body.is_empty());
    }

    #[test]
    fn full_head_and_not_modified_responses() {
        let e = entry(200, b"hello");
        let st = CacheStatus {
            hit: true,
            ..Default::default()
        };
        let full = text(encode(&e, 7, &st, &KEEP));
        assert!(full.starts_with("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n"));
        assert!(full.contains("\r\nAge: 7\r\n"));
        assert!(full.contains("\r\nCache-Status: corecast; hit\r\n"));
        assert!(full.contains(&format!(
            "\r\nETag: {}\r\n",
            String::from_utf8_lossy(&body_etag(b"hello"))
        )));
        assert!(full.ends_with("\r\nContent-Length: 5\r\n\r\nhello"));
        let head = text(encode(
            &e,
            7,
            &st,
            &Reply {
                head_only: true,
                ..KEEP
            },
        ));
        assert!(head.ends_with("\r\nContent-Length: 5\r\n\r\n"));
        let tag = body_etag(b"hello");
        let cond = Reply {
            if_none_match: Some(&tag),
            ..KEEP
        };
        let nm = text(encode(&e, 7, &st, &cond));
        assert!(nm.starts_with("HTTP/1.1 304 Not Modified\r\n"));
        assert!(nm.contains("Cache-Control: max-age=9\r\n"));
        assert!(!nm.contains("Content-Type") && !nm.contains("Content-Length"));
        assert!(nm.ends_with("\r\n\r\n"));
        // A 404 is not a representation to validate.
        let nf = text(encode(&entry(404, b"hello"), 0, &st, &cond));
        assert!(nf.starts_with("HTTP/1.1 404 Not Found\r\n"));
        let nc = text(encode(&entry(204, b""), 0, &st, &KEEP));
        assert!(!nc.contains("Content-Length"));
    }

    #[test]
    fn errors_are_json() {
        let st = CacheStatus {
            fwd: Some(Fwd::Miss),
            ..Default::default()
        };
        let r = text(error(504, "origin timed out", &st, false));
        assert!(r.starts_with("HTTP/1.1 504 Gateway Timeout\r\nConnection: close\r\n"));
        assert!(r.ends_with("\r\n\r\n{\"error\":\"origin timed out\"}"));
    }
}
