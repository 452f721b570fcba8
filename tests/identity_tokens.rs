//! Tokens from an identity provider (issue 31): keys made by `openssl`,
//! tokens signed by Node's `crypto` (an implementation independent of
//! ours), `--token-public-key` read from PEM files through the TOML
//! configuration, and the whole server deciding upgrades with them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use corecast::config::{apply_toml, Config};
use serde_json::json;

/// A scratch directory for this test's keys.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("corecast-idp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A private key (`openssl genpkey` ARGS) and its public PEM; returns
/// (private path, public path).
fn keypair(dir: &Path, name: &str, args: &[&str]) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub.pem"));
    run(Command::new("openssl")
        .arg("genpkey")
        .args(args)
        .arg("-out")
        .arg(&private));
    run(Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&private)
        .arg("-out")
        .arg(&public));
    (private, public)
}

/// A JWT signed by Node's crypto with `alg` (RS256/384/512, ES256/384,
/// or HS256 with the key file's bytes as the secret).
fn node_token(alg: &str, key: &Path, header_extra: &str, claims: &str) -> String {
    const JS: &str = r#"
const crypto = require('crypto'); const fs = require('fs');
const [alg, keyPath, extra, claims] = process.argv.slice(1);
const b64 = (b) => Buffer.from(b).toString('base64url');
const header = JSON.stringify(Object.assign({alg, typ: 'JWT'}, JSON.parse(extra)));
const signed = b64(header) + '.' + b64(claims);
const key = fs.readFileSync(keyPath);
const bits = {256: 'sha256', 384: 'sha384', 512: 'sha512'}[alg.slice(2)];
let sig;
if (alg.startsWith('HS')) sig = crypto.createHmac(bits, key).update(signed).digest();
else sig = crypto.sign(bits, Buffer.from(signed),
  {key: crypto.createPrivateKey(key), dsaEncoding: 'ieee-p1363'});
process.stdout.write(signed + '.' + b64(sig));
"#;
    run(Command::new("node")
        .args(["-e", JS, alg])
        .arg(key)
        .args([header_extra, claims]))
}

fn server_with(toml: &str) -> TestServer {
    TestServer::start(|c: &mut Config| {
        apply_toml(c, toml, "test.toml").expect("valid configuration");
        c.presence.set_patterns("room-*").unwrap();
    })
}

async fn upgrade(addr: std::net::SocketAddr, token: &str) -> u16 {
    let req = format!(
        "GET /ws?token={token} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {RFC_KEY}\r\n\r\n"
    );
    http_raw(addr, req.as_bytes()).await.status
}

const CLAIMS: &str =
    r#"{"exp":9999999999,"sub":"ana","email":"ana@example.org","subscribe":["room-*"]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs256_and_es256_tokens_from_pem_keys() {
    let dir = scratch("algs");
    let (rsa, rsa_pub) = keypair(
        &dir,
        "rsa",
        &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
    );
    let (ec, ec_pub) = keypair(
        &dir,
        "ec",
        &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
    );
    let (ec384, ec384_pub) = keypair(
        &dir,
        "ec384",
        &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"],
    );
    let keys = format!(
        "{},{},{}",
        rsa_pub.display(),
        ec_pub.display(),
        ec384_pub.display()
    );
    let srv = server_with(&format!("token-public-key = \"{keys}\"\n"));
    for (alg, key) in [
        ("RS256", &rsa),
        ("RS384", &rsa),
        ("RS512", &rsa),
        ("ES256", &ec),
        ("ES384", &ec384),
    ] {
        let t = node_token(alg, key, "{}", CLAIMS);
        assert_eq!(upgrade(srv.addr, &t).await, 101, "{alg}");
    }
    // Refused: no token, the wrong key's family, HS256 keyed with the
    // public PEM (algorithm confusion), alg none, tampered claims.
    assert_eq!(upgrade(srv.addr, "").await, 401);
    let wrong_family = node_token("ES256", &ec384, "{}", CLAIMS);
    assert_eq!(upgrade(srv.addr, &wrong_family).await, 401);
    for public in [&rsa_pub, &ec_pub] {
        let confused = node_token("HS256", public, "{}", CLAIMS);
        assert_eq!(upgrade(srv.addr, &confused).await, 401, "{public:?}");
    }
    let good = node_token("RS256", &rsa, "{}", CLAIMS);
    let (_, rest) = good.split_once('.').unwrap();
    let none_header = base64_url(r#"{"alg":"none","typ":"JWT"}"#);
    assert_eq!(
        upgrade(srv.addr, &format!("{none_header}.{rest}")).await,
        401
    );
    let (head, tail) = good.split_once('.').unwrap();
    let (_, sig) = tail.split_once('.').unwrap();
    let wider = base64_url(r#"{"exp":9999999999,"sub":"ana","subscribe":["*"]}"#);
    assert_eq!(
        upgrade(srv.addr, &format!("{head}.{wider}.{sig}")).await,
        401
    );
    let s = stats(srv.addr).await;
    assert!(counter(&s, "auth_failures") >= 6, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_claim_names_the_presence_member() {
    let dir = scratch("user");
    let (ec, ec_pub) = keypair(
        &dir,
        "ec",
        &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
    );
    let toml = format!(
        "token-public-key = \"{}\"\ntoken-user-claim = \"email\"\n",
        ec_pub.display()
    );
    let srv = server_with(&toml);
    let t = node_token("ES256", &ec, "{}", CLAIMS);
    let mut ws = ws_connect(srv.addr, &format!("/ws?token={t}")).await;
    common::pusher::send(&mut ws, json!({"op":"subscribe","channel":"room-1","id":1})).await;
    assert_eq!(next_json(&mut ws).await["type"], "subscribed");
    common::pusher::send(&mut ws, json!({"op":"presence","channel":"room-1","id":2})).await;
    let p = next_json(&mut ws).await;
    assert_eq!(p["members"][0]["user"], "ana@example.org", "{p}");
    // A token without the claim is refused.
    let no_email = node_token("ES256", &ec, "{}", r#"{"exp":9999999999,"sub":"bo"}"#);
    assert_eq!(upgrade(srv.addr, &no_email).await, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_and_foreign_keys_are_configuration_errors() {
    let dir = scratch("weak");
    let (_, small) = keypair(
        &dir,
        "rsa1024",
        &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"],
    );
    let (_, ed) = keypair(&dir, "ed", &["-algorithm", "ED25519"]);
    let junk = dir.join("junk.pem");
    std::fs::write(
        &junk,
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
    )
    .unwrap();
    for (path, want) in [
        (&small, "1024 bits"),
        (&ed, "not supported"),
        (&junk, "SPKI"),
    ] {
        let mut c = Config::default();
        let toml = format!("token-public-key = \"{}\"\n", path.display());
        let err = apply_toml(&mut c, &toml, "test.toml")
            .expect_err("refused")
            .to_string();
        assert!(err.contains(want), "{path:?}: {err}");
        assert!(
            err.contains(&path.display().to_string()),
            "names the file: {err}"
        );
    }
}

fn base64_url(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

/// A key set as a provider publishes it (Node's `export({format:'jwk'})`
/// of openssl keys) checks the provider's tokens, each key chosen by its
/// `kid`; the same token with another key's `kid` is refused.
#[test]
fn a_jwks_from_node_checks_node_signed_tokens() {
    use corecast::auth::{jwks, verify_token_for, Expected, TokenKeys};
    let dir = scratch("jwks");
    let (rsa, _) = keypair(
        &dir,
        "rsa",
        &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:3072"],
    );
    let (ec, _) = keypair(
        &dir,
        "ec",
        &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"],
    );
    const JS: &str = r#"
const crypto = require('crypto'); const fs = require('fs');
const keys = process.argv.slice(1).map((p, i) => Object.assign(
  crypto.createPublicKey(crypto.createPrivateKey(fs.readFileSync(p))).export({format: 'jwk'}),
  {kid: 'k' + i, use: 'sig'}));
process.stdout.write(JSON.stringify({keys}));
"#;
    let set = run(Command::new("node").args(["-e", JS]).arg(&rsa).arg(&ec));
    let parsed = jwks::parse(set.as_bytes()).expect("a key set");
    assert_eq!(parsed.keys.len(), 2, "{set}");
    let keys = TokenKeys {
        secret: None,
        public: &parsed.keys,
    };
    let check = |t: &str| verify_token_for(t.as_bytes(), &keys, 1, Expected::default());
    assert!(check(&node_token("RS512", &rsa, r#"{"kid":"k0"}"#, CLAIMS)).is_ok());
    assert!(check(&node_token("ES384", &ec, r#"{"kid":"k1"}"#, CLAIMS)).is_ok());
    assert!(check(&node_token("RS256", &rsa, r#"{"kid":"k1"}"#, CLAIMS)).is_err());
    assert!(check(&node_token("RS256", &rsa, r#"{"kid":"k9"}"#, CLAIMS)).is_err());
}
