//! PEM files: a certificate chain (leaf first) and a private key (PKCS#8, PKCS#1 or SEC1).

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsError;

/// Every certificate of the PEM file at `path`, in order; at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let what = || format!("{}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::new(what(), e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::new(what(), e))?;
    if certs.is_empty() {
        return Err(TlsError::new(what(), "no PEM certificate in it"));
    }
    Ok(certs)
}

/// The private key of the PEM file at `path`.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        TlsError::new(
            format!("{}", path.display()),
            format!("no usable PEM private key: {e}"),
        )
    })
}
