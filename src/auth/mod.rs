//! Access control, sans-I/O: publish API keys, signed connection tokens
//! (JWT: HS256 with a shared secret; RS256/384/512 and ES256/384 with an
//! identity provider's public keys), the `Origin` allow-list, and token
//! buckets for per-connection rates.
//!
//! Secrets are compared in constant time and never logged; errors say what
//! was wrong with a token without echoing it.
//!
//! # Layout
//! - `mod.rs`: the configuration, upgrade and publish checks, helpers.
//! - `jwt`: a token's parts, signature (through `keys`) and claims.
//! - `keys`: the keys, each bound to one algorithm family (no algorithm
//!   confusion), PEM public keys.
//! - `jwks`: JSON Web Key Sets read into public keys (what is skipped),
//!   and when to fetch one (`Refresh`; the fetching is `server::auth`'s).
//! - `grants`: what a connection may do (channel patterns).
//! - `error`: why a token is refused.
//! - `bucket`: the token bucket.

mod bucket;
mod error;
mod grants;
pub mod jwks;
mod jwt;
mod keys;

use std::time::{SystemTime, UNIX_EPOCH};

pub use bucket::TokenBucket;
pub use error::TokenError;
pub use grants::{Grants, TokenGrants};
pub use jwt::{
    sign_token, verify_token, verify_token_for, Expected, MAX_INFO, MAX_PATTERNS, MAX_TOKEN_LEN,
};
pub use keys::{Alg, KeyKind, PublicKey, TokenKeys, MAX_PUBLIC_KEYS, MIN_RSA_BITS};

use crate::secret::Secret;

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

/// Why an upgrade or request is refused: status and a short reason.
pub type Refusal = (u16, &'static str);

/// Who may publish and subscribe (`--publish-key`, `--token-secret`,
/// `--allowed-origins`, `--publish-rate`), owned by this layer.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Bearer key required by `POST /publish` (None = open).
    pub publish_key: Option<Secret>,
    /// HS256 secret of connection tokens.
    pub token_secret: Option<Secret>,
    /// Public keys of connection tokens (`--token-public-key`). With
    /// neither these nor a secret, no token is required.
    pub token_public_keys: Vec<PublicKey>,
    /// `--token-jwks-url`: an identity provider's key set (`http[s]://`,
    /// checked as an origin URL), fetched and refreshed by the worker; its
    /// keys join `token_public_keys`.
    pub token_jwks_url: Option<String>,
    /// `--token-jwks-refresh`: fewest time between two fetches of the key
    /// set caused by tokens naming an unknown `kid`; ten times it is the
    /// periodic refresh.
    pub token_jwks_refresh: std::time::Duration,
    /// `--token-jwks-timeout`: time for one fetch of the key set.
    pub token_jwks_timeout: std::time::Duration,
    /// The claim that names the user instead of `sub`.
    pub token_user_claim: Option<String>,
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
    authorize_upgrade_with(cfg, req, channel, |t| cfg.verify(t))
}

/// [`authorize_upgrade`] with the token checked by `verify` (the edge's,
/// when keys also come from a JWKS it fetches).
pub fn authorize_upgrade_with(
    cfg: &AuthConfig,
    req: &crate::http::Request,
    channel: Option<&str>,
    verify: impl FnOnce(&[u8]) -> Result<Grants, TokenError>,
) -> Result<Grants, Refusal> {
    if !origin_allowed(&cfg.allowed_origins, req.origin.as_deref()) {
        return Err((403, "origin not allowed"));
    }
    if !cfg.tokens_required() {
        return Ok(match &cfg.publish_key {
            None => Grants::all(),
            Some(key) => publisher_grants(key, req)?,
        });
    }
    let token = req
        .query
        .as_deref()
        .and_then(|q| query_param(q, "token"))
        .map(str::as_bytes)
        .or_else(|| req.authorization.as_deref().and_then(bearer))
        .ok_or((401, "missing token"))?;
    let grants = verify(token).map_err(|e| (401, e.message()))?;
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
    /// Whether every WebSocket upgrade needs a token (a secret, a
    /// public key or a key set URL is configured).
    pub fn tokens_required(&self) -> bool {
        self.token_secret.is_some()
            || !self.token_public_keys.is_empty()
            || self.token_jwks_url.is_some()
    }

    /// Verifies a connection token (at the upgrade or on refresh) with
    /// every configured key and check.
    pub fn verify(&self, token: &[u8]) -> Result<Grants, TokenError> {
        self.verify_with(token, &self.token_public_keys)
    }

    /// [`AuthConfig::verify`] with `public` as the public keys (the
    /// configured ones and a key set's, as the edge holds them).
    pub fn verify_with(&self, token: &[u8], public: &[PublicKey]) -> Result<Grants, TokenError> {
        let keys = TokenKeys {
            secret: self.token_secret.as_ref().map(|s| s.0.as_bytes()),
            public,
        };
        let expected = Expected {
            audience: self.token_audience.as_deref(),
            issuer: self.token_issuer.as_deref(),
            user_claim: self.token_user_claim.as_deref(),
        };
        verify_token_for(token, &keys, unix_now(), expected)
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
}
