//! The connecting side: a reqwest client that trusts exactly one CA, speaks nothing but
//! HTTPS, and may present a certificate of its own (mutual TLS). Without a CA it is left as
//! it was (plain HTTP clients of a deployment that runs without TLS).

use std::path::PathBuf;

use crate::TlsError;

/// What a client trusts, and what it presents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA certificate(s) every server's certificate must chain to (PEM): the key
    /// `TLS_CA_FILE` wherever a process calls a service.
    pub ca_file: Option<PathBuf>,
    /// A certificate and its key (PEM) presented to servers that ask for one
    /// (`TLS_CLIENT_CERT_FILE`, `TLS_CLIENT_KEY_FILE`).
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl ClientTls {
    /// From the process environment.
    pub fn from_env() -> Self {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// From `TLS_CA_FILE`, `TLS_CLIENT_CERT_FILE` and `TLS_CLIENT_KEY_FILE` as `lookup`
    /// finds them (empty is unset).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let path = |key| {
            lookup(key)
                .filter(|v| !v.trim().is_empty())
                .map(PathBuf::from)
        };
        Self {
            ca_file: path("TLS_CA_FILE"),
            identity: path("TLS_CLIENT_CERT_FILE").zip(path("TLS_CLIENT_KEY_FILE")),
        }
    }

    /// `builder`, trusting exactly this CA, refusing any `http://` URL and presenting the
    /// identity, if any; unchanged without either.
    pub fn apply(
        &self,
        builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, TlsError> {
        let mut builder = builder;
        if let Some((cert, key)) = &self.identity {
            let what = || format!("TLS_CLIENT_CERT_FILE {}", cert.display());
            let mut pem = std::fs::read(cert).map_err(|e| TlsError::new(what(), e))?;
            pem.push(b'\n');
            pem.extend(
                std::fs::read(key).map_err(|e| {
                    TlsError::new(format!("TLS_CLIENT_KEY_FILE {}", key.display()), e)
                })?,
            );
            let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                TlsError::new(what(), format!("not a PEM certificate and key: {e}"))
            })?;
            builder = builder.use_rustls_tls().identity(identity);
        }
        let Some(ca_file) = &self.ca_file else {
            return Ok(builder);
        };
        let what = || format!("TLS_CA_FILE {}", ca_file.display());
        let pem = std::fs::read(ca_file).map_err(|e| TlsError::new(what(), e))?;
        let roots = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| TlsError::new(what(), format!("not PEM certificates: {e}")))?;
        if roots.is_empty() {
            return Err(TlsError::new(what(), "no PEM certificate in it"));
        }
        builder = builder
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .https_only(true);
        for root in roots {
            builder = builder.add_root_certificate(root);
        }
        Ok(builder)
    }
}
