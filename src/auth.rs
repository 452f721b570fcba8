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
/// Longest `info` claim (a member's public presence info, a JSON object).
pub const MAX_INFO: usize = 1024;
/// Shortest `--token-secret` accepted: HS256 keys shorter than the hash
/// (32 bytes) are weaker than the algorithm (RFC 7518 3.2).
pub const MIN_TOKEN_SECRET_LEN: usize = 32;

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
    /// `nbf` is in the future.
    NotYetValid,
    /// `--token-audience` is set and `aud` does not name it.
    WrongAudience,
    /// `--token-issuer` is set and `iss` is not it.
    WrongIssuer,
    /// `info` is not a JSON object of at most [`MAX_INFO`] bytes.
    BadInfo,
}

impl TokenError {
    /// The short reason sent with the 401 (never the token itself).
    pub fn message(self) -> &'static str {
        match self {
            TokenError::Missing => "missing token",
            TokenError::Malformed => "malformed token",
            TokenError::UnsupportedAlgorithm => "token algorithm must be HS256",
            TokenError::BadSignature => "invalid token signature",
            TokenError::Expired => "token expired or without exp",
            TokenError::NotYetValid => "token not valid yet (nbf)",
            TokenError::WrongAudience => "token audience does not match",
            TokenError::WrongIssuer => "token issuer does not match",
            TokenError::BadInfo => "token info must be a JSON object of at most 1 KiB",
        }
    }
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
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
    /// Who the token was issued to (`sub`), for logs; the user in
    /// presence channels.
    pub subject: Option<String>,
    /// The `info` claim (a JSON object of at most [`MAX_INFO`] bytes, as
    /// sent): the user's public info in presence channels.
    pub info: Option<String>,
    /// When the token expires (seconds since the epoch): the connection is
    /// closed with 4001 then unless it refreshed its token.
    pub exp: u64,
    subscribe: Vec<String>,
    publish: Vec<String>,
}

impl TokenGrants {
    /// Whether `other` grants exactly the same channels (a refresh may
    /// extend a connection's life, never widen or narrow what it may do).
    pub fn same_channels(&self, other: &TokenGrants) -> bool {
        self.subscribe == other.subscribe && self.publish == other.publish
    }
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

    /// The token's `exp`, if a token was used.
    pub fn expires(&self) -> Option<u64> {
        match self {
            Grants::Token(t) => Some(t.exp),
            _ => None,
        }
    }

    /// Who the token was issued to, if a token was used.
    pub fn subject(&self) -> Option<&str> {
        match self {
            Grants::Token(t) => t.subject.as_deref(),
            _ => None,
        }
    }

    /// The token's `info` claim (raw JSON object), if a token was used.
    pub fn info(&self) -> Option<&str> {
        match self {
            Grants::Token(t) => t.info.as_deref(),
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

/// `aud` is a string or an array of strings (RFC 7519 4.1.3).
#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    fn names(&self, wanted: &str) -> bool {
        match self {
            Audience::One(a) => a == wanted,
            Audience::Many(list) => list.iter().any(|a| a == wanted),
        }
    }
}

#[derive(Deserialize)]
struct Claims {
    exp: Option<u64>,
    nbf: Option<u64>,
    aud: Option<Audience>,
    iss: Option<String>,
    sub: Option<String>,
    info: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    subscribe: Vec<String>,
    #[serde(default)]
    publish: Vec<String>,
}

/// What a token's registered claims must say besides `exp`/`nbf`
/// (`--token-audience`, `--token-issuer`; `None` = not checked).
#[derive(Debug, Clone, Copy, Default)]
pub struct Expected<'a> {
    /// `aud` must be (or list) this.
    pub audience: Option<&'a str>,
    /// `iss` must be this.
    pub issuer: Option<&'a str>,
}

/// Verifies a JWT (HS256) against `secret` at time `now` (seconds since
/// the epoch). Claims: `exp` (required), `nbf`, `sub`, `subscribe` and
/// `publish` (lists of channel patterns); `aud` and `iss` are not checked.
pub fn verify_token(token: &[u8], secret: &[u8], now: u64) -> Result<Grants, TokenError> {
    verify_token_for(token, secret, now, Expected::default())
}

/// [`verify_token`], also checking `aud` and `iss` against `expected`.
pub fn verify_token_for(
    token: &[u8],
    secret: &[u8],
    now: u64,
    expected: Expected<'_>,
) -> Result<Grants, TokenError> {
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
    let exp = match claims.exp {
        Some(exp) if exp > now => exp,
        _ => return Err(TokenError::Expired),
    };
    if claims.nbf.is_some_and(|nbf| nbf > now) {
        return Err(TokenError::NotYetValid);
    }
    if let Some(want) = expected.audience {
        if !claims.aud.is_some_and(|a| a.names(want)) {
            return Err(TokenError::WrongAudience);
        }
    }
    if let Some(want) = expected.issuer {
        if claims.iss.as_deref() != Some(want) {
            return Err(TokenError::WrongIssuer);
        }
    }
    if claims.subscribe.len() + claims.publish.len() > MAX_PATTERNS {
        return Err(TokenError::Malformed);
    }
    let info = claims.info.map(|i| i.get().to_string());
    if info
        .as_deref()
        .is_some_and(|i| i.len() > MAX_INFO || !i.starts_with('{'))
    {
        return Err(TokenError::BadInfo);
    }
    Ok(Grants::Token(Box::new(TokenGrants {
        subject: claims.sub,
        info,
        exp,
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

/// When a token with `exp` (seconds since the epoch) expires, on a clock
/// that reads `clock_now_ms` now; `unix_now_ms` is the wall clock now.
/// At least 1 ms from now, so 0 can keep meaning "never".
pub fn token_deadline_ms(clock_now_ms: u64, exp: u64, unix_now_ms: u64) -> u64 {
    clock_now_ms + exp.saturating_mul(1000).saturating_sub(unix_now_ms).max(1)
}

/// Milliseconds since the epoch.
pub fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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

    /// Whether the bucket is full at `now_ms` (a fresh one is the same).
    pub fn is_full(&self, now_ms: u64) -> bool {
        let elapsed = now_ms.saturating_sub(self.last_ms) as f64 / 1000.0;
        self.rate == 0.0 || self.tokens + elapsed * self.rate >= self.burst
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

/// Who may publish and subscribe (`--publish-key`, `--token-secret`,
/// `--allowed-origins`, `--publish-rate`), owned by this layer.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Bearer key required by `POST /publish` (None = open).
    pub publish_key: Option<Secret>,
    /// HS256 secret of connection tokens (None = no token required).
    pub token_secret: Option<Secret>,
    /// `aud` every token must carry (None = not checked).
    pub token_audience: Option<String>,
    /// `iss` every token must carry (None = not checked).
    pub token_issuer: Option<String>,
    /// Browser origins allowed to upgrade (empty = any).
    pub allowed_origins: Vec<String>,
    /// Messages per second one connection may publish (0 = unlimited).
    pub publish_rate: u32,
}

/// Checks a WebSocket upgrade against the `Origin` allow-list and, when a
/// token secret is configured, the connection token (from `?token=` or
/// `Authorization: Bearer`), else the publish key if one is configured;
/// `channel` is the channel of a `/ws/{channel}` upgrade. Returns what the
/// connection may do.
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
    let grants = cfg.verify(token, secret).map_err(|e| (401, e.message()))?;
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

impl AuthConfig {
    /// Verifies a connection token (at the upgrade or on refresh) with
    /// every configured check.
    pub fn verify(&self, token: &[u8], secret: &Secret) -> Result<Grants, TokenError> {
        let expected = Expected {
            audience: self.token_audience.as_deref(),
            issuer: self.token_issuer.as_deref(),
        };
        verify_token_for(token, secret.0.as_bytes(), unix_now(), expected)
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
    fn nbf_aud_and_iss_are_checked() {
        let t = sign_token(r#"{"exp":2000,"nbf":1500,"subscribe":["*"]}"#, SECRET);
        assert_eq!(
            verify_token(t.as_bytes(), SECRET, 1000),
            Err(TokenError::NotYetValid)
        );
        assert_eq!(
            verify_token(t.as_bytes(), SECRET, 1500).unwrap().expires(),
            Some(2000)
        );
        let want = Expected {
            audience: Some("corecast"),
            issuer: Some("https://id.example"),
        };
        let ok = sign_token(
            r#"{"exp":2000,"aud":["x","corecast"],"iss":"https://id.example"}"#,
            SECRET,
        );
        assert!(verify_token_for(ok.as_bytes(), SECRET, 1000, want).is_ok());
        let one = sign_token(
            r#"{"exp":2000,"aud":"corecast","iss":"https://id.example"}"#,
            SECRET,
        );
        assert!(verify_token_for(one.as_bytes(), SECRET, 1000, want).is_ok());
        for (claims, err) in [
            (
                r#"{"exp":2000,"iss":"https://id.example"}"#,
                TokenError::WrongAudience,
            ),
            (
                r#"{"exp":2000,"aud":"other","iss":"https://id.example"}"#,
                TokenError::WrongAudience,
            ),
            (r#"{"exp":2000,"aud":"corecast"}"#, TokenError::WrongIssuer),
            (
                r#"{"exp":2000,"aud":"corecast","iss":"evil"}"#,
                TokenError::WrongIssuer,
            ),
        ] {
            let t = sign_token(claims, SECRET);
            assert_eq!(
                verify_token_for(t.as_bytes(), SECRET, 1000, want),
                Err(err),
                "{claims}"
            );
            // Unchecked when not configured.
            assert!(verify_token(t.as_bytes(), SECRET, 1000).is_ok());
        }
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
