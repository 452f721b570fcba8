//! Access control, sans-I/O: publish API keys, signed connection tokens
//! (JWT HS256), the `Origin` allow-list, and a token bucket for publish
//! rates.
//!
//! Secrets are compared in constant time and never logged; errors say what
//! was wrong with a token without echoing it.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use crate::secret::Secret;

/// Longest token accepted (header + claims + signature, base64url).
pub const MAX_TOKEN_LEN: usize = 4096;
/// Most channel patterns in one token.
pub const MAX_PATTERNS: usize = 64;

/// Constant-time equality of two secrets (time depends on lengths only).
pub fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The bearer token of an `Authorization` header value, if it is one.
pub fn bearer(value: &[u8]) -> Option<&[u8]> {
    let v = value.trim_ascii();
    let (scheme, rest) = v.split_at(v.iter().position(|&b| b == b' ')?);
    scheme
        .eq_ignore_ascii_case(b"bearer")
        .then(|| rest.trim_ascii())
}

/// Why a connection token was refused (→ 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    /// No token in the query or `Authorization` header.
    Missing,
    /// Not three base64url parts, bad JSON, or too long.
    Malformed,
    /// Not `{"alg":"HS256"}`.
    UnsupportedAlgorithm,
    /// The signature does not match.
    BadSignature,
    /// `exp` is missing or in the past.
    Expired,
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenError::Missing => "missing token",
            TokenError::Malformed => "malformed token",
            TokenError::UnsupportedAlgorithm => "token algorithm must be HS256",
            TokenError::BadSignature => "invalid token signature",
            TokenError::Expired => "token expired or without exp",
        })
    }
}

/// What a connection may do. Kept to one pointer for the common cases
/// (no tokens configured, the read-only status feed), since every
/// connection's task holds one for its whole life.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Grants {
    /// Everything (tokens are not required).
    #[default]
    All,
    /// Subscribe only (the status feed).
    ReadOnly,
    /// What a verified token lists.
    Token(Box<TokenGrants>),
}

/// The claims of a verified token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrants {
    /// Who the token was issued to (`sub`), for logs.
    pub subject: Option<String>,
    subscribe: Vec<String>,
    publish: Vec<String>,
}

impl Grants {
    /// Everything (used when tokens are not required).
    pub fn all() -> Grants {
        Grants::All
    }

    /// Nothing may be published (the status feed).
    pub fn read_only() -> Grants {
        Grants::ReadOnly
    }

    /// Who the token was issued to, if a token was used.
    pub fn subject(&self) -> Option<&str> {
        match self {
            Grants::Token(t) => t.subject.as_deref(),
            _ => None,
        }
    }

    /// May the holder subscribe to `channel`?
    pub fn may_subscribe(&self, channel: &str) -> bool {
        match self {
            Grants::All | Grants::ReadOnly => true,
            Grants::Token(t) => t.subscribe.iter().any(|p| pattern_matches(p, channel)),
        }
    }

    /// May the holder publish on `channel`?
    pub fn may_publish(&self, channel: &str) -> bool {
        match self {
            Grants::All => true,
            Grants::ReadOnly => false,
            Grants::Token(t) => t.publish.iter().any(|p| pattern_matches(p, channel)),
        }
    }
}

/// `*` matches everything, `news.*` every name starting with `news.`,
/// anything else only itself.
fn pattern_matches(pattern: &str, channel: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => channel.starts_with(prefix),
        None => pattern == channel,
    }
}

#[derive(Deserialize)]
struct Header<'a> {
    alg: &'a str,
}

#[derive(Deserialize)]
struct Claims {
    exp: Option<u64>,
    sub: Option<String>,
    #[serde(default)]
    subscribe: Vec<String>,
    #[serde(default)]
    publish: Vec<String>,
}

/// Verifies a JWT (HS256) against `secret` at time `now` (seconds since
/// the epoch). Claims: `exp` (required), `sub`, `subscribe` and `publish`
/// (lists of channel patterns).
pub fn verify_token(token: &[u8], secret: &[u8], now: u64) -> Result<Grants, TokenError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::Malformed);
    }
    let mut parts = token.split(|&b| b == b'.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let header = b64(h)?;
    let header: Header<'_> = serde_json::from_slice(&header).map_err(|_| TokenError::Malformed)?;
    if header.alg != "HS256" {
        return Err(TokenError::UnsupportedAlgorithm);
    }
    let signature = b64(s)?;
    let signed_len = h.len() + 1 + c.len();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(&token[..signed_len]);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&signature)
        .map_err(|_| TokenError::BadSignature)?;
    let claims: Claims = serde_json::from_slice(&b64(c)?).map_err(|_| TokenError::Malformed)?;
    if claims.exp.is_none_or(|exp| exp <= now) {
        return Err(TokenError::Expired);
    }
    if claims.subscribe.len() + claims.publish.len() > MAX_PATTERNS {
        return Err(TokenError::Malformed);
    }
    Ok(Grants::Token(Box::new(TokenGrants {
        subject: claims.sub,
        subscribe: claims.subscribe,
        publish: claims.publish,
    })))
}

fn b64(part: &[u8]) -> Result<Vec<u8>, TokenError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenError::Malformed)
}

/// Signs claims into a JWT (HS256): for tests, the load generator and
/// operators' tooling.
pub fn sign_token(claims_json: &str, secret: &[u8]) -> String {
    let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut token = format!(
        "{}.{}",
        enc.encode(br#"{"alg":"HS256","typ":"JWT"}"#),
        enc.encode(claims_json)
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(token.as_bytes());
    let sig = enc.encode(mac.finalize().into_bytes());
    token.push('.');
    token.push_str(&sig);
    token
}

/// Seconds since the epoch, for token expiry.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The value of `name` in a query string (no percent-decoding: tokens are
/// base64url and need none).
pub fn query_param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

/// Whether a browser `Origin` may upgrade: allowed when the list is empty
/// (no restriction), when the request has no `Origin` (not a browser), or
/// when it matches an entry exactly (ASCII case-insensitive).
pub fn origin_allowed(allow: &[String], origin: Option<&[u8]>) -> bool {
    match origin {
        _ if allow.is_empty() => true,
        None => true,
        Some(o) => allow.iter().any(|a| a.as_bytes().eq_ignore_ascii_case(o)),
    }
}

/// A token bucket: `rate` tokens per second, holding at most `burst`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket; `rate == 0` means unlimited.
    pub fn new(rate: u32, burst: u32, now_ms: u64) -> Self {
        TokenBucket {
            rate: f64::from(rate),
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            last_ms: now_ms,
        }
    }

    /// Takes one token; otherwise returns how many milliseconds until one
    /// is available.
    pub fn take(&mut self, now_ms: u64) -> Result<(), u64> {
        if self.rate == 0.0 {
            return Ok(());
        }
        let elapsed = now_ms.saturating_sub(self.last_ms) as f64 / 1000.0;
        self.last_ms = now_ms.max(self.last_ms);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err((((1.0 - self.tokens) / self.rate) * 1000.0).ceil().max(1.0) as u64)
        }
    }
}

/// Why an upgrade or request is refused: status and a short reason.
pub type Refusal = (u16, &'static str);

/// Checks a WebSocket upgrade against the `Origin` allow-list and, when a
/// token secret is configured, the connection token (from `?token=` or
/// `Authorization: Bearer`); `channel` is the channel of a `/ws/{channel}`
/// Who may publish and subscribe (`--publish-key`, `--token-secret`,
/// `--allowed-origins`, `--publish-rate`), owned by this layer.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Bearer key required by `POST /publish` (None = open).
    pub publish_key: Option<Secret>,
    /// HS256 secret of connection tokens (None = no token required).
    pub token_secret: Option<Secret>,
    /// Browser origins allowed to upgrade (empty = any).
    pub allowed_origins: Vec<String>,
    /// Messages per second one connection may publish (0 = unlimited).
    pub publish_rate: u32,
}

/// upgrade. Returns what the connection may do.
pub fn authorize_upgrade(
    cfg: &AuthConfig,
    req: &crate::http::Request,
    channel: Option<&str>,
) -> Result<Grants, Refusal> {
    if !origin_allowed(&cfg.allowed_origins, req.origin.as_deref()) {
        return Err((403, "origin not allowed"));
    }
    let Some(secret) = &cfg.token_secret else {
        return Ok(match &cfg.publish_key {
            None => Grants::all(),
            Some(key) => publisher_grants(key, req)?,
        });
    };
    let token = req
        .query
        .as_deref()
        .and_then(|q| query_param(q, "token"))
        .map(str::as_bytes)
        .or_else(|| req.authorization.as_deref().and_then(bearer))
        .ok_or((401, "missing token"))?;
    let grants = verify_token(token, secret.0.as_bytes(), unix_now()).map_err(|e| match e {
        TokenError::Missing => (401, "missing token"),
        TokenError::Malformed => (401, "malformed token"),
        TokenError::UnsupportedAlgorithm => (401, "token algorithm must be HS256"),
        TokenError::BadSignature => (401, "invalid token signature"),
        TokenError::Expired => (401, "token expired or without exp"),
    })?;
    match channel {
        Some(c) if !grants.may_subscribe(c) => Err((403, "token does not grant this channel")),
        _ => Ok(grants),
    }
}

/// With a publish key and no token secret, a WebSocket may publish only
/// when it presented the key at the upgrade (`?key=` or `Authorization:
/// Bearer`); without one it may subscribe only. A wrong key is refused
/// (401) rather than silently downgraded, so a misconfigured publisher
/// notices at once.
fn publisher_grants(key: &Secret, req: &crate::http::Request) -> Result<Grants, Refusal> {
    let given = req
        .query
        .as_deref()
        .and_then(|q| query_param(q, "key"))
        .map(str::as_bytes)
        .or_else(|| req.authorization.as_deref().and_then(bearer));
    match given {
        None => Ok(Grants::read_only()),
        Some(k) if secrets_equal(k, key.0.as_bytes()) => Ok(Grants::all()),
        Some(_) => Err((401, "invalid publish key")),
    }
}

/// Checks `Authorization: Bearer KEY` against the configured publish key.
pub fn authorize_publish(cfg: &AuthConfig, req: &crate::http::Request) -> Result<(), Refusal> {
    let Some(key) = &cfg.publish_key else {
        return Ok(());
    };
    match req.authorization.as_deref().and_then(bearer) {
        Some(given) if secrets_equal(given, key.0.as_bytes()) => Ok(()),
        Some(_) => Err((401, "invalid publish key")),
        None => Err((401, "missing publish key")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"k3y";

    #[test]
    fn a_signed_token_grants_its_patterns() {
        let t = sign_token(
            r#"{"exp":2000,"sub":"ana","subscribe":["news.*","chat"],"publish":["chat"]}"#,
            SECRET,
        );
        let g = verify_token(t.as_bytes(), SECRET, 1000).unwrap();
        assert_eq!(g.subject(), Some("ana"));
        assert!(g.may_subscribe("news.eu") && g.may_subscribe("chat"));
        assert!(!g.may_subscribe("newsx") && !g.may_subscribe("chat2"));
        assert!(g.may_publish("chat") && !g.may_publish("news.eu"));
    }

    #[test]
    fn tampered_expired_and_foreign_tokens_are_refused() {
        let t = sign_token(r#"{"exp":2000,"subscribe":["*"]}"#, SECRET);
        assert_eq!(
            verify_token(t.as_bytes(), b"other", 1000),
            Err(TokenError::BadSignature)
        );
        assert_eq!(
            verify_token(t.as_bytes(), SECRET, 2000),
            Err(TokenError::Expired)
        );
        let no_exp = sign_token(r#"{"subscribe":["*"]}"#, SECRET);
        assert_eq!(
            verify_token(no_exp.as_bytes(), SECRET, 1),
            Err(TokenError::Expired)
        );
        let mut forged = t.clone().into_bytes();
        let dot = forged.iter().position(|&b| b == b'.').unwrap();
        forged[dot + 2] ^= 1;
        assert!(verify_token(&forged, SECRET, 1000).is_err());
        let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let none = format!(
            "{}.{}.",
            enc.encode(r#"{"alg":"none"}"#),
            enc.encode(r#"{"exp":9}"#)
        );
        assert_eq!(
            verify_token(none.as_bytes(), SECRET, 1),
            Err(TokenError::UnsupportedAlgorithm)
        );
        for bad in [&b""[..], b"a.b", b"a.b.c.d", b"!!.!!.!!"] {
            assert_eq!(verify_token(bad, SECRET, 1), Err(TokenError::Malformed));
        }
        assert_eq!(
            verify_token(&[b'a'; MAX_TOKEN_LEN + 1], SECRET, 1),
            Err(TokenError::Malformed)
        );
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(secrets_equal(b"abc", b"abc"));
        assert!(!secrets_equal(b"abc", b"abd") && !secrets_equal(b"abc", b"ab"));
        assert_eq!(bearer(b"Bearer  xyz "), Some(&b"xyz"[..]));
        assert_eq!(bearer(b"bearer xyz"), Some(&b"xyz"[..]));
        assert_eq!(bearer(b"Basic xyz"), None);
        assert_eq!(query_param("a=1&token=t.k.n&b", "token"), Some("t.k.n"));
        assert_eq!(query_param("tokens=1", "token"), None);
    }

    #[test]
    fn origins_are_checked_only_when_listed() {
        let allow = vec!["https://app.example".to_string()];
        assert!(origin_allowed(&[], Some(b"https://evil")));
        assert!(origin_allowed(&allow, None));
        assert!(origin_allowed(&allow, Some(b"HTTPS://APP.EXAMPLE")));
        assert!(!origin_allowed(&allow, Some(b"https://evil")));
    }

    #[test]
    fn the_bucket_refills_at_its_rate() {
        let mut b = TokenBucket::new(10, 2, 0);
        assert!(b.take(0).is_ok() && b.take(0).is_ok());
        assert_eq!(b.take(0), Err(100));
        assert_eq!(b.take(50), Err(50));
        assert!(b.take(100).is_ok());
        let mut unlimited = TokenBucket::new(0, 0, 0);
        assert!((0..10_000).all(|_| unlimited.take(0).is_ok()));
    }
}
