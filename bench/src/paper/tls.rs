//! `paper --tls`: the matrix over TLS. The servers get a certificate
//! (`--tls-cert`/`--tls-key`, or a fresh self-signed ECDSA P-256 one made
//! with the `openssl` command, as a deployment would get from its CA), the
//! load speaks `wss://` and `https://` and takes that certificate with
//! `--tls-insecure` (names and dates unchecked, signatures still verified:
//! the orchestrator started the server itself).

use std::path::{Path, PathBuf};
use std::process::Command;

use rustls::pki_types::ServerName;

use super::opts::PaperOpts;
use crate::tls::{client_config, TlsTarget};

/// The run's certificate and the client side of it.
pub struct PaperTls {
    /// PEM chain the servers present.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// What the orchestrator's own probes (`/readyz`, cache warming) use.
    pub client: TlsTarget,
}

/// The certificate for `--tls` (`None` without it): the given files, or
/// a self-signed one generated into `dir`.
pub fn prepare(o: &PaperOpts, dir: &Path) -> Result<Option<PaperTls>, String> {
    if !o.tls {
        return Ok(None);
    }
    let (cert, key) = match (&o.tls_cert, &o.tls_key) {
        (Some(c), Some(k)) => (c.clone(), k.clone()),
        _ => self_signed(dir)?,
    };
    let config = client_config(None, true)?;
    let name = ServerName::try_from("localhost").expect("a valid name");
    Ok(Some(PaperTls {
        cert,
        key,
        client: TlsTarget { config, name },
    }))
}

/// A self-signed ECDSA P-256 certificate for `localhost` and 127.0.0.1
/// (the handshake the figures use), valid for two days.
fn self_signed(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let (cert, key) = (dir.join("tls-cert.pem"), dir.join("tls-key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
        ])
        .args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .map_err(|e| format!("--tls needs the `openssl` command (or --tls-cert/--tls-key): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "openssl could not make a certificate: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok((cert, key))
}
