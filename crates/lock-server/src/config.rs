//! lock-server configuration: flags with environment fallbacks (the keys and spellings of
//! `docs/contracts/C5-config-build-and-naming.md`).

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};
pub use service_kit::LogFormat;

/// Which `LockStore` to run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// PostgreSQL at `DATABASE_URL` (production).
    Postgres,
    /// In-process memory (tests and demos; state dies with the process).
    Memory,
    /// An etcd cluster at `LOCK_ETCD_ENDPOINTS`.
    Etcd,
}

/// lock-server settings. Durations take units: `500ms`, `10s`, `1m`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "lock-server",
    version,
    about = "HTTP lock service with fencing tokens",
    args_override_self = true
)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "LOCK_SERVER_BIND", default_value = "127.0.0.1:8081")]
    pub bind: SocketAddr,

    /// Store backend.
    #[arg(long, env = "LOCK_BACKEND", value_enum, default_value = "postgres")]
    pub backend: BackendChoice,

    /// PostgreSQL URL of lockdb (required for the postgres backend).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Most pooled PostgreSQL connections.
    #[arg(long, env = "LOCK_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,

    /// Group commit on PostgreSQL: heartbeats, acquires, renews and releases that arrive
    /// while the previous batch is being committed go together, in one transaction (one WAL
    /// flush). A lone request goes at once. `false` commits each alone (for comparison).
    #[arg(long, env = "LOCK_DB_GROUP_COMMIT", default_value_t = true, action = clap::ArgAction::Set)]
    pub db_group_commit: bool,

    /// Hand-over on PostgreSQL: the transaction that frees a key (release, revoke, reap)
    /// grants it to its first live waiter, whose parked request is answered without asking
    /// again (one commit per hand-over). `false` wakes that waiter to ask (for comparison).
    #[arg(long, env = "LOCK_DB_HAND_OVER", default_value_t = true, action = clap::ArgAction::Set)]
    pub db_hand_over: bool,

    /// etcd members, comma-separated `http://host:port` (required for the etcd backend).
    #[arg(long, env = "LOCK_ETCD_ENDPOINTS", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,

    /// Every etcd key of this deployment lives under this prefix.
    #[arg(long, env = "LOCK_ETCD_PREFIX", default_value = "/lock-service")]
    pub etcd_prefix: String,

    /// Budget of one etcd call: past it, the request answers 503 STORE_UNAVAILABLE.
    #[arg(long, env = "LOCK_ETCD_REQUEST_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub etcd_request_timeout: Duration,

    /// Start even when the store can lose a committed token after a crash (PostgreSQL with
    /// fsync or synchronous_commit off, the memory backend): tokens may then be reused and
    /// fencing no longer protects anything. For throwaway test stores only.
    #[arg(long, env = "LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE")]
    pub unsafe_allow_non_durable_store: bool,

    /// `lock.session.ttl`: session TTL when a session is opened without one.
    #[arg(long = "lock.session.ttl", env = "LOCK_SESSION_TTL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub session_ttl: Duration,

    /// `lock.default.ttl`: lease when an acquire names none.
    #[arg(long = "lock.default.ttl", env = "LOCK_DEFAULT_TTL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub default_ttl: Duration,

    /// `lock.ttl.min`: shortest TTL granted; shorter requests are raised to it.
    #[arg(long = "lock.ttl.min", env = "LOCK_TTL_MIN", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub ttl_min: Duration,

    /// `lock.ttl.max`: longest TTL granted; longer requests are clamped to it.
    #[arg(long = "lock.ttl.max", env = "LOCK_TTL_MAX", default_value = "60s", value_parser = humantime::parse_duration)]
    pub ttl_max: Duration,

    /// `lock.max.wait`: longest an acquire may wait for its key (`wait_ms` is clamped to it). Must
    /// leave `LOCK_REQUEST_TIMEOUT` at least 500 ms to answer in.
    #[arg(long = "lock.max.wait", env = "LOCK_MAX_WAIT", default_value = "4s", value_parser = humantime::parse_duration)]
    pub max_wait: Duration,

    /// `lock.default.lock-delay`: lock-delay of a grant whose acquire names none (ADR 0006).
    #[arg(long = "lock.default.lock-delay", env = "LOCK_DEFAULT_LOCK_DELAY", default_value = "0s", value_parser = humantime::parse_duration)]
    pub default_lock_delay: Duration,

    /// `lock.max.lock-delay`: longest lock-delay granted; longer requests are clamped to it.
    #[arg(long = "lock.max.lock-delay", env = "LOCK_MAX_LOCK_DELAY", default_value = "60s", value_parser = humantime::parse_duration)]
    pub max_lock_delay: Duration,

    /// `lock.max.waiters`: waiting acquires this replica holds at once, over all keys;
    /// past it, an acquire with `wait_ms` answers 429 `TOO_MANY_WAITERS`.
    #[arg(
        long = "lock.max.waiters",
        env = "LOCK_MAX_WAITERS",
        default_value_t = 10_000
    )]
    pub max_waiters: usize,

    /// `lock.max.waiters-per-key`: waiting acquires this replica holds for one key.
    #[arg(
        long = "lock.max.waiters-per-key",
        env = "LOCK_MAX_WAITERS_PER_KEY",
        default_value_t = 2_048
    )]
    pub max_waiters_per_key: usize,

    /// Bearer token for revoke (the operators'). When unset, revoke answers 403.
    #[arg(long, env = "LOCK_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Bearer token lock clients present on every lock call but revoke: the credential
    /// `lock-client`, any owner. With neither it nor a credentials file naming a `client`,
    /// those calls answer 403.
    #[arg(long, env = "LOCK_CLIENT_TOKEN", hide_env_values = true)]
    pub client_token: Option<String>,

    /// Named credentials, one a line (`name roles owners sha256:<hex> [limits]`, roles
    /// `client` and `admin`; `lockctl credential` writes lines), read again on SIGHUP. Each
    /// client is bound to the owners it may open sessions as and can be removed alone.
    #[arg(long, env = "LOCK_CREDENTIALS_FILE")]
    pub credentials_file: Option<std::path::PathBuf>,

    /// Requests a second and burst per caller per replica.
    #[command(flatten)]
    pub rate: service_kit::RateDefaults,

    /// Live sessions one caller may hold, counted in the store across replicas; one more
    /// answers 429 `TOO_MANY_SESSIONS`. A credential's `sessions=` overrides it.
    #[arg(long = "limits.sessions", env = "LIMIT_SESSIONS", default_value_t = crate::quota::SESSIONS_PER_CALLER_DEFAULT, value_parser = clap::value_parser!(u32).range(1..))]
    pub sessions_per_caller: u32,

    /// Acquires of one caller waiting on this replica at once; one more answers 429
    /// `TOO_MANY_WAITERS`. A credential's `waiters=` overrides it.
    #[arg(long = "limits.waiters", env = "LIMIT_WAITERS", default_value_t = crate::quota::WAITERS_PER_CALLER_DEFAULT, value_parser = clap::value_parser!(u32).range(1..))]
    pub waiters_per_caller: u32,

    /// Ed25519 secret seed (base64, 32 bytes) every grant's proof is signed with; replicas
    /// share it. When unset, grants carry no proof and resources refuse their tokens.
    #[arg(long, env = "LOCK_SIGNING_KEY", hide_env_values = true)]
    pub signing_key: Option<String>,

    /// Id of the signing key, named in every proof (rotation: resources trust several ids).
    #[arg(long, env = "LOCK_SIGNING_KEY_ID", default_value = "k1")]
    pub signing_key_id: String,

    /// Print a new signing key and its public key as env lines, then exit.
    #[arg(long)]
    pub generate_signing_key: bool,

    /// Write a local CA (`ca.pem`) and a certificate and key for each of `--tls-names` into
    /// DIR, then exit: a first start's TLS. Never overwrites a file.
    #[arg(long, value_name = "DIR")]
    pub generate_tls: Option<std::path::PathBuf>,

    /// The service names `--generate-tls` makes certificates for (each also valid for
    /// localhost and 127.0.0.1).
    #[arg(long, value_delimiter = ',', default_value = "localhost")]
    pub tls_names: Vec<String>,

    /// How often expired grants and sessions are deleted.
    #[arg(long, env = "LOCK_REAPER_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub reaper_interval: Duration,

    /// After SIGTERM, how long new mutations are answered NOT_LEADER before the listener closes.
    #[arg(long, env = "LOCK_DRAIN_GRACE", default_value = "1s", value_parser = humantime::parse_duration)]
    pub drain_grace: Duration,

    /// Budget for one request, end to end.
    #[arg(long, env = "LOCK_REQUEST_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
    /// Connection limits (header-read/idle timeout, connection cap).
    #[command(flatten)]
    pub http: service_kit::HttpLimits,
}

/// The TTL range and defaults, in milliseconds, as handlers apply them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlPolicy {
    /// Session TTL when a session is opened without one.
    pub session_default_ms: u64,
    /// Lease when an acquire names none.
    pub lock_default_ms: u64,
    /// Shortest granted TTL.
    pub min_ms: u64,
    /// Longest granted TTL.
    pub max_ms: u64,
}

impl TtlPolicy {
    /// Clamps a requested TTL into `[min_ms, max_ms]`.
    pub fn clamp(&self, requested_ms: u64) -> u64 {
        requested_ms.clamp(self.min_ms, self.max_ms)
    }
}

/// What a waiting request needs left of `LOCK_REQUEST_TIMEOUT` after its wait: the last
/// store call and the answer.
pub const WAIT_ANSWER_MARGIN_MS: u64 = 500;

/// Waiting and lock-delay limits, in milliseconds and counts, as handlers apply them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Longest wait granted to one acquire.
    pub max_wait_ms: u64,
    /// Lock-delay when an acquire names none.
    pub default_lock_delay_ms: u64,
    /// Longest lock-delay granted.
    pub max_lock_delay_ms: u64,
    /// Waiters this replica holds at once.
    pub max_waiters: usize,
    /// Waiters this replica holds for one key.
    pub max_waiters_per_key: usize,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Config {
    /// Checks cross-field rules; the message names the offending keys.
    pub fn ttl_policy(&self) -> Result<TtlPolicy, String> {
        let policy = TtlPolicy {
            session_default_ms: millis(self.session_ttl),
            lock_default_ms: millis(self.default_ttl),
            min_ms: millis(self.ttl_min),
            max_ms: millis(self.ttl_max),
        };
        if policy.min_ms == 0 {
            return Err("lock.ttl.min (LOCK_TTL_MIN) must be at least 1ms".into());
        }
        if policy.min_ms > policy.max_ms {
            return Err(
                "lock.ttl.min (LOCK_TTL_MIN) must not exceed lock.ttl.max (LOCK_TTL_MAX)".into(),
            );
        }
        if policy.max_ms > lock_api::TTL_ABSURD_MS {
            return Err(format!(
                "lock.ttl.max (LOCK_TTL_MAX) must not exceed {} ms",
                lock_api::TTL_ABSURD_MS
            ));
        }
        for (key, value) in [
            (
                "lock.session.ttl (LOCK_SESSION_TTL)",
                policy.session_default_ms,
            ),
            (
                "lock.default.ttl (LOCK_DEFAULT_TTL)",
                policy.lock_default_ms,
            ),
        ] {
            if !(policy.min_ms..=policy.max_ms).contains(&value) {
                return Err(format!("{key} must lie within lock.ttl.min..=lock.ttl.max"));
            }
        }
        Ok(policy)
    }

    /// Checks the waiting and lock-delay keys; the message names the offending keys.
    pub fn wait_policy(&self) -> Result<WaitPolicy, String> {
        let policy = WaitPolicy {
            max_wait_ms: millis(self.max_wait),
            default_lock_delay_ms: millis(self.default_lock_delay),
            max_lock_delay_ms: millis(self.max_lock_delay),
            max_waiters: self.max_waiters,
            max_waiters_per_key: self.max_waiters_per_key,
        };
        if policy.max_wait_ms.saturating_add(WAIT_ANSWER_MARGIN_MS) > millis(self.request_timeout) {
            return Err(format!(
                "lock.max.wait (LOCK_MAX_WAIT) must be at least {WAIT_ANSWER_MARGIN_MS} ms below LOCK_REQUEST_TIMEOUT"
            ));
        }
        if policy.default_lock_delay_ms > policy.max_lock_delay_ms {
            return Err("lock.default.lock-delay (LOCK_DEFAULT_LOCK_DELAY) must not exceed lock.max.lock-delay (LOCK_MAX_LOCK_DELAY)".into());
        }
        if policy.max_lock_delay_ms > lock_api::TTL_ABSURD_MS {
            return Err(format!(
                "lock.max.lock-delay (LOCK_MAX_LOCK_DELAY) must not exceed {} ms",
                lock_api::TTL_ABSURD_MS
            ));
        }
        if policy.max_waiters_per_key > policy.max_waiters {
            return Err("lock.max.waiters-per-key (LOCK_MAX_WAITERS_PER_KEY) must not exceed lock.max.waiters (LOCK_MAX_WAITERS)".into());
        }
        Ok(policy)
    }

    /// The grant signer, when a signing key is configured.
    pub fn signer(&self) -> Result<Option<lock_api::FenceSigner>, String> {
        self.signing_key
            .as_deref()
            .filter(|k| !k.is_empty())
            .map(|k| {
                lock_api::FenceSigner::from_secret(&self.signing_key_id, k).map_err(|e| {
                    format!("signing key (LOCK_SIGNING_KEY / LOCK_SIGNING_KEY_ID): {e}")
                })
            })
            .transpose()
    }

    /// A configuration with every default, for tests and embedding.
    pub fn defaults() -> Self {
        Self::parse_from(["lock-server"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_consistent() {
        let policy = Config::defaults().ttl_policy().unwrap();
        assert_eq!(policy.session_default_ms, 10_000);
        assert_eq!(policy.clamp(30_000), 30_000);
        assert_eq!(policy.clamp(1), 100);
        assert_eq!(policy.clamp(120_000), 60_000);
    }

    #[test]
    fn wait_policy_defaults_and_refusals_name_the_key() {
        let policy = Config::defaults().wait_policy().unwrap();
        assert_eq!(policy.max_wait_ms, 4_000);
        assert_eq!(policy.default_lock_delay_ms, 0);
        let too_long = Config::parse_from(["lock-server", "--lock.max.wait", "5s"]);
        assert!(
            too_long
                .wait_policy()
                .unwrap_err()
                .contains("LOCK_MAX_WAIT")
        );
        let inverted = Config::parse_from(["lock-server", "--lock.default.lock-delay", "2m"]);
        assert!(
            inverted
                .wait_policy()
                .unwrap_err()
                .contains("LOCK_DEFAULT_LOCK_DELAY")
        );
    }

    #[test]
    fn inverted_range_is_refused_with_the_key_named() {
        let config = Config::parse_from([
            "lock-server",
            "--lock.ttl.min",
            "2s",
            "--lock.ttl.max",
            "1s",
        ]);
        assert!(config.ttl_policy().unwrap_err().contains("lock.ttl.min"));
    }
}
