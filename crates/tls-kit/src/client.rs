//! The connecting side: a reqwest client that trusts exactly one CA, speaks nothing but
//! HTTPS, and may present a certificate of its own (mutual TLS). Plain `http://` only when
//! told (`UNSAFE_PLAINTEXT_HTTP`): every client checks each URL it is given with
//! [`ClientTls::check_url`] before it sends a credential anywhere.

use std::path::PathBuf;

use crate::TlsError;

/// How long an idle pooled connection is kept: below the servers' default header-read and
/// idle timeout (10 s, `HTTP_HEADER_READ_TIMEOUT`), so a call never goes out on a connection
/// the server is closing at that moment.
pub const POOL_IDLE_TIMEOUT_MS: u64 = 5_000;

/// Default headers presenting `secret` as `Authorization: Bearer`, marked sensitive (never
/// printed by the HTTP stack); `None` when `secret` cannot be a header value. The one place
/// our HTTP clients build a bearer header (the SDK, the executor, the harness).
pub fn bearer_headers(secret: &str) -> Option<reqwest::header::HeaderMap> {
    let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {secret}")).ok()?;
    value.set_sensitive(true);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::AUTHORIZATION, value);
    Some(headers)
}

/// What a client trusts, and what it presents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA certificate(s) every server's certificate must chain to (PEM): the key
    /// `TLS_CA_FILE` wherever a process calls a service.
    pub ca_file: Option<PathBuf>,
    /// A certificate and its key (PEM) presented to servers that ask for one
    /// (`TLS_CLIENT_CERT_FILE`, `TLS_CLIENT_KEY_FILE`).
    pub identity: Option<(PathBuf, PathBuf)>,
    /// `UNSAFE_PLAINTEXT_HTTP`: `http://` URLs may be called, credentials and all, in clear.
    /// Without it a client refuses them.
    pub plaintext: bool,
}

/// Whether `raw`, the value of `UNSAFE_PLAINTEXT_HTTP`, allows plain HTTP: the values the
/// services' flag (clap's) takes as true, `true`, `yes`, `on`, `1` (any case, trimmed);
/// anything else does not.
pub fn plaintext_allowed(raw: Option<&str>) -> bool {
    raw.map(str::trim).is_some_and(|v| {
        ["true", "yes", "on", "1"]
            .iter()
            .any(|truthy| v.eq_ignore_ascii_case(truthy))
    })
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
            plaintext: plaintext_allowed(lookup("UNSAFE_PLAINTEXT_HTTP").as_deref()),
        }
    }

    /// Plain HTTP allowed (tests and loopback tools that say so).
    pub fn plaintext() -> Self {
        Self {
            plaintext: true,
            ..Self::default()
        }
    }

    /// Whether this client may call `url`, given as `setting` (`LOCK_ENDPOINTS`, `--url`, …):
    /// `https://` always; `http://` only with [`ClientTls::plaintext`], since it would send
    /// the credential in clear; nothing else.
    pub fn check_url(&self, setting: &str, url: &str) -> Result<(), TlsError> {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("https") => Ok(()),
            Some("http") if self.plaintext => Ok(()),
            Some("http") => Err(TlsError::new(
                format!("{setting} {url}"),
                "plain http:// would send credentials in clear: use https:// (and TLS_CA_FILE), or set UNSAFE_PLAINTEXT_HTTP=true on a network you trust",
            )),
            _ => Err(TlsError::new(
                format!("{setting} {url}"),
                "must be an https:// URL",
            )),
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
        if !self.plaintext {
            builder = builder.https_only(true);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_refused_unless_told() {
        let strict = ClientTls::from_lookup(|_| None);
        assert!(!strict.plaintext);
        assert_eq!(strict.check_url("LOCK_ENDPOINTS", "https://a:1"), Ok(()));
        let refused = strict
            .check_url("LOCK_ENDPOINTS", "http://a:1")
            .unwrap_err()
            .to_string();
        assert!(
            refused.starts_with("LOCK_ENDPOINTS http://a:1: plain http://")
                && refused.contains("UNSAFE_PLAINTEXT_HTTP=true"),
            "{refused}"
        );
        assert!(strict.check_url("--url", "HTTP://a:1").is_err(), "any case");
        assert!(strict.check_url("--url", "ftp://a").is_err());
        assert!(strict.check_url("--url", "a:1").is_err());

        for told in ["true", "TRUE", " 1 ", "yes", "on"] {
            let plain =
                ClientTls::from_lookup(|k| (k == "UNSAFE_PLAINTEXT_HTTP").then(|| told.to_owned()));
            assert_eq!(plain.check_url("--url", "http://a:1"), Ok(()), "{told}");
        }
        for not in ["false", "0", "", "no", "off", "yes please"] {
            assert!(!plaintext_allowed(Some(not)), "{not}");
        }
    }
}
