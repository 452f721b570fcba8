//! The TLS client configuration for what corecast calls (`rediss://`):
//! one rustls [`ClientConfig`] for the process, built at start and shared
//! by every connection. Verification is always on: the server's chain must
//! lead to `--redis-tls-ca`'s certificates when given (a private CA), else
//! to the system's roots, and its certificate must name the host (sent as
//! SNI). There is no way to turn verification off.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

use super::error::TlsError;
use super::load::read_bounded;

/// The client configuration: the roots of `ca` (a PEM file of one or more
/// CA certificates), or the system's when `None`.
pub fn config(ca: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = match ca {
        Some(path) => file_roots(path)?,
        None => system_roots()?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// Every certificate in the PEM file at `path`, as trust anchors.
fn file_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let bad = |reason: String| TlsError::NoCertificate {
        path: path.to_path_buf(),
        reason,
    };
    let pem = read_bounded(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(bad("no usable CA certificate".into()));
    }
    Ok(roots)
}

/// The system's trust anchors (`/etc/ssl/certs` and the like, as OpenSSL
/// finds them; `SSL_CERT_FILE`/`SSL_CERT_DIR` are honoured). Certificates
/// that do not parse are skipped; none at all is an error.
fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map(|e| e.to_string())
            .unwrap_or_else(|| "none found".into());
        return Err(TlsError::NoRoots(why));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("corecast-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("empty.pem");
        std::fs::write(&path, b"no pem here").unwrap();
        let e = config(Some(&path)).unwrap_err();
        assert!(e.to_string().contains("empty.pem"), "{e}");
        let e = config(Some(&dir.join("missing.pem"))).unwrap_err();
        assert!(matches!(e, TlsError::Read { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
