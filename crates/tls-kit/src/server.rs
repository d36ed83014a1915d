//! The accept side: a certificate and key from PEM files, read again on [`ServerTls::reload`]
//! (a service calls it on SIGHUP); a handshake on an accepted connection; and [`sniff`], which
//! tells a TLS client hello from a plain HTTP request, so the latter gets an answer that names
//! the scheme instead of a reset connection.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::{TlsError, read_certs, read_key};

/// The one protocol every service speaks inside TLS.
const ALPN_HTTP1: &[u8] = b"http/1.1";
/// The first byte of a TLS record carrying a handshake (RFC 8446 §5.1, content type 22).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What a plain HTTP request to a TLS port is answered with, before the connection closes.
pub const PLAINTEXT_REFUSAL: &str =
    "this port speaks HTTPS: use https:// and the deployment's CA (plain HTTP is not served here)";

/// A service's TLS: its current certificate and the acceptor that presents it.
pub struct ServerTls {
    certificate: Arc<Reloading>,
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert_file", &self.certificate.cert_file)
            .finish_non_exhaustive()
    }
}

/// The certificate in force, replaced whole by a reload.
#[derive(Debug)]
struct Reloading {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// The certificate chain of `cert_file` with the key of `key_file`, which must belong to it.
fn certified(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = read_certs(cert_file)?;
    let key = read_key(key_file)?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| TlsError::new(key_file.display().to_string(), e))?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|e| {
        TlsError::new(
            key_file.display().to_string(),
            format!("not the key of {}: {e}", cert_file.display()),
        )
    })?;
    Ok(certified)
}

impl ServerTls {
    /// The one rule of every HTTP port we serve: HTTPS with `cert_file` and `key_file`
    /// (`TLS_CERT_FILE`, `TLS_KEY_FILE`), or plain HTTP (`None`) only when
    /// `unsafe_plaintext_http` (`UNSAFE_PLAINTEXT_HTTP`) says so; anything else is an error
    /// naming the settings, and the service does not start.
    pub fn chosen(
        cert_file: Option<&Path>,
        key_file: Option<&Path>,
        client_ca: Option<&Path>,
        unsafe_plaintext_http: bool,
    ) -> Result<Option<Self>, String> {
        match (cert_file, key_file, unsafe_plaintext_http) {
            (Some(cert), Some(key), false) => Self::load(cert, key, client_ca)
                .map(Some)
                .map_err(|e| format!("TLS_CERT_FILE / TLS_KEY_FILE: {e}")),
            (None, None, true) => Ok(None),
            (Some(_), Some(_), true) => {
                Err("TLS_CERT_FILE and UNSAFE_PLAINTEXT_HTTP are both set: choose one".into())
            }
            (Some(_), None, _) | (None, Some(_), _) => {
                Err("TLS_CERT_FILE and TLS_KEY_FILE go together: set both".into())
            }
            (None, None, false) => Err("TLS_CERT_FILE and TLS_KEY_FILE are required (HTTPS), or UNSAFE_PLAINTEXT_HTTP=true to serve plain HTTP on a network you trust".into()),
        }
    }

    /// TLS with the chain of `cert_file` and the key of `key_file` (PEM); with `client_ca`,
    /// a client may present a certificate, which must chain to that CA (PEM) and whose name
    /// [`peer_name`] then reads (a client without one still connects: its bearer secret
    /// proves it).
    pub fn load(
        cert_file: &Path,
        key_file: &Path,
        client_ca: Option<&Path>,
    ) -> Result<Self, TlsError> {
        let certificate = Arc::new(Reloading {
            current: RwLock::new(Arc::new(certified(cert_file, key_file)?)),
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
        });
        let builder = ServerConfig::builder_with_provider(crate::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::new("TLS", e))?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let what = || format!("TLS_CLIENT_CA_FILE {}", ca.display());
                let mut roots = rustls::RootCertStore::empty();
                for cert in read_certs(ca)? {
                    roots.add(cert).map_err(|e| TlsError::new(what(), e))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crate::provider())
                        .allow_unauthenticated()
                        .build()
                        .map_err(|e| TlsError::new(what(), e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_cert_resolver(certificate.clone());
        config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        Ok(Self {
            certificate,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Reads both files again and, when they hold a certificate and its key, presents them
    /// to every handshake from now on. Files that do not change nothing (the error says why).
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = certified(&self.certificate.cert_file, &self.certificate.key_file)?;
        *self
            .certificate
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        Ok(())
    }

    /// The handshake of an accepted connection.
    pub async fn accept(&self, stream: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        self.acceptor.accept(stream).await
    }
}

/// The first DNS name of the certificate the client presented on `stream`, which the client
/// CA verified during the handshake; `None` without one.
pub fn peer_name(stream: &TlsStream<TcpStream>) -> Option<String> {
    let leaf = stream.get_ref().1.peer_certificates()?.first()?;
    let cert = webpki::EndEntityCert::try_from(leaf).ok()?;
    cert.valid_dns_names().next().map(str::to_ascii_lowercase)
}

/// What the first byte of a connection says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniffed {
    /// A TLS handshake record.
    Tls,
    /// An upper-case ASCII letter: the method of a plain HTTP request.
    PlainHttp,
    /// Anything else, or nothing before the peer closed.
    Other,
}

/// Looks at the first byte of `stream` without taking it.
pub async fn sniff(stream: &TcpStream) -> std::io::Result<Sniffed> {
    let mut first = [0u8; 1];
    let read = stream.peek(&mut first).await?;
    Ok(match (read, first[0]) {
        (0, _) => Sniffed::Other,
        (_, TLS_HANDSHAKE_RECORD) => Sniffed::Tls,
        (_, b'A'..=b'Z') => Sniffed::PlainHttp,
        _ => Sniffed::Other,
    })
}
