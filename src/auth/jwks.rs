//! JSON Web Key Sets (RFC 7517) as identity providers publish them, read
//! into [`PublicKey`]s, sans-I/O (the fetching is the edge's). Only
//! signature keys corecast can check are taken: RSA (`n`, `e`) of at
//! least 2048 bits and EC on P-256/P-384 (`x`, `y`); symmetric (`oct`)
//! keys are never taken from a set (an HS256 key published beside public
//! ones would reopen algorithm confusion), nor are encryption keys
//! (`use: enc`) or keys whose `alg` is not their family's.

use base64::Engine as _;
use pkcs1::der::asn1::UintRef;
use pkcs1::der::Encode;
use serde::Deserialize;

use super::keys::{Alg, KeyKind, PublicKey, MAX_PUBLIC_KEYS};

/// Largest key set read (bytes of JSON); a larger answer is refused.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;

/// A key set read: the keys taken, and how many were passed over.
#[derive(Debug, Default)]
pub struct KeySet {
    /// The signature keys corecast can check (at most `MAX_PUBLIC_KEYS`).
    pub keys: Vec<PublicKey>,
    /// Keys left out: unsupported type or curve, `use` not `sig`, an
    /// `alg` outside the key's family, a short RSA modulus, bad encoding.
    pub skipped: usize,
}

#[derive(Deserialize)]
struct Set<'a> {
    #[serde(borrow)]
    keys: Vec<Jwk<'a>>,
}

#[derive(Deserialize)]
struct Jwk<'a> {
    kty: &'a str,
    kid: Option<String>,
    #[serde(rename = "use")]
    usage: Option<&'a str>,
    alg: Option<&'a str>,
    crv: Option<&'a str>,
    n: Option<&'a str>,
    e: Option<&'a str>,
    x: Option<&'a str>,
    y: Option<&'a str>,
}

/// Reads a key set. `Err`: not a key set at all (too large, not JSON,
/// no `keys` array, more than `MAX_PUBLIC_KEYS` usable keys); a set
/// whose every key was skipped is `Ok` with no keys (the caller keeps
/// what it had).
pub fn parse(body: &[u8]) -> Result<KeySet, String> {
    if body.len() > MAX_JWKS_BYTES {
        return Err(format!(
            "key set of {} bytes; at most {MAX_JWKS_BYTES}",
            body.len()
        ));
    }
    let set: Set<'_> = serde_json::from_slice(body).map_err(|e| format!("not a JWKS: {e}"))?;
    let mut out = KeySet::default();
    for jwk in set.keys {
        match key(jwk) {
            Some(k) => out.keys.push(k),
            None => out.skipped += 1,
        }
    }
    if out.keys.len() > MAX_PUBLIC_KEYS {
        return Err(format!(
            "{} signature keys; at most {MAX_PUBLIC_KEYS}",
            out.keys.len()
        ));
    }
    Ok(out)
}

fn key(jwk: Jwk<'_>) -> Option<PublicKey> {
    if jwk.usage.is_some_and(|u| u != "sig") {
        return None;
    }
    let (kind, bytes) = match (jwk.kty, jwk.crv) {
        ("RSA", _) => (KeyKind::Rsa, rsa_der(jwk.n?, jwk.e?)?),
        ("EC", Some("P-256")) => (KeyKind::P256, point(jwk.x?, jwk.y?, 32)?),
        ("EC", Some("P-384")) => (KeyKind::P384, point(jwk.x?, jwk.y?, 48)?),
        _ => return None,
    };
    if let Some(alg) = jwk.alg {
        if Alg::parse(alg).and_then(Alg::family) != Some(kind) {
            return None;
        }
    }
    PublicKey::new(kind, jwk.kid, bytes).ok()
}

fn b64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()
}

/// `n` and `e` as the PKCS#1 `RSAPublicKey` ring reads.
fn rsa_der(n: &str, e: &str) -> Option<Vec<u8>> {
    let (n, e) = (b64(n)?, b64(e)?);
    let key = pkcs1::RsaPublicKey {
        modulus: UintRef::new(&n).ok()?,
        public_exponent: UintRef::new(&e).ok()?,
    };
    key.to_der().ok()
}

/// `x` and `y` (each exactly `len` bytes) as an uncompressed point.
fn point(x: &str, y: &str, len: usize) -> Option<Vec<u8>> {
    let (x, y) = (b64(x)?, b64(y)?);
    if x.len() != len || y.len() != len {
        return None;
    }
    let mut p = Vec::with_capacity(1 + 2 * len);
    p.push(4);
    p.extend_from_slice(&x);
    p.extend_from_slice(&y);
    Some(p)
}

/// How many `--token-jwks-refresh` intervals apart periodic fetches are.
pub const PERIOD_FACTOR: u64 = 10;
/// The first retry after a failed fetch, at most (then doubling up to the
/// period).
pub const FIRST_RETRY_MS: u64 = 1000;

/// When a key set is fetched, sans-I/O (milliseconds on the caller's
/// clock): at once at start; then every `PERIOD_FACTOR` refresh
/// intervals; after a failure with backoff (from `FIRST_RETRY_MS`, or the
/// refresh interval if shorter, doubling up to the period); and early
/// when a token names an unknown `kid`, but never sooner than one refresh
/// interval after the previous fetch began — so a stream of tokens with
/// made-up `kid`s costs the provider at most one fetch per interval.
#[derive(Debug, Clone)]
pub struct Refresh {
    refresh_ms: u64,
    last_ms: Option<u64>,
    failures: u32,
    wanted: bool,
}

impl Refresh {
    /// A schedule with `refresh_ms` between unknown-`kid` fetches.
    pub fn new(refresh_ms: u64) -> Refresh {
        Refresh {
            refresh_ms: refresh_ms.max(1),
            last_ms: None,
            failures: 0,
            wanted: false,
        }
    }

    /// The periodic interval.
    pub fn period_ms(&self) -> u64 {
        self.refresh_ms.saturating_mul(PERIOD_FACTOR)
    }

    /// A fetch begins at `now`.
    pub fn started(&mut self, now: u64) {
        self.last_ms = Some(now);
        self.wanted = false;
    }

    /// The fetch that began last ended, well or not.
    pub fn finished(&mut self, ok: bool) {
        self.failures = if ok {
            0
        } else {
            self.failures.saturating_add(1)
        };
    }

    /// A token named an unknown `kid`: an early fetch is wanted. True when
    /// this is news (the fetcher should look at its schedule again).
    pub fn want(&mut self) -> bool {
        !std::mem::replace(&mut self.wanted, true)
    }

    /// When the next fetch is due (0: now).
    pub fn due_ms(&self) -> u64 {
        let Some(last) = self.last_ms else {
            return 0;
        };
        let wait = match self.failures {
            0 => self.period_ms(),
            n => {
                let first = FIRST_RETRY_MS.min(self.refresh_ms);
                (first << (n - 1).min(20)).min(self.period_ms())
            }
        };
        let periodic = last.saturating_add(wait);
        match self.wanted {
            true => periodic.min(last.saturating_add(self.refresh_ms)),
            false => periodic,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P-256's generator as a JWK's coordinates.
    const GX: &str = "axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY";
    const GY: &str = "T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU";

    fn rsa_n(bits: usize) -> String {
        let mut n = vec![0xc5u8; bits / 8];
        n[bits / 8 - 1] |= 1;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(n)
    }

    #[test]
    fn signature_keys_are_taken_and_the_rest_skipped() {
        let set = format!(
            r#"{{"keys":[
            {{"kty":"RSA","kid":"r1","use":"sig","alg":"RS256","n":"{n}","e":"AQAB"}},
            {{"kty":"EC","kid":"e1","crv":"P-256","x":"{GX}","y":"{GY}"}},
            {{"kty":"RSA","kid":"short","n":"{short}","e":"AQAB"}},
            {{"kty":"RSA","kid":"enc","use":"enc","n":"{n}","e":"AQAB"}},
            {{"kty":"RSA","kid":"pss","alg":"PS256","n":"{n}","e":"AQAB"}},
            {{"kty":"EC","kid":"mislabelled","alg":"RS256","crv":"P-256","x":"{GX}","y":"{GY}"}},
            {{"kty":"oct","kid":"hmac","k":"c2VjcmV0"}},
            {{"kty":"OKP","crv":"Ed25519","x":"{GX}"}},
            {{"kty":"EC","crv":"P-521","x":"{GX}","y":"{GY}"}}
            ]}}"#,
            n = rsa_n(2048),
            short = rsa_n(1024)
        );
        let s = parse(set.as_bytes()).unwrap();
        let kids: Vec<_> = s.keys.iter().map(|k| k.kid.as_deref().unwrap()).collect();
        assert_eq!(kids, ["r1", "e1"]);
        assert_eq!(
            (s.keys[0].kind, s.keys[1].kind),
            (KeyKind::Rsa, KeyKind::P256)
        );
        assert_eq!(s.skipped, 7);
    }

    #[test]
    fn fetches_are_periodic_early_for_unknown_kids_and_back_off() {
        let mut r = Refresh::new(30_000);
        assert_eq!(r.due_ms(), 0, "at once at start");
        r.started(5);
        r.finished(true);
        assert_eq!(r.due_ms(), 5 + 300_000, "periodic");
        // Unknown kids: one early fetch, not before the interval.
        assert!(r.want() && !r.want());
        assert_eq!(r.due_ms(), 5 + 30_000);
        r.started(30_005);
        assert_eq!(r.due_ms(), 30_005 + 300_000, "the wish is spent");
        // Failures back off from 1 s, doubling, capped at the period.
        let waits: Vec<u64> = (0..12)
            .map(|_| {
                r.finished(false);
                r.due_ms() - 30_005
            })
            .collect();
        assert_eq!(&waits[..4], [1000, 2000, 4000, 8000]);
        assert_eq!(waits[11], 300_000);
        r.finished(true);
        assert_eq!(r.due_ms(), 30_005 + 300_000);
        // A short interval shortens the first retry.
        let mut quick = Refresh::new(200);
        quick.started(0);
        quick.finished(false);
        assert_eq!(quick.due_ms(), 200);
    }

    #[test]
    fn what_is_not_a_key_set_is_refused() {
        assert!(parse(b"<html>").is_err());
        assert!(parse(br#"{"no":"keys"}"#).is_err());
        assert!(parse(&vec![b' '; MAX_JWKS_BYTES + 1]).is_err());
        let many: Vec<String> = (0..=MAX_PUBLIC_KEYS)
            .map(|i| format!(r#"{{"kty":"EC","kid":"{i}","crv":"P-256","x":"{GX}","y":"{GY}"}}"#))
            .collect();
        let body = format!(r#"{{"keys":[{}]}}"#, many.join(","));
        assert!(parse(body.as_bytes()).is_err());
        // Every key skipped: an empty set, not an error.
        let none = parse(br#"{"keys":[{"kty":"oct","k":"eA"}]}"#).unwrap();
        assert!(none.keys.is_empty() && none.skipped == 1);
    }
}
