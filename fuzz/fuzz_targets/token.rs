//! The HS256 token parser over arbitrary bytes: verification never panics,
//! and any claims we sign verify (or are refused only as expired).
#![no_main]
use corecast::auth::{sign_token, verify_token, TokenError};
use libfuzzer_sys::fuzz_target;

const SECRET: &[u8] = b"fuzzing-secret-of-at-least-32-bytes!";

fuzz_target!(|data: &[u8]| {
    let _ = verify_token(data, SECRET, 1_700_000_000);
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
