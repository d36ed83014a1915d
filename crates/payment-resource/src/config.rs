//! payment-resource settings: flags with environment fallbacks (the keys of
//! `docs/contracts/C5-config-build-and-naming.md`).

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use service_kit::LogFormat;

/// payment-resource settings. Durations take units: `500ms`, `10s`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "payment-resource",
    version,
    about = "Payouts, fences, rail submissions and the ledger",
    args_override_self = true
)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "PAYMENT_BIND", default_value = "127.0.0.1:8082")]
    pub bind: SocketAddr,
    /// PostgreSQL URL of paydb.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Most pooled PostgreSQL connections.
    #[arg(long, env = "PAYMENT_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
    /// Bearer token rail-proxy presents to reserve submissions and record outcomes. When
    /// unset, those endpoints answer 403.
    #[arg(long, env = "PAYMENT_PROXY_TOKEN", hide_env_values = true)]
    pub proxy_token: Option<String>,
    /// Bearer token of whoever creates payouts. When unset, creating a payout answers 403.
    #[arg(long, env = "PAYMENT_CREATOR_TOKEN", hide_env_values = true)]
    pub creator_token: Option<String>,
    /// Bearer token executors present to list claimable payouts, claim and post.
    /// When unset, those endpoints answer 403.
    #[arg(long, env = "PAYOUT_EXECUTOR_TOKEN", hide_env_values = true)]
    pub executor_token: Option<String>,
    /// Bearer token of operators' repair actions (re-fence). When unset, they answer 403.
    #[arg(long, env = "PAYMENT_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Bearer token of readers (a payout, its submission, the ledger summary). When unset,
    /// reads answer 403.
    #[arg(long, env = "PAYMENT_READER_TOKEN", hide_env_values = true)]
    pub reader_token: Option<String>,
    /// Named credentials, one a line (`name roles owners sha256:<hex> [limits]`, roles
    /// `creator`, `executor`, `proxy`, `admin`, `reader`, owners `-`), read again on SIGHUP:
    /// each executor or creator its own secret, removable alone.
    #[arg(long, env = "PAYMENT_CREDENTIALS_FILE")]
    pub credentials_file: Option<std::path::PathBuf>,
    /// Requests a second and burst per caller.
    #[command(flatten)]
    pub rate: service_kit::RateDefaults,
    /// The lock service's public keys, `key_id=base64[,key_id=base64]`: every fenced write's
    /// `X-Fencing-Proof` must be one of their signatures of `payout:{id}` and the token.
    /// Required.
    #[arg(long, env = "FENCE_PUBLIC_KEYS")]
    pub fence_public_keys: Option<String>,
    /// A file holding the lock service's public keys instead (one `key_id=base64` per line or
    /// comma-separated), read again on SIGHUP: a signing key rotates without a restart.
    #[arg(long, env = "FENCE_PUBLIC_KEYS_FILE")]
    pub fence_public_keys_file: Option<std::path::PathBuf>,
    /// A non-terminal payout untouched for longer than this counts in `payouts_stuck`.
    #[arg(long, env = "PAYMENT_STUCK_AFTER", default_value = "5m", value_parser = humantime::parse_duration)]
    pub stuck_after: Duration,
    /// The proxy's whole hop budget: an `IN_FLIGHT` submission older than this has an
    /// unknowable outcome and ends `RAIL_AMBIGUOUS` when posted.
    #[arg(long = "rail.hop-budget", env = "RAIL_HOP_BUDGET", default_value = "3s", value_parser = humantime::parse_duration)]
    pub hop_budget: Duration,
    /// Budget for one request.
    #[arg(long, env = "PAYMENT_REQUEST_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
    /// Connection limits (header-read/idle timeout, connection cap).
    #[command(flatten)]
    pub http: service_kit::HttpLimits,
}
