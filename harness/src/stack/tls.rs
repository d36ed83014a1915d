//! A stack on TLS. Local processes: a CA of its own, one certificate for every service (they
//! all listen on 127.0.0.1), clients that trust only that CA. Compose: the CA compose.yaml's
//! tls-init made and exported to the host; the services' certificates stay in its volume.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Budget of one harness call to a service: a stopped process must not hang a test.
pub(super) const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// The PEM files of a stack on TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA every client trusts (`TLS_CA_FILE`).
    pub ca: PathBuf,
    /// The local services' certificate and key (`TLS_CERT_FILE`, `TLS_KEY_FILE`); none for
    /// compose, whose services read theirs from the stack's own volume.
    pub server: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    /// A new CA and a certificate for `localhost` and `127.0.0.1`, written under `dir/tls`.
    pub fn make(dir: &Path) -> anyhow::Result<Self> {
        let dir = dir.join("tls");
        std::fs::create_dir_all(&dir)?;
        let ca = tls_kit::LocalCa::new("stack CA")?;
        let issued = ca.issue(&["localhost", "127.0.0.1"])?;
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(dir.join("ca.pem"), ca.cert_pem())?;
        std::fs::write(&cert, issued.cert_pem)?;
        std::fs::write(&key, issued.key_pem)?;
        Ok(Self {
            ca: dir.join("ca.pem"),
            server: Some((cert, key)),
        })
    }

    /// The compose stack's CA, as its tls-init exported it to the host.
    pub fn of_compose(ca: PathBuf) -> anyhow::Result<Self> {
        anyhow::ensure!(
            ca.is_file(),
            "{}: no CA certificate (compose.yaml's tls-init writes it at start)",
            ca.display()
        );
        Ok(Self { ca, server: None })
    }

    /// The client side: trust this CA.
    pub fn client(&self) -> tls_kit::ClientTls {
        tls_kit::ClientTls {
            ca_file: Some(self.ca.clone()),
            identity: None,
            plaintext: false,
        }
    }
}

/// How a service of the stack listens: HTTPS with the stack's certificate, or plain HTTP said
/// so explicitly.
pub(super) fn server_env(tls: Option<&TlsFiles>) -> Vec<(&'static str, String)> {
    match tls.and_then(|files| files.server.as_ref()) {
        Some((cert, key)) => vec![
            ("UNSAFE_PLAINTEXT_HTTP", "false".to_owned()),
            ("TLS_CERT_FILE", cert.display().to_string()),
            ("TLS_KEY_FILE", key.display().to_string()),
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
