//! `POST /cache/purge`: its JSON body and its bearer token.

use serde::Deserialize;

/// What to purge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purge {
    /// One request target (`/api/x?a=1`), normalized like a request's.
    Key(String),
    /// Every key whose path starts with this.
    Prefix(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    key: Option<String>,
    prefix: Option<String>,
}

/// Parses `{"key":"/api/x?a=1"}` or `{"prefix":"/api/"}` (exactly one).
pub fn parse(body: &[u8]) -> Result<Purge, &'static str> {
    let b: Body = serde_json::from_slice(body)
        .map_err(|_| "body must be {\"key\":\"/path?query\"} or {\"prefix\":\"/path\"}")?;
    let p = match (b.key, b.prefix) {
        (Some(k), None) => Purge::Key(k),
        (None, Some(p)) => Purge::Prefix(p),
        _ => return Err("give exactly one of \"key\" and \"prefix\""),
    };
    let s = match &p {
        Purge::Key(s) | Purge::Prefix(s) => s,
    };
    if !s.starts_with('/') || s.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err("key and prefix are paths starting with /");
    }
    Ok(p)
}

/// Whether `authorization` is `Bearer {token}`. The comparison takes the
/// same time wherever the first difference is (it depends only on the
/// lengths), so the token cannot be guessed byte by byte from timings.
pub fn bearer_matches(authorization: Option<&[u8]>, token: &[u8]) -> bool {
    let Some(v) = authorization else {
        return false;
    };
    let v = v.trim_ascii();
    let given = match v.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => v[7..].trim_ascii(),
        _ => return false,
    };
    constant_time_eq(given, token)
}

/// Compares every byte of `expected` whatever `given` holds.
fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, &e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!e);
        diff |= g ^ e;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_name_exactly_one_path() {
        assert_eq!(
            parse(br#"{"key":"/api/x?a=1"}"#),
            Ok(Purge::Key("/api/x?a=1".into()))
        );
        assert_eq!(
            parse(br#"{"prefix":"/api/"}"#),
            Ok(Purge::Prefix("/api/".into()))
        );
        for bad in [
            &br#"{}"#[..],
            br#"{"key":"/a","prefix":"/b"}"#,
            br#"{"key":"a"}"#,
            br#"{"key":"/a b"}"#,
            br#"{"other":1}"#,
            b"not json",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn bearer_tokens_compare_exactly() {
        let t = b"s3cret";
        assert!(bearer_matches(Some(b"Bearer s3cret"), t));
        assert!(bearer_matches(Some(b"bearer   s3cret "), t));
        for bad in [
            &b"Bearer s3cre"[..],
            b"Bearer s3cret2",
            b"Basic s3cret",
            b"s3cret",
            b"Bearer ",
            b"",
        ] {
            assert!(
                !bearer_matches(Some(bad), t),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(!bearer_matches(None, t));
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"\xff", b""));
    }
}
