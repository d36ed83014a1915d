//! What can go wrong with TLS settings: always which file and why.

/// A TLS setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {message}")]
pub struct TlsError {
    /// The setting or file, e.g. `TLS_CERT_FILE /etc/tls/cert.pem`.
    pub what: String,
    /// Why.
    pub message: String,
}

impl TlsError {
    /// An error about `what`.
    pub fn new(what: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Self {
            what: what.into(),
            message: message.to_string(),
        }
    }
}
