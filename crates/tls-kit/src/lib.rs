//! TLS for every hop, in one place. Services serve HTTPS with a certificate and key from PEM
//! files ([`ServerTls`], feature `server`), read again on SIGHUP so a certificate is renewed
//! without a restart; a plain HTTP request to a TLS port is answered with a JSON error naming
//! the scheme, not a reset. Clients trust exactly one configured CA ([`ClientTls`], feature
//! `reqwest`). [`LocalCa`] (feature `generate`) makes a CA and the certificates it signs, for a
//! first start (`lock-server --generate-tls`) and for tests.
//!
//! One crypto provider everywhere: rustls on *ring*, TLS 1.2 and 1.3 with rustls' safe
//! defaults. No OpenSSL.

#[cfg(feature = "reqwest")]
mod client;
mod error;
mod files;
#[cfg(feature = "generate")]
mod generate;
#[cfg(feature = "server")]
mod server;

#[cfg(feature = "reqwest")]
pub use client::ClientTls;
pub use error::TlsError;
pub use files::{read_certs, read_key};
#[cfg(feature = "generate")]
pub use generate::{Issued, LocalCa};
#[cfg(feature = "server")]
pub use server::{PLAINTEXT_REFUSAL, ServerTls, Sniffed, peer_name, sniff};
#[cfg(feature = "server")]
pub use tokio_rustls::server::TlsStream;

/// The crypto provider every config of this crate is built on.
pub fn provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}
