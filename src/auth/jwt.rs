//! JSON Web Tokens (RFC 7519) for connections: the signature checked
//! against [`TokenKeys`] — HS256 with `--token-secret`, RS256/384/512 and
//! ES256/384 with public keys — then the registered claims (`exp`, `nbf`,
//! `aud`, `iss`) and corecast's own (`subscribe`, `publish`, `info`).
//! Sans-I/O.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::Sha256;

use std::sync::Arc;

use super::error::TokenError;
use super::grants::{Grants, TokenGrants};
use super::keys::{Alg, TokenKeys};
use crate::filter::Filter;

/// Longest token accepted (header + claims + signature, base64url).
pub const MAX_TOKEN_LEN: usize = 4096;
/// Most channel patterns in one token.
pub const MAX_PATTERNS: usize = 64;
/// Longest `info` claim (a member's public presence info, a JSON object).
pub const MAX_INFO: usize = 1024;

#[derive(Deserialize)]
struct Header<'a> {
    alg: &'a str,
    kid: Option<&'a str>,
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
    info: Option<Box<RawValue>>,
    #[serde(default)]
    subscribe: Vec<String>,
    #[serde(default)]
    publish: Vec<String>,
    /// Channel pattern → tag filter the server applies to the holder's
    /// subscriptions there (`crate::filter`).
    #[serde(default)]
    filters: serde_json::Map<String, serde_json::Value>,
}

/// What a token's claims must say besides `exp`/`nbf`
/// (`--token-audience`, `--token-issuer`; `None` = not checked), and
/// which claim names the user (`--token-user-claim`; `None`: `sub`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Expected<'a> {
    /// `aud` must be (or list) this.
    pub audience: Option<&'a str>,
    /// `iss` must be this.
    pub issuer: Option<&'a str>,
    /// The string claim that is the user (e.g. `email`), instead of `sub`.
    pub user_claim: Option<&'a str>,
}

/// Verifies a JWT (HS256) against `secret` at time `now` (seconds since
/// the epoch). Claims: `exp` (required), `nbf`, `sub`, `subscribe` and
/// `publish` (lists of channel patterns); `aud` and `iss` are not checked.
pub fn verify_token(token: &[u8], secret: &[u8], now: u64) -> Result<Grants, TokenError> {
    verify_token_for(token, &TokenKeys::hmac(secret), now, Expected::default())
}

/// Verifies a JWT against `keys` (the one its `alg` and `kid` select) at
/// time `now`, checking its claims against `expected`.
pub fn verify_token_for(
    token: &[u8],
    keys: &TokenKeys<'_>,
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
    let alg = Alg::parse(header.alg).ok_or(TokenError::UnsupportedAlgorithm)?;
    let signed = &token[..h.len() + 1 + c.len()];
    // The signature first: nothing of an unsigned payload is looked at.
    keys.check((alg, header.kid), signed, &b64(s)?)?;
    let claims = b64(c)?;
    let grants = check_claims(serde_json::from_slice(&claims), now, expected)?;
    match expected.user_claim {
        None => Ok(grants),
        Some(name) => with_user(grants, &claims, name),
    }
}

/// The registered claims and corecast's own, checked.
fn check_claims(
    claims: Result<Claims, serde_json::Error>,
    now: u64,
    expected: Expected<'_>,
) -> Result<Grants, TokenError> {
    let claims = claims.map_err(|_| TokenError::Malformed)?;
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
    if claims.subscribe.len() + claims.publish.len() + claims.filters.len() > MAX_PATTERNS {
        return Err(TokenError::Malformed);
    }
    let mut filters = Vec::with_capacity(claims.filters.len());
    for (pattern, tree) in &claims.filters {
        let f = Filter::from_json(tree).map_err(|_| TokenError::BadFilter)?;
        filters.push((pattern.clone(), Arc::new(f)));
    }
    let info = claims.info.map(|i| i.get().to_string());
    if info
        .as_deref()
        .is_some_and(|i| i.len() > MAX_INFO || !i.starts_with('{'))
    {
        return Err(TokenError::BadInfo);
    }
    let mut grants = TokenGrants::new((claims.sub, info, exp), claims.subscribe, claims.publish);
    grants.filters = filters;
    Ok(Grants::Token(Box::new(grants)))
}

/// `--token-user-claim`: the user is that string claim, not `sub`
/// (providers that cannot put the application's user id in `sub`).
fn with_user(grants: Grants, claims: &[u8], name: &str) -> Result<Grants, TokenError> {
    let all: std::collections::HashMap<&str, &RawValue> =
        serde_json::from_slice(claims).map_err(|_| TokenError::Malformed)?;
    let user = all
        .get(name)
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
        .filter(|u| !u.is_empty())
        .ok_or(TokenError::NoUser)?;
    let Grants::Token(mut t) = grants else {
        return Ok(grants);
    };
    t.subject = Some(user);
    Ok(Grants::Token(t))
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

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"k3y";
    const KEYS: TokenKeys<'static> = TokenKeys {
        secret: Some(SECRET),
        public: &[],
    };

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
            user_claim: None,
        };
        let ok = sign_token(
            r#"{"exp":2000,"aud":["x","corecast"],"iss":"https://id.example"}"#,
            SECRET,
        );
        assert!(verify_token_for(ok.as_bytes(), &KEYS, 1000, want).is_ok());
        let one = sign_token(
            r#"{"exp":2000,"aud":"corecast","iss":"https://id.example"}"#,
            SECRET,
        );
        assert!(verify_token_for(one.as_bytes(), &KEYS, 1000, want).is_ok());
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
                verify_token_for(t.as_bytes(), &KEYS, 1000, want),
                Err(err),
                "{claims}"
            );
            // Unchecked when not configured.
            assert!(verify_token(t.as_bytes(), SECRET, 1000).is_ok());
        }
    }

    #[test]
    fn the_user_can_come_from_another_claim() {
        let want = Expected {
            user_claim: Some("email"),
            ..Expected::default()
        };
        let t = sign_token(
            r#"{"exp":2000,"sub":"auth0|x","email":"ana@x.org"}"#,
            SECRET,
        );
        let g = verify_token_for(t.as_bytes(), &KEYS, 1000, want).unwrap();
        assert_eq!(g.subject(), Some("ana@x.org"));
        for claims in [r#"{"exp":2000,"sub":"a"}"#, r#"{"exp":2000,"email":7}"#] {
            let t = sign_token(claims, SECRET);
            let r = verify_token_for(t.as_bytes(), &KEYS, 1000, want);
            assert_eq!(r, Err(TokenError::NoUser), "{claims}");
        }
    }
}
