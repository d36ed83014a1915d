//! TLS for every hop, in one place. Services serve HTTPS with a certificate and key from PEM
//! files ([`ServerTls`], feature `server`), read again on SIGHUP so a certificate is renewed
//! without a restart; a plain HTTP request to a TLS port is answered with a JSON error naming
//! the scheme, not a reset. With a client CA, clients may present certificates (mutual TLS);
//! [`peer_name`] reads the verified one's name. Clients trust exactly one configured CA and
//! may present a certificate ([`ClientTls`], feature `reqwest`). [`LocalCa`] (feature
//! `generate`) makes a CA and the certificates it signs, for a first start (`lock-server
//! --generate-tls`) and for tests.
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
mod parse_errors;
#[cfg(feature = "probe")]
mod probe;
#[cfg(feature = "server")]
mod server;

#[cfg(feature = "reqwest")]
pub use client::{ClientTls, POOL_IDLE_TIMEOUT_MS, bearer_headers, plaintext_allowed};
pub use error::TlsError;
pub use files::{read_certs, read_key};
#[cfg(feature = "generate")]
pub use generate::{Issued, LocalCa};
#[cfg(feature = "server")]
pub use parse_errors::{JsonParseErrors, PARSE_ERROR_ANSWERS};
#[cfg(feature = "probe")]
pub use probe::probe;
#[cfg(feature = "server")]
pub use server::{PLAINTEXT_REFUSAL, ServerTls, Sniffed, peer_name, sniff};
#[cfg(feature = "server")]
pub use tokio_rustls::server::TlsStream;

/// The crypto provider every config of this crate is built on.
pub fn provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}

#[cfg(all(test, feature = "server", feature = "generate", feature = "reqwest"))]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_loads_with_its_own_key_only_and_reloads_the_same_way() {
        let dir = tempfile::tempdir().unwrap();
        let ca = LocalCa::new("test CA").unwrap();
        let (one, two) = (
            ca.issue(&["localhost"]).unwrap(),
            ca.issue(&["localhost"]).unwrap(),
        );
        let write = |name: &str, pem: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        let (cert, key) = (
            write("cert.pem", &one.cert_pem),
            write("key.pem", &one.key_pem),
        );
        let other_key = write("other-key.pem", &two.key_pem);
        let ca_file = write("ca.pem", &ca.cert_pem());
        let tls = ServerTls::load(&cert, &key, Some(&ca_file)).unwrap();
        let refused = ServerTls::load(&cert, &other_key, None).unwrap_err();
        assert!(refused.message.contains("not the key of"), "{refused}");
        write("key.pem", &two.key_pem);
        assert!(
            tls.reload().is_err(),
            "a mismatched pair is refused on reload too"
        );
        let empty = write("empty.pem", "");
        assert!(
            read_certs(&empty)
                .unwrap_err()
                .message
                .contains("no PEM certificate")
        );
        let missing = ServerTls::load(&dir.path().join("none.pem"), &key, None).unwrap_err();
        assert!(missing.what.ends_with("none.pem"), "{missing}");
    }

    #[test]
    fn a_client_reads_its_settings_and_refuses_a_file_that_holds_no_ca() {
        let lookup = |key: &str| match key {
            "TLS_CA_FILE" => Some("/etc/ca.pem".to_owned()),
            "TLS_CLIENT_CERT_FILE" => Some("/etc/c.pem".to_owned()),
            "TLS_CLIENT_KEY_FILE" => Some(" ".to_owned()),
            _ => None,
        };
        let tls = ClientTls::from_lookup(lookup);
        assert_eq!(
            tls.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        assert_eq!(
            tls.identity, None,
            "a certificate without its key is no identity"
        );
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let tls = ClientTls {
            ca_file: Some(junk),
            ..ClientTls::default()
        };
        let err = tls.apply(reqwest::Client::builder()).unwrap_err();
        assert!(err.what.starts_with("TLS_CA_FILE"), "{err}");
    }
}
