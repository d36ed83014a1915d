//! `ClientBuilder`: how a [`LockClient`] or an [`AdminClient`] is made. It collects settings
//! (from code or from the environment), checks them all at `build`, and starts the client
//! only when every one is usable: no client exists with a configuration nobody checked.

use std::sync::Arc;
use std::time::Duration;

use crate::admin::AdminClient;
use crate::client::{ClientError, LockClient};
use crate::clock::SystemClock;
use crate::config::{ClientConfig, ConfigError, Credential};
use crate::transport::HttpTransport;

/// Settings for a [`LockClient`], checked when it is built.
///
/// ```
/// use std::time::Duration;
/// use lock_client::{ClientTls, LockClient};
///
/// let endpoints = ["https://locks-a.internal:8443", "https://locks-b.internal:8443"];
/// let builder = LockClient::builder(endpoints)
///     .credential("the client token")
///     .tls(ClientTls { ca_file: Some("/etc/locks/ca.pem".into()), ..ClientTls::default() })
///     .session_ttl(Duration::from_secs(15));
/// assert_eq!(builder.config()?.session_ttl(), Duration::from_secs(15));
/// // builder.build()? starts the client (and its heartbeat thread).
/// # Ok::<(), lock_client::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    config: ClientConfig,
}

impl LockClient {
    /// A builder for a client of the lock-server replicas at `endpoints` (base URLs, `https://`
    /// unless [`ClientTls::plaintext`](tls_kit::ClientTls::plaintext) says otherwise).
    pub fn builder(endpoints: impl IntoIterator<Item = impl Into<String>>) -> ClientBuilder {
        ClientBuilder {
            config: ClientConfig::new(endpoints),
        }
    }
}

impl ClientBuilder {
    /// A builder from the environment spellings, read through `lookup` (e.g.
    /// `|k| std::env::var(k).ok()`): `LOCK_ENDPOINTS` (comma-separated; default
    /// `https://127.0.0.1:8081`), `LOCK_CLIENT_TOKEN`, `LOCK_SESSION_TTL`, `LOCK_DEFAULT_TTL`,
    /// `LOCK_CLIENT_SAFETY_MARGIN`, `LOCK_CLIENT_HEARTBEAT_PERIOD`,
    /// `LOCK_CLIENT_REQUEST_TIMEOUT`, `TLS_CA_FILE`, `TLS_CLIENT_CERT_FILE`,
    /// `TLS_CLIENT_KEY_FILE`, `UNSAFE_PLAINTEXT_HTTP`. A value that cannot be used is an error
    /// naming its key.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Ok(Self {
            config: ClientConfig::from_env(lookup)?,
        })
    }

    /// Replaces the endpoints: base URLs of the lock-server replicas.
    #[must_use]
    pub fn endpoints(mut self, endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.config.endpoints = endpoints.into_iter().map(Into::into).collect();
        self
    }

    /// Allows `http://` endpoints (`UNSAFE_PLAINTEXT_HTTP`): the credential then crosses the
    /// network in clear. Without it a client with a plain endpoint is not built.
    #[must_use]
    pub fn unsafe_plaintext_http(mut self, allowed: bool) -> Self {
        self.config.tls.plaintext = allowed;
        self
    }

    /// The bearer token every call presents (the lock-server's client role). Never printed.
    #[must_use]
    pub fn credential(mut self, secret: impl Into<String>) -> Self {
        self.config.credential = Some(Credential::new(secret));
        self
    }

    /// What the client trusts and presents over TLS.
    #[must_use]
    pub fn tls(mut self, tls: tls_kit::ClientTls) -> Self {
        self.config.tls = tls;
        self
    }

    /// The session TTL to ask for (default 10 s).
    #[must_use]
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.config.session_ttl = ttl;
        self
    }

    /// The lease callers ask for when they have no reason to pick another (default 10 s).
    #[must_use]
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.config.default_ttl = ttl;
        self
    }

    /// The share of each lease given up to stop before the server expires it, in (0, 1)
    /// (default 0.3).
    #[must_use]
    pub fn safety_margin(mut self, margin: f64) -> Self {
        self.config.safety_margin = margin;
        self
    }

    /// A fixed heartbeat period, instead of min(session TTL, shortest live lease) × (1 −
    /// margin) / 3.
    #[must_use]
    pub fn heartbeat_period(mut self, period: Duration) -> Self {
        self.config.heartbeat_period = Some(period);
        self
    }

    /// The budget of one HTTP call (default 2 s).
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.request_timeout = timeout;
        self
    }

    /// The settings as a client would run with them, checked, without starting anything.
    pub fn config(&self) -> Result<ClientConfig, ConfigError> {
        self.config.validate()?;
        self.config.check_endpoints()?;
        Ok(self.config.clone())
    }

    /// Starts a client over HTTP, with its heartbeat thread.
    pub fn build(self) -> Result<LockClient, ClientError> {
        let config = self.config()?;
        let app = http(&config)?;
        let heartbeat = http(&config)?;
        LockClient::start(
            config,
            Arc::new(SystemClock::new()),
            Arc::new(app),
            Arc::new(heartbeat),
        )
    }

    /// An operator's client for one-shot calls: no session, no heartbeat thread.
    pub fn build_admin(self) -> Result<AdminClient, ClientError> {
        let config = self.config()?;
        let transport = http(&config)?;
        Ok(AdminClient::new(
            Arc::new(config),
            Arc::new(SystemClock::new()),
            Arc::new(transport),
        ))
    }

    /// A client from its parts: the clock, the transport application calls use, and the one
    /// the heartbeat thread uses (tests and fault injection; endpoints are not checked
    /// against TLS, since no HTTP is spoken).
    #[cfg(feature = "test-util")]
    pub fn build_with(
        self,
        clock: Arc<dyn crate::clock::Clock>,
        app_transport: Arc<dyn crate::transport::Transport>,
        heartbeat_transport: Arc<dyn crate::transport::Transport>,
    ) -> Result<LockClient, ClientError> {
        self.config.validate()?;
        LockClient::start(self.config, clock, app_transport, heartbeat_transport)
    }
}

fn http(config: &ClientConfig) -> Result<HttpTransport, ClientError> {
    HttpTransport::new(
        config.request_timeout,
        config.credential.as_ref(),
        &config.tls,
    )
    .map_err(|source| ClientError::Start {
        what: "the HTTP client",
        source: source.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_endpoints_need_the_opt_in() {
        let plain = LockClient::builder(["http://127.0.0.1:9"]);
        let err = plain.clone().build().unwrap_err();
        assert!(matches!(err, ClientError::Config(_)), "{err}");
        let source = std::error::Error::source(&err).expect("the config error is the source");
        assert!(source.to_string().contains("LOCK_ENDPOINTS"), "{source}");
        let told = plain.tls(tls_kit::ClientTls::plaintext());
        assert!(told.build().is_ok());
    }

    #[test]
    fn every_setting_is_checked_at_build() {
        let base = || LockClient::builder(["https://a:1"]);
        let bad = [
            base().safety_margin(1.0),
            base().session_ttl(Duration::ZERO),
            base().default_ttl(Duration::ZERO),
            base().request_timeout(Duration::ZERO),
            base().heartbeat_period(Duration::ZERO),
            LockClient::builder(Vec::<String>::new()),
        ];
        for builder in bad {
            assert!(builder.clone().config().is_err(), "{builder:?}");
            assert!(builder.build_admin().is_err());
        }
        assert!(base().config().is_ok());
    }
}
