//! What checking a connection token costs per upgrade (issue 31):
//! HS256 (`--token-secret`) against RS256 (RSA 2048) and ES256 (P-256)
//! from `--token-public-key`, the whole `verify_token_for` (split,
//! base64, signature, claims). The RSA key comes from `openssl genpkey`
//! (ring does not generate RSA keys); tokens are signed with ring.

use std::process::Command;

use base64::Engine as _;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};

use corecast::auth::{sign_token, verify_token_for, Expected, KeyKind, PublicKey, TokenKeys};

const CLAIMS: &str =
    r#"{"exp":9999999999,"sub":"ana","subscribe":["room-*"],"publish":["room-*"]}"#;

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

fn signed_part(alg: &str) -> String {
    format!(
        "{}.{}",
        b64(format!(r#"{{"alg":"{alg}"}}"#).as_bytes()),
        b64(CLAIMS.as_bytes())
    )
}

/// An RSA 2048 key from openssl: the token and the verification key.
fn rs256() -> (String, PublicKey) {
    let dir = std::env::temp_dir().join(format!("corecast-bench-rsa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (der, pem) = (dir.join("k.der"), dir.join("k.pub.pem"));
    let gen = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-outform",
            "DER",
            "-out",
        ])
        .arg(&der)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl (apt-get install openssl)");
    assert!(gen.success());
    let public = Command::new("openssl")
        .args(["pkey", "-inform", "DER", "-pubout", "-in"])
        .arg(&der)
        .arg("-out")
        .arg(&pem)
        .status()
        .unwrap();
    assert!(public.success());
    // openssl writes a DER private key as PKCS#1 RSAPrivateKey.
    let pair = RsaKeyPair::from_der(&std::fs::read(&der).unwrap()).unwrap();
    let key = PublicKey::from_pem(&std::fs::read_to_string(&pem).unwrap())
        .unwrap()
        .remove(0);
    let _ = std::fs::remove_dir_all(&dir);
    let msg = signed_part("RS256");
    let mut sig = vec![0; pair.public().modulus_len()];
    pair.sign(
        &signature::RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        msg.as_bytes(),
        &mut sig,
    )
    .unwrap();
    (format!("{msg}.{}", b64(&sig)), key)
}

fn es256() -> (String, PublicKey) {
    let rng = SystemRandom::new();
    let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
    let key = PublicKey::new(KeyKind::P256, None, pair.public_key().as_ref().to_vec()).unwrap();
    let msg = signed_part("ES256");
    let sig = pair.sign(&rng, msg.as_bytes()).unwrap();
    (format!("{msg}.{}", b64(sig.as_ref())), key)
}

fn verify(c: &mut Criterion) {
    let secret = b"a-secret-of-at-least-thirty-two-bytes!!";
    let hs = sign_token(CLAIMS, secret);
    let (rs, rsa) = rs256();
    let (es, ec) = es256();
    let keys = [rsa, ec];
    let all = TokenKeys {
        secret: Some(secret),
        public: &keys,
    };
    let mut g = c.benchmark_group("token_verify");
    for (name, token) in [("hs256", &hs), ("rs256_2048", &rs), ("es256_p256", &es)] {
        verify_token_for(token.as_bytes(), &all, 1, Expected::default()).expect("valid token");
        g.bench_function(name, |b| {
            b.iter(|| verify_token_for(black_box(token.as_bytes()), &all, 1, Expected::default()))
        });
    }
    g.finish();
}

criterion_group!(benches, verify);
criterion_main!(benches);
