//! Which certificate a handshake gets: the first whose leaf is valid for
//! the name the client sent in SNI (its DNS names, wildcards included),
//! else the first certificate (clients that send no SNI, e.g. those
//! connecting by IP address, and names no certificate covers).

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, DnsName, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::error::TlsError;

/// The certificates in `--tls-cert` order.
#[derive(Debug)]
pub struct Resolver {
    keys: Vec<Arc<CertifiedKey>>,
}

impl Resolver {
    /// A resolver over `keys` (at least one; the first is the default).
    pub fn new(keys: Vec<Arc<CertifiedKey>>) -> Result<Resolver, TlsError> {
        if keys.is_empty() {
            return Err(TlsError::Unpaired { certs: 0, keys: 0 });
        }
        Ok(Resolver { keys })
    }

    /// The certificate for SNI `name` (`None`: no SNI).
    pub fn choose(&self, name: Option<&str>) -> &Arc<CertifiedKey> {
        name.and_then(|n| DnsName::try_from(n).ok())
            .and_then(|dns| {
                let name = ServerName::DnsName(dns);
                self.keys.iter().find(|k| valid_for(&k.cert[0], &name))
            })
            .unwrap_or(&self.keys[0])
    }
}

/// Whether `leaf` names `name` (checked when the files were loaded, so
/// an unparsable leaf cannot occur; it would match nothing).
fn valid_for(leaf: &CertificateDer<'_>, name: &ServerName<'_>) -> bool {
    webpki::EndEntityCert::try_from(leaf)
        .is_ok_and(|c| c.verify_is_valid_for_subject_name(name).is_ok())
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.choose(hello.server_name()).clone())
    }
}
