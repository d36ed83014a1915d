//! The settings of one client ([`ClientConfig`], read-only once built), with the keys and
//! environment spellings of `docs/contracts/C5-config-build-and-naming.md`, and the rule
//! that checks them. [`ClientBuilder`](crate::ClientBuilder) sets them; the acquire policy
//! (`AcquirePolicy`) lives with the loop that follows it (`core::acquire`).

use std::time::Duration;

/// Default `lock.session.ttl`.
const DEFAULT_SESSION_TTL_MS: u64 = 10_000;
/// Default `lock.default.ttl` (lease asked for when the caller names none).
const DEFAULT_LOCK_TTL_MS: u64 = 10_000;
/// Default `lock.client.safety-margin`.
const DEFAULT_SAFETY_MARGIN: f64 = 0.30;
/// Default per-request timeout.
const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 2_000;
/// Where a client with no `LOCK_ENDPOINTS` looks: one local replica, over TLS.
const DEFAULT_ENDPOINT: &str = "https://127.0.0.1:8081";

/// A configuration value that cannot be used; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
#[non_exhaustive]
pub struct ConfigError {
    /// The configuration key (and its environment spelling).
    pub key: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl ConfigError {
    fn new(key: &'static str, reason: impl Into<String>) -> Self {
        Self {
            key,
            reason: reason.into(),
        }
    }
}

/// The settings of one [`LockClient`](crate::LockClient), as
/// [`LockClient::config`](crate::LockClient::config) shows them: checked, read-only.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    pub(crate) endpoints: Vec<String>,
    pub(crate) session_ttl: Duration,
    pub(crate) default_ttl: Duration,
    pub(crate) safety_margin: f64,
    pub(crate) heartbeat_period: Option<Duration>,
    pub(crate) request_timeout: Duration,
    pub(crate) credential: Option<Credential>,
    pub(crate) tls: tls_kit::ClientTls,
}

/// A bearer credential (an operator's admin token, for
/// [`revoke`](crate::admin::AdminClient::revoke)): compared and cloned like a string, never
/// printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential(String);

impl Credential {
    /// Wraps `secret`.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself, for the `Authorization` header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

impl ClientConfig {
    /// Defaults for the given endpoints.
    pub(crate) fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            session_ttl: Duration::from_millis(DEFAULT_SESSION_TTL_MS),
            default_ttl: Duration::from_millis(DEFAULT_LOCK_TTL_MS),
            safety_margin: DEFAULT_SAFETY_MARGIN,
            heartbeat_period: None,
            request_timeout: Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS),
            credential: None,
            tls: tls_kit::ClientTls::default(),
        }
    }

    /// Reads the environment spellings through `lookup`; absent keys keep their defaults.
    pub(crate) fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let endpoints = lookup("LOCK_ENDPOINTS").unwrap_or_else(|| DEFAULT_ENDPOINT.into());
        let mut config = Self::new(
            endpoints
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty()),
        );
        let duration = |key: &'static str| -> Result<Option<Duration>, ConfigError> {
            lookup(key)
                .map(|raw| {
                    humantime::parse_duration(raw.trim()).map_err(|e| {
                        ConfigError::new(
                            key,
                            format!("{raw:?} is not a duration like 10s or 500ms: {e}"),
                        )
                    })
                })
                .transpose()
        };
        if let Some(v) = duration("LOCK_SESSION_TTL")? {
            config.session_ttl = v;
        }
        if let Some(v) = duration("LOCK_DEFAULT_TTL")? {
            config.default_ttl = v;
        }
        if let Some(v) = duration("LOCK_CLIENT_REQUEST_TIMEOUT")? {
            config.request_timeout = v;
        }
        config.heartbeat_period = duration("LOCK_CLIENT_HEARTBEAT_PERIOD")?;
        if let Some(raw) = lookup("LOCK_CLIENT_SAFETY_MARGIN") {
            config.safety_margin = raw.trim().parse().map_err(|_| {
                ConfigError::new(
                    "lock.client.safety-margin (LOCK_CLIENT_SAFETY_MARGIN)",
                    format!("{raw:?} is not a number"),
                )
            })?;
        }
        config.credential = lookup("LOCK_CLIENT_TOKEN")
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .map(Credential::new);
        config.tls = tls_kit::ClientTls::from_lookup(&lookup);
        config.validate()?;
        Ok(config)
    }

    /// Checks every field; the error names the key.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let fail = |key, reason: &str| Err(ConfigError::new(key, reason));
        if self.endpoints.is_empty() {
            return fail("LOCK_ENDPOINTS", "at least one lock-server URL is required");
        }
        if !(self.safety_margin > 0.0 && self.safety_margin < 1.0) {
            return fail(
                "lock.client.safety-margin (LOCK_CLIENT_SAFETY_MARGIN)",
                "must lie strictly between 0 and 1",
            );
        }
        if self.session_ttl.is_zero() {
            return fail("lock.session.ttl (LOCK_SESSION_TTL)", "must be positive");
        }
        if self.default_ttl.is_zero() {
            return fail("lock.default.ttl (LOCK_DEFAULT_TTL)", "must be positive");
        }
        if self.request_timeout.is_zero() {
            return fail(
                "lock.client.request-timeout (LOCK_CLIENT_REQUEST_TIMEOUT)",
                "must be positive",
            );
        }
        if self.heartbeat_period.is_some_and(|p| p.is_zero()) {
            return fail(
                "lock.client.heartbeat-period (LOCK_CLIENT_HEARTBEAT_PERIOD)",
                "must be positive",
            );
        }
        Ok(())
    }

    /// Checks that every endpoint may be called over HTTP with this configuration's TLS:
    /// `https://`, or `http://` only with `tls.plaintext` (`UNSAFE_PLAINTEXT_HTTP`), since it
    /// would send the credential in clear.
    pub(crate) fn check_endpoints(&self) -> Result<(), ConfigError> {
        for endpoint in &self.endpoints {
            self.tls
                .check_url("LOCK_ENDPOINTS", endpoint)
                .map_err(|e| {
                    ConfigError::new("LOCK_ENDPOINTS", format!("{endpoint}: {}", e.message))
                })?;
        }
        Ok(())
    }

    /// Base URLs of the lock-server replicas (`LOCK_ENDPOINTS`). A session moves to the next
    /// one on `NOT_LEADER` or no answer.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// `lock.session.ttl` (`LOCK_SESSION_TTL`): the session TTL asked for.
    pub fn session_ttl(&self) -> Duration {
        self.session_ttl
    }

    /// `lock.default.ttl` (`LOCK_DEFAULT_TTL`): the lease to ask for when a caller has no
    /// reason to pick another.
    pub fn default_ttl(&self) -> Duration {
        self.default_ttl
    }

    /// `lock.client.safety-margin` (`LOCK_CLIENT_SAFETY_MARGIN`), in (0, 1): the share of each
    /// granted lease the client gives up to be sure it stops before the server expires it.
    pub fn safety_margin(&self) -> f64 {
        self.safety_margin
    }

    /// `lock.client.request-timeout` (`LOCK_CLIENT_REQUEST_TIMEOUT`): budget of one HTTP call.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// What the client trusts and presents (`TLS_CA_FILE`, `TLS_CLIENT_CERT_FILE`,
    /// `TLS_CLIENT_KEY_FILE`, `UNSAFE_PLAINTEXT_HTTP`).
    pub fn tls(&self) -> &tls_kit::ClientTls {
        &self.tls
    }

    /// What the heartbeat guarantees a caller: right after a tick, a live grant whose lease
    /// (and session TTL) is at least `basis` has at least this long before its conservative
    /// deadline. A write needing more can never pass a lease check.
    pub fn remaining_after_tick(&self, basis: Duration) -> Duration {
        let basis_ms = u64::try_from(basis.as_millis()).unwrap_or(u64::MAX);
        crate::core::remaining_after_tick(self.safety_margin, basis_ms)
    }

    /// The longest a supervisor may let a process run between the stop signal it sends at
    /// a lost grant's conservative deadline and the kill, for a lease of `lease`: half the
    /// margin.
    pub fn stop_grace_limit(&self, lease: Duration) -> Duration {
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        crate::core::stop_grace_limit(self.safety_margin, lease_ms)
    }

    /// The heartbeat period for a session TTL and the shortest live lease (if any).
    pub(crate) fn heartbeat_period_for(
        &self,
        session_ttl_ms: u64,
        shortest_lease_ms: Option<u64>,
    ) -> Duration {
        if let Some(fixed) = self.heartbeat_period {
            return fixed;
        }
        let basis_ms = shortest_lease_ms.map_or(session_ttl_ms, |l| l.min(session_ttl_ms));
        crate::core::heartbeat_period(self.safety_margin, basis_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_part_is_exact_for_the_default_margin() {
        let config = ClientConfig::new(["http://x"]);
        assert_eq!(
            crate::core::usable_nanos(config.safety_margin, 10_000),
            7_000_000_000
        );
        assert_eq!(
            crate::core::usable_nanos(config.safety_margin, 1_000),
            700_000_000
        );
    }

    #[test]
    fn period_follows_the_shortest_lease() {
        let config = ClientConfig::new(["http://x"]);
        assert_eq!(
            config.heartbeat_period_for(9_000, None),
            Duration::from_millis(2_100)
        );
        assert_eq!(
            config.heartbeat_period_for(9_000, Some(3_000)),
            Duration::from_millis(700)
        );
    }

    #[test]
    fn env_keys_are_read_and_bad_values_name_the_key() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let config = ClientConfig::from_env(env(&[
            ("LOCK_ENDPOINTS", "http://a:1, http://b:2"),
            ("LOCK_SESSION_TTL", "6s"),
            ("LOCK_CLIENT_SAFETY_MARGIN", "0.25"),
        ]))
        .unwrap();
        assert_eq!(config.endpoints, vec!["http://a:1", "http://b:2"]);
        assert_eq!(config.session_ttl, Duration::from_secs(6));
        assert!((config.safety_margin - 0.25).abs() < f64::EPSILON);
        for margin in ["0", "1", "1.5", "-0.1", "abc"] {
            let err = ClientConfig::from_env(move |k| {
                (k == "LOCK_CLIENT_SAFETY_MARGIN").then(|| margin.to_owned())
            })
            .unwrap_err();
            assert!(err.key.contains("safety-margin"), "{margin}: {err}");
        }
        let err = ClientConfig::from_env(env(&[("LOCK_SESSION_TTL", "ten")])).unwrap_err();
        assert!(err.key.contains("LOCK_SESSION_TTL"));
    }

    #[test]
    fn plain_http_endpoints_need_the_opt_in() {
        let default = ClientConfig::from_env(|_| None).unwrap();
        assert_eq!(default.endpoints, vec!["https://127.0.0.1:8081"]);
        assert_eq!(default.check_endpoints(), Ok(()));
        let plain = [("LOCK_ENDPOINTS", "https://a:1, http://b:2")];
        let refused = ClientConfig::from_env(move |k| {
            plain
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| (*v).to_owned())
        })
        .unwrap()
        .check_endpoints()
        .unwrap_err();
        assert_eq!(refused.key, "LOCK_ENDPOINTS");
        assert!(
            refused.reason.starts_with("http://b:2: plain http://"),
            "{refused}"
        );
        let told = [
            ("LOCK_ENDPOINTS", "http://b:2"),
            ("UNSAFE_PLAINTEXT_HTTP", "true"),
        ];
        let config = ClientConfig::from_env(move |k| {
            told.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| (*v).to_owned())
        })
        .unwrap();
        assert_eq!(config.check_endpoints(), Ok(()));
    }
}
