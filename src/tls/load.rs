//! Certificate and key files → a rustls [`CertifiedKey`]: the PEM chain
//! (leaf first), the private key in any of the three PEM forms
//! certbot, `openssl` and cloud consoles write (PKCS#8 `PRIVATE KEY`,
//! PKCS#1 `RSA PRIVATE KEY`, SEC1 `EC PRIVATE KEY`), checked to belong
//! to the leaf.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::error::TlsError;

/// Largest certificate or key file read (a long chain is a few KiB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Most certificate pairs (`--tls-cert` entries): the SNI resolver tries
/// them in order.
pub const MAX_PAIRS: usize = 64;

/// Reads a file of at most [`MAX_FILE_BYTES`].
pub fn read_bounded(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let read = |error| TlsError::Read {
        path: path.to_path_buf(),
        error,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(TlsError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_FILE_BYTES,
        });
    }
    Ok(bytes)
}

/// The PEM certificate chain in `pem` (leaf first).
pub fn chain(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |reason: String| TlsError::NoCertificate {
        path: path.to_path_buf(),
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if chain.is_empty() {
        return Err(bad("no CERTIFICATE section".into()));
    }
    Ok(chain)
}

/// The first private key in `pem`.
pub fn key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| TlsError::NoKey {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Reads one certificate chain and its key, and checks that the key can
/// sign with ring and belongs to the leaf certificate.
pub fn certified_key(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = chain(cert_path, &read_bounded(cert_path)?)?;
    let key = key(key_path, &read_bounded(key_path)?)?;
    webpki::EndEntityCert::try_from(&chain[0]).map_err(|e| TlsError::BadCertificate {
        path: cert_path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let certified =
        CertifiedKey::from_der(chain, key, provider).map_err(|error| TlsError::BadKey {
            path: key_path.to_path_buf(),
            error,
        })?;
    Ok(Arc::new(certified))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_pem_sections_is_named_in_the_error() {
        let p = Path::new("/x/cert.pem");
        let e = chain(p, b"not a certificate").unwrap_err();
        assert!(
            e.to_string().starts_with("/x/cert.pem: no PEM certificate"),
            "{e}"
        );
        let e = key(
            Path::new("/x/key.pem"),
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("no PEM private key"), "{e}");
    }

    #[test]
    fn a_missing_file_is_a_read_error_naming_it() {
        let e = read_bounded(Path::new("/nonexistent/corecast.pem")).unwrap_err();
        assert!(matches!(e, TlsError::Read { .. }), "{e}");
        assert!(
            e.to_string().starts_with("/nonexistent/corecast.pem: "),
            "{e}"
        );
    }
}
