//! Executor settings: its own flags, plus the SDK's pinned keys read by
//! `ClientBuilder::from_env` (`LOCK_ENDPOINTS`, `LOCK_SESSION_TTL`, `LOCK_DEFAULT_TTL`,
//! `LOCK_CLIENT_SAFETY_MARGIN`, ...).

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};
pub use lock_client::service::LogFormat;

/// Where the test-only fault point stops the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FaultStep {
    /// Right after the grant, before the claim.
    Claim,
    /// Right after `check_still_held` passes, before the submit.
    Submit,
    /// After the submit returned, before the guard of the post call.
    Post,
    /// After the guard of the post call passed, before the post call is sent.
    PostSend,
}

/// `EXECUTOR_CONCURRENCY`'s default: one payout in flight per process, the behaviour before the key
/// existed. A stalled or partitioned process then strands one payout for a lease and leaves at most
/// one stale write to be fenced (the frozen-zombie end-to-end scenario and `harness demo` count
/// exactly one); a deployment that wants throughput raises it (`compose.yaml` sets 4).
pub const CONCURRENCY_DEFAULT: u32 = 1;

/// `EXECUTOR_CONCURRENCY`'s upper bound. Every payout in flight holds one grant the process's
/// one heartbeat thread renews and one connection to payment-resource or rail-proxy (their
/// pools hold 16 by default): past a few dozen the extra attempts only queue there, and a
/// frozen process would strand that many payouts for a lease.
pub const CONCURRENCY_MAX: u32 = 64;

/// A probability in [0, 1].
fn probability(raw: &str) -> Result<f64, String> {
    let p: f64 = raw
        .parse()
        .map_err(|_| format!("{raw:?} is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not in [0, 1]"))
    }
}

/// Executor settings. Durations take units: `500ms`, `10s`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "payout-executor",
    version,
    about = "Executes payouts under fenced locks",
    args_override_self = true
)]
pub struct Config {
    /// Address of `/metrics` and `/health/*`.
    #[arg(long, env = "EXECUTOR_BIND", default_value = "127.0.0.1:8084")]
    pub bind: SocketAddr,
    /// The metrics port: HTTPS (`TLS_CERT_FILE`, `TLS_KEY_FILE`) or plain HTTP said so.
    #[command(flatten)]
    pub tls: lock_client::service::ServeTls,
    /// Owner id of this worker's lock session.
    #[arg(long, env = "EXECUTOR_ID", default_value = "payout-executor")]
    pub executor_id: String,
    /// payment-resource base URL.
    #[arg(long, env = "PAYMENT_URL", default_value = "https://127.0.0.1:8082")]
    pub payment_url: String,
    /// rail-proxy base URL.
    #[arg(long, env = "RAIL_PROXY_URL", default_value = "https://127.0.0.1:8083")]
    pub rail_proxy_url: String,
    /// The executors' bearer credential, presented to payment-resource and rail-proxy.
    #[arg(long, env = "PAYOUT_EXECUTOR_TOKEN", hide_env_values = true)]
    pub executor_token: Option<String>,
    /// `rail.hop-budget`: the worst-case submit. Before submitting, the remaining lease (the
    /// earlier of the grant's and the session's conservative deadlines) must cover
    /// `hop budget × (1 + safety margin)`; with heartbeats every `ttl × (1 − m) / 3`, that
    /// needs `hop budget ≤ session ttl × (1 − m) × 2/3 / (1 + m)` (3 s fits the 10 s default).
    #[arg(long = "rail.hop-budget", env = "RAIL_HOP_BUDGET", default_value = "3s", value_parser = humantime::parse_duration)]
    pub hop_budget: Duration,
    /// Pause between scans when nothing is claimable.
    #[arg(long, env = "EXECUTOR_POLL_INTERVAL", default_value = "200ms", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,
    /// Payouts listed per scan.
    #[arg(long, env = "EXECUTOR_BATCH", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub batch: u32,
    /// Payouts this process works on at once, each under its own lock in the process's one
    /// session: 1 (the default) to `CONCURRENCY_MAX` (64).
    #[arg(long, env = "EXECUTOR_CONCURRENCY", default_value_t = CONCURRENCY_DEFAULT, value_parser = clap::value_parser!(u32).range(1..=i64::from(CONCURRENCY_MAX)))]
    pub concurrency: u32,
    /// Timeout of one call to payment-resource (rail-proxy calls get the hop budget).
    #[arg(long, env = "EXECUTOR_REQUEST_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// TEST-ONLY fault point: stop this whole process with SIGSTOP right after
    /// `check_still_held` passes for this payout id (the frozen-zombie end-to-end scenario). Off
    /// by default.
    #[arg(long, env = "EXECUTOR_FAULT_SIGSTOP_PAYOUT")]
    pub fault_sigstop_payout: Option<i64>,
    /// TEST-ONLY: where the fault point stops the process: `submit` (after
    /// `check_still_held`, before submitting, as in the frozen-zombie scenario) or `post` (after
    /// the submit returned, before the guard of the post call).
    #[arg(
        long,
        env = "EXECUTOR_FAULT_SIGSTOP_STEP",
        value_enum,
        default_value = "submit"
    )]
    pub fault_sigstop_step: FaultStep,
    /// TEST-ONLY fault campaign: at each step of every payout (claim, submit, post), stop this
    /// whole process with SIGSTOP with this probability (the campaign continues it). 0: off.
    #[arg(long, env = "EXECUTOR_FAULT_SIGSTOP_RATE", default_value_t = 0.0, value_parser = probability)]
    pub fault_sigstop_rate: f64,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
}
