//! Turning an origin response into an [`Entry`] and a verdict: which
//! headers are kept, the ETag, the date, the lifetimes, `Vary`; and
//! refreshing a stored entry from a 304 (RFC 9111 4.3.4).

use bytes::Bytes;

use super::date;
use super::entry::Entry;
use super::key::{self, Vary};
use super::origin::values;
use super::policy::{self, CacheControl, Defaults, Facts, Verdict};
use super::response::body_etag;

/// Headers a stored (shared) response keeps; everything else the origin
/// sent is only passed to the client whose request fetched it when the
/// response is not shared. `ETag` is kept separately.
const STORED_HEADERS: &[&str] = &[
    "access-control-allow-credentials",
    "access-control-allow-origin",
    "access-control-expose-headers",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-location",
    "content-type",
    "date",
    "expires",
    "last-modified",
    "link",
    "location",
    "vary",
    "x-content-type-options",
];

/// Response headers never passed on: hop-by-hop (RFC 9110 7.6.1), framing
/// (corecast frames its own responses), and those corecast sets itself.
const NEVER_PASSED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "age",
    "etag",
    "cache-status",
];

fn is_in(name: &[u8], list: &[&str]) -> bool {
    list.iter().any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
}

/// The headers to keep: the stored set when `shared`, otherwise every
/// end-to-end header (minus those named in `Connection`).
pub fn kept_headers(headers: &[(Bytes, Bytes)], shared: bool) -> Vec<(Bytes, Bytes)> {
    let listed: Vec<&[u8]> = values(headers, "connection")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .collect();
    headers
        .iter()
        .filter(|(k, _)| {
            if shared {
                is_in(k, STORED_HEADERS)
            } else {
                !is_in(k, NEVER_PASSED) && !listed.iter().any(|l| k.eq_ignore_ascii_case(l))
            }
        })
        .cloned()
        .collect()
}

/// An origin response made ready to serve and perhaps store.
#[derive(Debug, Clone)]
pub struct Built {
    /// The response.
    pub entry: Entry,
    /// Storable, shareable, lifetimes.
    pub verdict: Verdict,
    /// Its `Vary`.
    pub vary: Vary,
}

/// What the origin sent.
#[derive(Debug, Clone, Copy)]
pub struct OriginResponse<'a> {
    /// Status.
    pub status: u16,
    /// Header lines.
    pub headers: &'a [(Bytes, Bytes)],
    /// Body.
    pub body: &'a Bytes,
}

/// What of the request decides whether its response may be shared.
#[derive(Debug, Default, Clone, Copy)]
pub struct Asked<'a> {
    /// The request carried a `--cache-bypass-headers` header.
    pub personal: bool,
    /// The request's `Origin`.
    pub origin: Option<&'a [u8]>,
}

/// Builds the entry for an origin response received at `now_ms`, for the
/// request described by `asked`.
pub fn from_origin(r: OriginResponse<'_>, asked: Asked<'_>, now_ms: u64, d: &Defaults) -> Built {
    let cc = CacheControl::parse(values(r.headers, "cache-control"));
    let vary = key::parse_vary(values(r.headers, "vary"));
    let first = |name| values(r.headers, name).next();
    let varies_on_origin = matches!(&vary, Vary::Names(n) if n.iter().any(|n| n == "origin"));
    let acao = first("access-control-allow-origin").map(<[u8]>::trim_ascii);
    let expires_ms = first("expires").map(|e| {
        let date = first("date").and_then(date::parse_ms).unwrap_or(now_ms);
        date::parse_ms(e).map_or(0, |e| e.saturating_sub(date))
    });
    let facts = Facts {
        status: r.status,
        vary_any: vary == Vary::Any,
        sets_cookie: first("set-cookie").is_some(),
        personal: asked.personal,
        reflects_origin: !varies_on_origin
            && acao.is_some_and(|a| a != b"*" && Some(a) == asked.origin.map(<[u8]>::trim_ascii)),
        has_cache_control: first("cache-control").is_some(),
        pragma_no_cache: values(r.headers, "pragma").any(|p| {
            p.split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"no-cache"))
        }),
        expires_ms,
        last_modified: first("last-modified").is_some(),
    };
    let verdict = policy::decide(&cc, facts, d);
    let origin_etag = values(r.headers, "etag").next().map(Bytes::copy_from_slice);
    let etag_from_origin = origin_etag.is_some();
    let etag = origin_etag.or_else(|| matches!(r.status, 200 | 203).then(|| body_etag(r.body)));
    let entry = Entry {
        status: r.status,
        date_ms: now_ms.saturating_sub(age_ms(r.headers)),
        life: verdict.life,
        etag,
        etag_from_origin,
        headers: kept_headers(r.headers, verdict.shareable),
        body: r.body.clone(),
    };
    Built {
        entry,
        verdict,
        vary,
    }
}

/// The stored `stale` entry, refreshed by a 304 with `headers`: the 304's
/// stored headers replace those of the same name, and freshness is
/// computed again from the result (RFC 9111 4.3.4).
pub fn revalidated(
    stale: &Entry,
    headers: &[(Bytes, Bytes)],
    asked: Asked<'_>,
    now_ms: u64,
    d: &Defaults,
) -> Built {
    let update = kept_headers(headers, true);
    let mut merged: Vec<(Bytes, Bytes)> = stale
        .headers
        .iter()
        .filter(|(k, _)| !update.iter().any(|(u, _)| u.eq_ignore_ascii_case(k)))
        .cloned()
        .collect();
    merged.extend(update);
    let body = stale.body.clone();
    let mut built = from_origin(
        OriginResponse {
            status: stale.status,
            headers: &merged,
            body: &body,
        },
        asked,
        // The merged headers carry no `Age`; the 304's own counts.
        now_ms.saturating_sub(age_ms(headers)),
        d,
    );
    if let Some(t) = values(headers, "etag").next() {
        built.entry.etag = Some(Bytes::copy_from_slice(t));
        built.entry.etag_from_origin = true;
    } else {
        built.entry.etag.clone_from(&stale.etag);
        built.entry.etag_from_origin = stale.etag_from_origin;
    }
    built
}

/// The origin's `Age`, in ms (0 when absent or invalid).
fn age_ms(headers: &[(Bytes, Bytes)]) -> u64 {
    values(headers, "age")
        .next()
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(0, |s| s.min(1 << 31).saturating_mul(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Defaults = Defaults {
        ttl_ms: 60_000,
        swr_ms: 10_000,
        sie_ms: 300_000,
    };

    fn h(pairs: &[(&'static str, &'static str)]) -> Vec<(Bytes, Bytes)> {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    Bytes::from_static(k.as_bytes()),
                    Bytes::from_static(v.as_bytes()),
                )
            })
            .collect()
    }

    fn build(status: u16, headers: &[(&'static str, &'static str)], auth: bool) -> Built {
        let headers = h(headers);
        let body = Bytes::from_static(b"body");
        from_origin(
            OriginResponse {
                status,
                headers: &headers,
                body: &body,
            },
            Asked {
                personal: auth,
                origin: None,
            },
            100_000,
            &D,
        )
    }

    #[test]
    fn shared_responses_keep_only_content_headers() {
        let b = build(
            200,
            &[
                ("Content-Type", "text/plain"),
                ("Cache-Control", "max-age=5"),
                ("X-Internal", "1"),
                ("Connection", "keep-alive"),
                ("Content-Length", "4"),
                ("Age", "3"),
                ("ETag", "\"o\""),
            ],
            false,
        );
        let names: Vec<_> = b.entry.headers.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            names,
            vec![
                Bytes::from_static(b"Content-Type"),
                Bytes::from_static(b"Cache-Control")
            ]
        );
        assert_eq!(b.entry.etag.as_deref(), Some(&b"\"o\""[..]));
        assert!(b.entry.etag_from_origin);
        assert_eq!(b.entry.date_ms, 97_000, "origin Age counts");
        assert!(b.verdict.storable);
        assert_eq!(b.verdict.life.fresh_ms, 5000);
    }

    #[test]
    fn private_responses_pass_end_to_end_headers_to_their_client_only() {
        let b = build(
            200,
            &[
                ("Cache-Control", "private"),
                ("Set-Cookie", "a=1"),
                ("X-Internal", "1"),
                ("Connection", "X-Hop"),
                ("X-Hop", "1"),
                ("Transfer-Encoding", "chunked"),
            ],
            false,
        );
        assert!(!b.verdict.shareable);
        let names: Vec<_> = b.entry.headers.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            names,
            vec![
                Bytes::from_static(b"Cache-Control"),
                Bytes::from_static(b"Set-Cookie"),
                Bytes::from_static(b"X-Internal")
            ]
        );
        assert_eq!(b.entry.etag, Some(body_etag(b"body")), "computed");
        assert!(!b.entry.etag_from_origin);
        assert_eq!(
            build(404, &[], false).entry.etag,
            None,
            "only 200/203 get one"
        );
    }

    #[test]
    fn vary_and_authorization_shape_the_verdict() {
        assert_eq!(
            build(200, &[("Vary", "Accept")], false).vary,
            Vary::Names(vec!["accept".into()])
        );
        assert!(!build(200, &[("Vary", "*")], false).verdict.storable);
        assert!(!build(200, &[], true).verdict.storable);
        assert!(
            build(200, &[("Cache-Control", "public")], true)
                .verdict
                .storable
        );
    }

    #[test]
    fn a_304_refreshes_headers_and_lifetimes_but_keeps_the_body() {
        let stale = build(
            200,
            &[
                ("Cache-Control", "max-age=1"),
                ("Content-Type", "text/plain"),
                ("ETag", "\"v1\""),
            ],
            false,
        )
        .entry;
        let nm = h(&[("Cache-Control", "max-age=30"), ("X-Other", "ignored")]);
        let b = revalidated(&stale, &nm, Asked::default(), 200_000, &D);
        assert_eq!(b.entry.body, stale.body);
        assert_eq!(b.entry.date_ms, 200_000);
        assert_eq!(b.verdict.life.fresh_ms, 30_000);
        assert_eq!(b.entry.etag.as_deref(), Some(&b"\"v1\""[..]));
        assert!(b.entry.header("content-type").eq([&b"text/plain"[..]]));
        assert!(b.entry.header("x-other").next().is_none());
        assert!(b.verdict.storable);
    }
}
