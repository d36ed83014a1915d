//! A local stack on TLS: a CA of its own, one certificate for every service (they all listen
//! on 127.0.0.1), clients that trust only that CA. Local processes only.

use super::*;

/// The PEM files of a stack on TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA every client trusts (`TLS_CA_FILE`).
    pub ca: PathBuf,
    /// The services' certificate (`TLS_CERT_FILE`).
    pub cert: PathBuf,
    /// Its key (`TLS_KEY_FILE`).
    pub key: PathBuf,
}

impl TlsFiles {
    /// A new CA and a certificate for `localhost` and `127.0.0.1`, written under `dir/tls`.
    pub fn make(dir: &Path) -> anyhow::Result<Self> {
        let dir = dir.join("tls");
        std::fs::create_dir_all(&dir)?;
        let ca = tls_kit::LocalCa::new("stack CA")?;
        let issued = ca.issue(&["localhost", "127.0.0.1"])?;
        let files = Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&files.ca, ca.cert_pem())?;
        std::fs::write(&files.cert, issued.cert_pem)?;
        std::fs::write(&files.key, issued.key_pem)?;
        Ok(files)
    }

    /// The client side: trust this CA.
    pub fn client(&self) -> tls_kit::ClientTls {
        tls_kit::ClientTls {
            ca_file: Some(self.ca.clone()),
            identity: None,
        }
    }
}

/// How a service of the stack listens: HTTPS with the stack's certificate, or plain HTTP said
/// so explicitly.
pub(super) fn server_env(tls: Option<&TlsFiles>) -> Vec<(&'static str, String)> {
    match tls {
        Some(files) => vec![
            ("UNSAFE_PLAINTEXT_HTTP", "false".to_owned()),
            ("TLS_CERT_FILE", files.cert.display().to_string()),
            ("TLS_KEY_FILE", files.key.display().to_string()),
        ],
        None => vec![("UNSAFE_PLAINTEXT_HTTP", "true".to_owned())],
    }
}

/// What a client of the stack's services trusts (nothing to say without TLS).
pub(super) fn client_env(tls: Option<&TlsFiles>) -> Vec<(&'static str, String)> {
    tls.map(|files| vec![("TLS_CA_FILE", files.ca.display().to_string())])
        .unwrap_or_default()
}

/// `http` or `https`.
pub(super) fn scheme(tls: Option<&TlsFiles>) -> &'static str {
    if tls.is_some() { "https" } else { "http" }
}

/// The harness's own HTTP client of the stack.
pub(super) fn http_client(tls: Option<&TlsFiles>) -> anyhow::Result<reqwest::Client> {
    let builder = reqwest::Client::builder().timeout(HTTP_TIMEOUT);
    Ok(match tls {
        Some(files) => files.client().apply(builder)?,
        None => builder,
    }
    .build()?)
}
