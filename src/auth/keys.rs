//! The keys a connection token may be signed with, and which algorithm
//! each accepts. Algorithm confusion is ruled out by construction: every
//! key is bound to one family — the `--token-secret` to HS256 only, an
//! RSA key to RS256/384/512 only, a P-256 key to ES256 and a P-384 key to
//! ES384 only — so an HS256 token is never checked against a public key's
//! bytes, and `none` names no family at all. Signatures are checked by
//! ring; public keys are read from PEM (SPKI, RustCrypto's `spki` and
//! `pkcs1`). Sans-I/O: the caller reads the files.

use hmac::{Hmac, Mac};
use ring::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use sha2::Sha256;
use spki::der::{Decode, DecodePem};
use spki::ObjectIdentifier;

use super::error::TokenError;

/// Smallest RSA modulus accepted, in bits (ring verifies 2048–8192).
pub const MIN_RSA_BITS: usize = 2048;
/// Most public keys read from PEM files, and most signature keys taken
/// from one key set (`--token-jwks-url`).
pub const MAX_PUBLIC_KEYS: usize = 32;

const RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const EC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");

/// A token's `alg`, of those accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    /// HMAC SHA-256 (`--token-secret`).
    Hs256,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    Rs384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    Rs512,
    /// ECDSA P-256 with SHA-256.
    Es256,
    /// ECDSA P-384 with SHA-384.
    Es384,
}

impl Alg {
    /// The JOSE name (RFC 7518 3.1); `None` for anything else (`none`,
    /// `HS384`, `PS256`, …).
    pub fn parse(name: &str) -> Option<Alg> {
        Some(match name {
            "HS256" => Alg::Hs256,
            "RS256" => Alg::Rs256,
            "RS384" => Alg::Rs384,
            "RS512" => Alg::Rs512,
            "ES256" => Alg::Es256,
            "ES384" => Alg::Es384,
            _ => return None,
        })
    }

    /// The kind of public key that may check it (`None`: HS256).
    pub fn family(self) -> Option<KeyKind> {
        match self {
            Alg::Hs256 => None,
            Alg::Rs256 | Alg::Rs384 | Alg::Rs512 => Some(KeyKind::Rsa),
            Alg::Es256 => Some(KeyKind::P256),
            Alg::Es384 => Some(KeyKind::P384),
        }
    }

    fn ring(self) -> &'static dyn VerificationAlgorithm {
        match self {
            Alg::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
            Alg::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
            Alg::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
            Alg::Es256 => &signature::ECDSA_P256_SHA256_FIXED,
            Alg::Es384 | Alg::Hs256 => &signature::ECDSA_P384_SHA384_FIXED,
        }
    }
}

/// The family a public key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// RSA (RS256/384/512).
    Rsa,
    /// EC on P-256 (ES256).
    P256,
    /// EC on P-384 (ES384).
    P384,
}

/// One public key: its family, its `kid` (a JWKS's; PEM keys have none)
/// and the bytes ring takes (RSA: the PKCS#1 `RSAPublicKey`; EC: the
/// uncompressed point).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// RSA, P-256 or P-384.
    pub kind: KeyKind,
    /// The key id tokens name in their header's `kid`.
    pub kid: Option<String>,
    bytes: Vec<u8>,
}

impl PublicKey {
    /// Every `PUBLIC KEY` block of a PEM text (SPKI; at least one): RSA
    /// of at least [`MIN_RSA_BITS`], or EC on P-256 or P-384.
    pub fn from_pem(text: &str) -> Result<Vec<PublicKey>, String> {
        const BEGIN: &str = "-----BEGIN PUBLIC KEY-----";
        const END: &str = "-----END PUBLIC KEY-----";
        let mut keys = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find(BEGIN) {
            let end = rest[at..]
                .find(END)
                .ok_or("a PUBLIC KEY block without its END line")?;
            let block = &rest[at..at + end + END.len()];
            let spki = spki::SubjectPublicKeyInfoOwned::from_pem(block)
                .map_err(|e| format!("not an SPKI public key: {e}"))?;
            keys.push(PublicKey::from_spki(&spki)?);
            rest = &rest[at + end + END.len()..];
        }
        if keys.is_empty() {
            return Err("no -----BEGIN PUBLIC KEY----- block (SPKI PEM)".into());
        }
        Ok(keys)
    }

    fn from_spki(spki: &spki::SubjectPublicKeyInfoOwned) -> Result<PublicKey, String> {
        let bits = spki
            .subject_public_key
            .as_bytes()
            .ok_or("public key bits not byte-aligned")?;
        let kind = match spki.algorithm.oid {
            RSA => KeyKind::Rsa,
            EC => {
                let curve = spki
                    .algorithm
                    .parameters
                    .as_ref()
                    .and_then(|p| p.decode_as::<ObjectIdentifier>().ok())
                    .ok_or("an EC key without a named curve")?;
                match curve {
                    P256 => KeyKind::P256,
                    P384 => KeyKind::P384,
                    other => return Err(format!("EC curve {other} not supported (P-256, P-384)")),
                }
            }
            other => return Err(format!("key algorithm {other} not supported (RSA, EC)")),
        };
        PublicKey::new(kind, None, bits.to_vec())
    }

    /// A key of `kind` from the bytes ring takes, checked for shape.
    pub fn new(kind: KeyKind, kid: Option<String>, bytes: Vec<u8>) -> Result<PublicKey, String> {
        match kind {
            KeyKind::Rsa => {
                let rsa = pkcs1::RsaPublicKey::from_der(&bytes)
                    .map_err(|e| format!("not a PKCS#1 RSA public key: {e}"))?;
                let bits = rsa.modulus.as_bytes().len() * 8;
                if bits < MIN_RSA_BITS {
                    return Err(format!("RSA key of {bits} bits; at least {MIN_RSA_BITS}"));
                }
            }
            KeyKind::P256 | KeyKind::P384 => {
                let len = if kind == KeyKind::P256 { 65 } else { 97 };
                if bytes.len() != len || bytes[0] != 4 {
                    return Err("EC public key is not an uncompressed point".into());
                }
            }
        }
        Ok(PublicKey { kind, kid, bytes })
    }
}

/// Every key tokens may be signed with (borrowed from the config).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenKeys<'a> {
    /// `--token-secret`: HS256.
    pub secret: Option<&'a [u8]>,
    /// `--token-public-key` (and a JWKS's keys).
    pub public: &'a [PublicKey],
}

impl<'a> TokenKeys<'a> {
    /// HS256 with `secret` only.
    pub fn hmac(secret: &'a [u8]) -> TokenKeys<'a> {
        TokenKeys {
            secret: Some(secret),
            public: &[],
        }
    }

    /// Whether tokens are required (some key is configured).
    pub fn any(&self) -> bool {
        self.secret.is_some() || !self.public.is_empty()
    }

    /// Checks `sig` over `signed` for a token whose header names `alg`
    /// and `kid`: only keys of `alg`'s family are tried; with several of
    /// them, the token must name one by `kid`.
    pub fn check(
        &self,
        (alg, kid): (Alg, Option<&str>),
        signed: &[u8],
        sig: &[u8],
    ) -> Result<(), TokenError> {
        let Some(kind) = alg.family() else {
            let secret = self.secret.ok_or(TokenError::UnsupportedAlgorithm)?;
            return hs256(secret, signed, sig);
        };
        let key = self.key(kind, kid)?;
        UnparsedPublicKey::new(alg.ring(), &key.bytes)
            .verify(signed, sig)
            .map_err(|_| TokenError::BadSignature)
    }

    fn key(&self, kind: KeyKind, kid: Option<&str>) -> Result<&'a PublicKey, TokenError> {
        let mut family = self.public.iter().filter(|k| k.kind == kind);
        // A `kid` and no key of its family: a key set may not have it yet
        // (rotation to a new key type, or not fetched yet).
        let first = family.next().ok_or(match kid {
            Some(_) => TokenError::UnknownKey,
            None => TokenError::UnsupportedAlgorithm,
        })?;
        let several = family.next().is_some();
        let named = |k: &&PublicKey| k.kid.as_deref() == kid;
        match (kid, several) {
            (None, false) => Ok(first),
            (None, true) => Err(TokenError::UnknownKey),
            (Some(_), _) => {
                let mut family = self.public.iter().filter(|k| k.kind == kind);
                match family.find(named) {
                    Some(k) => Ok(k),
                    // A lone key without a kid (a PEM file) checks any kid.
                    None if !several && first.kid.is_none() => Ok(first),
                    None => Err(TokenError::UnknownKey),
                }
            }
        }
    }
}

/// HS256 in constant time.
fn hs256(secret: &[u8], signed: &[u8], sig: &[u8]) -> Result<(), TokenError> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(signed);
    mac.verify_slice(sig).map_err(|_| TokenError::BadSignature)
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

    use super::super::jwt::{verify_token_for, Expected};
    use super::*;

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    }

    /// A P-256 key pair made by ring, as a verification key with `kid`.
    fn p256(kid: Option<&str>) -> (EcdsaKeyPair, PublicKey) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let public = pair.public_key().as_ref().to_vec();
        let key = PublicKey::new(KeyKind::P256, kid.map(str::to_string), public).unwrap();
        (pair, key)
    }

    fn es256(pair: &EcdsaKeyPair, header: &str) -> String {
        let signed = format!("{}.{}", b64(header.as_bytes()), b64(br#"{"exp":2000}"#));
        let sig = pair.sign(&SystemRandom::new(), signed.as_bytes()).unwrap();
        format!("{signed}.{}", b64(sig.as_ref()))
    }

    fn hs256_with(secret: &[u8], header: &str) -> String {
        let signed = format!("{}.{}", b64(header.as_bytes()), b64(br#"{"exp":2000}"#));
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(signed.as_bytes());
        format!("{signed}.{}", b64(&mac.finalize().into_bytes()))
    }

    fn check(t: &str, keys: &TokenKeys<'_>) -> Result<(), TokenError> {
        verify_token_for(t.as_bytes(), keys, 1000, Expected::default()).map(drop)
    }

    #[test]
    fn es256_checks_against_its_key_only() {
        let (pair, key) = p256(None);
        let keys = [key];
        let only_public = TokenKeys {
            secret: None,
            public: &keys,
        };
        assert_eq!(
            check(&es256(&pair, r#"{"alg":"ES256"}"#), &only_public),
            Ok(())
        );
        let (other, _) = p256(None);
        let forged = es256(&other, r#"{"alg":"ES256"}"#);
        assert_eq!(check(&forged, &only_public), Err(TokenError::BadSignature));
        // ES384 names a family no key belongs to.
        let t = es256(&pair, r#"{"alg":"ES384"}"#);
        assert_eq!(
            check(&t, &only_public),
            Err(TokenError::UnsupportedAlgorithm)
        );
    }

    #[test]
    fn no_algorithm_confusion() {
        let (pair, key) = p256(None);
        let public_bytes = key.bytes.clone();
        let keys = [key];
        let only_public = TokenKeys {
            secret: None,
            public: &keys,
        };
        // HS256 "signed" with the public key's bytes: never checked
        // against a public key.
        let confused = hs256_with(&public_bytes, r#"{"alg":"HS256"}"#);
        assert_eq!(
            check(&confused, &only_public),
            Err(TokenError::UnsupportedAlgorithm)
        );
        let both = TokenKeys {
            secret: Some(b"a-real-secret-of-32-bytes-at-least!"),
            public: &keys,
        };
        assert_eq!(check(&confused, &both), Err(TokenError::BadSignature));
        // `none`, and an ES256 signature under an RS256 header.
        let none = format!("{}.{}.", b64(br#"{"alg":"none"}"#), b64(br#"{"exp":2000}"#));
        assert_eq!(check(&none, &both), Err(TokenError::UnsupportedAlgorithm));
        let mislabelled = es256(&pair, r#"{"alg":"RS256"}"#);
        assert_eq!(
            check(&mislabelled, &both),
            Err(TokenError::UnsupportedAlgorithm)
        );
    }

    #[test]
    fn several_keys_are_chosen_by_kid() {
        let (a, ka) = p256(Some("a"));
        let (b, kb) = p256(Some("b"));
        let keys = [ka, kb];
        let set = TokenKeys {
            secret: None,
            public: &keys,
        };
        assert_eq!(
            check(&es256(&a, r#"{"alg":"ES256","kid":"a"}"#), &set),
            Ok(())
        );
        assert_eq!(
            check(&es256(&b, r#"{"alg":"ES256","kid":"b"}"#), &set),
            Ok(())
        );
        let swapped = es256(&a, r#"{"alg":"ES256","kid":"b"}"#);
        assert_eq!(check(&swapped, &set), Err(TokenError::BadSignature));
        let unknown = es256(&a, r#"{"alg":"ES256","kid":"c"}"#);
        assert_eq!(check(&unknown, &set), Err(TokenError::UnknownKey));
        let unnamed = es256(&a, r#"{"alg":"ES256"}"#);
        assert_eq!(check(&unnamed, &set), Err(TokenError::UnknownKey));
    }

    #[test]
    fn keys_are_checked_for_shape() {
        assert!(PublicKey::new(KeyKind::P256, None, vec![4; 64]).is_err());
        assert!(PublicKey::new(KeyKind::P384, None, vec![4; 65]).is_err());
        assert!(PublicKey::new(KeyKind::Rsa, None, vec![0x30, 0]).is_err());
        assert!(PublicKey::from_pem("no pem here").is_err());
        let truncated = "-----BEGIN PUBLIC KEY-----\nMFkw\n";
        assert!(PublicKey::from_pem(truncated).is_err());
    }
}
