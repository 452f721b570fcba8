//! Cache keys.
//!
//! The base key is `GET {path}[?{query}]` with the query's parameters
//! sorted by name (stable, so repeated names keep their order) and empty
//! ones dropped: `?b=2&a=1` and `?a=1&b=2&` share an entry. `HEAD` is
//! served from the `GET` entry, so the method in the key is always `GET`.
//!
//! A response with `Vary` is stored under a *variant key*: the base key
//! plus the request's values of the named headers. The base key then holds
//! a small marker naming those headers (and a nonce), so a lookup knows
//! which values to add. Purging the base key removes the marker; variants
//! stored under the old nonce can no longer be reached and expire.

use bytes::Bytes;

/// Most `Vary` names the cache keys on; a response varying on more is
/// treated like `Vary: *` (not stored).
pub const MAX_VARY_NAMES: usize = 16;

/// Separates a base key from its variant part. Request targets and header
/// values cannot contain it.
pub const VARIANT_SEP: u8 = b'\n';

/// Sorts the query's `&`-separated parameters by name, dropping empty ones.
pub fn normalize_query(query: &str) -> String {
    let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    params.sort_by_key(|p| p.split('=').next().unwrap_or(""));
    params.join("&")
}

/// `GET {path}[?{normalized query}]`.
pub fn base_key(path: &str, normalized_query: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + path.len() + normalized_query.len());
    k.extend_from_slice(b"GET ");
    k.extend_from_slice(path.as_bytes());
    if !normalized_query.is_empty() {
        k.push(b'?');
        k.extend_from_slice(normalized_query.as_bytes());
    }
    k
}

/// The base key of a purge request's `"key"`: a path with an optional
/// query, normalized like a request's.
pub fn key_of_target(target: &str) -> Vec<u8> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    base_key(path, &normalize_query(query))
}

/// What a response's `Vary` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vary {
    /// No `Vary`: one entry for every request.
    None,
    /// Keyed on these request headers (lowercase, sorted, unique).
    Names(Vec<String>),
    /// `Vary: *` or too many names: not storable.
    Any,
}

/// Parses every `Vary` field line.
pub fn parse_vary<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vary {
    let mut names = Vec::new();
    for line in lines {
        for name in line.split(|&b| b == b',') {
            let name = name.trim_ascii();
            if name == b"*" {
                return Vary::Any;
            }
            if name.is_empty() {
                continue;
            }
            match std::str::from_utf8(name) {
                Ok(n) => names.push(n.to_ascii_lowercase()),
                Err(_) => return Vary::Any,
            }
        }
    }
    names.sort();
    names.dedup();
    match names.len() {
        0 => Vary::None,
        n if n > MAX_VARY_NAMES => Vary::Any,
        _ => Vary::Names(names),
    }
}

/// The request's values of the `Vary` names: one `name:v1,v2\n` line per
/// name, values in request order, trimmed. An absent header and an empty
/// one both give `name:` — the one simplification of RFC 9111 4.1.
pub fn vary_values(names: &[String], headers: &[(Bytes, Bytes)]) -> Vec<u8> {
    let mut out = Vec::new();
    for name in names {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        let values = headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()));
        for (i, (_, v)) in values.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(v.trim_ascii());
        }
        out.push(VARIANT_SEP);
    }
    out
}

/// `{base}\n{nonce:016x}\n{vary values}`.
pub fn variant_key(base: &[u8], nonce: u64, values: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(base.len() + 18 + values.len());
    k.extend_from_slice(base);
    k.push(VARIANT_SEP);
    k.extend_from_slice(format!("{nonce:016x}").as_bytes());
    k.push(VARIANT_SEP);
    k.extend_from_slice(values);
    k
}

/// Escapes Redis `MATCH` glob characters so `prefix` matches literally.
pub fn glob_escape(prefix: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 4);
    for &b in prefix {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\' | b'^' | b'-') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_sort_by_name_stably_and_drop_empties() {
        assert_eq!(normalize_query("b=2&a=1"), "a=1&b=2");
        assert_eq!(normalize_query("&a=2&&b&a=1&"), "a=2&a=1&b");
        assert_eq!(normalize_query(""), "");
        assert_eq!(base_key("/api/x", "a=1"), b"GET /api/x?a=1");
        assert_eq!(base_key("/api/x", ""), b"GET /api/x");
        assert_eq!(key_of_target("/api/x?b=1&a=2"), b"GET /api/x?a=2&b=1");
        assert_eq!(key_of_target("/api/x"), b"GET /api/x");
    }

    #[test]
    fn vary_names_are_normalized_and_bounded() {
        let one: [&[u8]; 2] = [b"Accept-Encoding, accept-language", b"ACCEPT-ENCODING"];
        assert_eq!(
            parse_vary(one),
            Vary::Names(vec!["accept-encoding".into(), "accept-language".into()])
        );
        assert_eq!(parse_vary([&b"accept, *"[..]]), Vary::Any);
        assert_eq!(parse_vary([&b" , "[..]]), Vary::None);
        assert_eq!(parse_vary(std::iter::empty()), Vary::None);
        let many = (0..=MAX_VARY_NAMES)
            .map(|i| format!("h{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(parse_vary([many.as_bytes()]), Vary::Any);
    }

    #[test]
    fn variant_keys_differ_by_value_and_nonce() {
        let names = vec!["accept".to_string(), "x-a".to_string()];
        let vals = |h: &[(&'static str, &'static [u8])]| {
            let h: Vec<(Bytes, Bytes)> = h
                .iter()
                .map(|(k, v)| (Bytes::from_static(k.as_bytes()), Bytes::from_static(v)))
                .collect();
            vary_values(&names, &h)
        };
        let a = vals(&[("Accept", b" text/html "), ("x-a", b"1"), ("X-A", b"2")]);
        assert_eq!(a, b"accept:text/html\nx-a:1,2\n");
        let none = vals(&[]);
        assert_eq!(none, b"accept:\nx-a:\n");
        let k1 = variant_key(b"GET /a", 1, &a);
        assert!(k1.starts_with(b"GET /a\n0000000000000001\n"));
        assert_ne!(k1, variant_key(b"GET /a", 2, &a));
        assert_ne!(k1, variant_key(b"GET /a", 1, &none));
    }

    #[test]
    fn globs_are_escaped() {
        assert_eq!(glob_escape(b"/a*b?[c]\\"), b"/a\\*b\\?\\[c\\]\\\\");
        assert_eq!(glob_escape(b"/api/"), b"/api/");
    }
}
