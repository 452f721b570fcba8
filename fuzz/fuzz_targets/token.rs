//! The token parser over arbitrary bytes, with an HS256 secret and a
//! public key of each family configured: verification never panics, an
//! unsigned input is never accepted, and any claims we sign verify (or
//! are refused only for their claims).
#![no_main]
use std::sync::LazyLock;

use corecast::auth::{
    sign_token, verify_token, verify_token_for, Expected, KeyKind, PublicKey, TokenError,
    TokenKeys,
};
use libfuzzer_sys::fuzz_target;

const SECRET: &[u8] = b"fuzzing-secret-of-at-least-32-bytes!";

/// P-256's generator point: a valid public key nobody holds the private
/// key of (it is 1).
const P256_G: &str = "046b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c2964fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5";

static PUBLIC: LazyLock<Vec<PublicKey>> = LazyLock::new(|| {
    let point: Vec<u8> = (0..P256_G.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&P256_G[i..i + 2], 16).unwrap())
        .collect();
    vec![PublicKey::new(KeyKind::P256, Some("g".into()), point).unwrap()]
});

fuzz_target!(|data: &[u8]| {
    let _ = verify_token(data, SECRET, 1_700_000_000);
    let public_only = TokenKeys {
        secret: None,
        public: &PUBLIC,
    };
    // Nobody can sign for G's key: arbitrary bytes never pass.
    let r = verify_token_for(data, &public_only, 1_700_000_000, Expected::default());
    assert!(r.is_err(), "an unsigned token was accepted");
    if let Ok(claims) = std::str::from_utf8(data) {
        if serde_json_like_object(claims) {
            let token = sign_token(claims, SECRET);
            match verify_token(token.as_bytes(), SECRET, 1_700_000_000) {
                Err(TokenError::BadSignature) => panic!("our own signature refused"),
                _ => {}
            }
        }
    }
});

/// Cheap filter: only object-looking claims are worth signing.
fn serde_json_like_object(s: &str) -> bool {
    s.starts_with('{') && s.ends_with('}')
}
