//! The real services as separate OS processes on free loopback ports: PostgreSQL (the shared
//! test helper), two lock-server replicas, payment-resource, rail-proxy, rail-stub and any
//! number of executors. Each process logs to its own file; every process is killed when the
//! stack is dropped (also when a test panics, and then the logs' tails are printed).
//!
//! One room per job: `process.rs` (a process and its log), `lock_server.rs` (lock-server
//! processes and their store), `secrets.rs` (credentials and the signing key),
//! `executors.rs`, `faults.rs` (kills, restarts, partitions), `queries.rs` (what a test asks of
//! a running stack).

mod executors;
mod faults;
mod lock_server;
mod process;
mod queries;
mod rotation;
mod secrets;
mod start;
mod tls;

use std::path::PathBuf;
use std::time::Duration;

use lock_api::FenceSigner;

use crate::compose;

pub use lock_server::{
    LockServer, LockStoreAt, lock_client_builder, lock_http, spawn_lock_server_at,
    start_lock_server,
};
pub use process::{LogSource, Proc, READY_DEADLINE, pid_stopped};
pub use secrets::Secrets;
pub use tls::TlsFiles;

/// The trusted-keys file of local resources, in the log directory.
const TRUSTED_KEYS_FILE: &str = "fence-public-keys";
/// The lock-servers' named credentials (`LOCK_CREDENTIALS_FILE`) in a local stack's log
/// directory: empty at start (the role secrets of the environment serve), written by
/// [`Stack::accept_credentials`].
const LOCK_CREDENTIALS_FILE: &str = "lock-credentials";
/// payment-resource's and rail-proxy's (`PAYMENT_CREDENTIALS_FILE`), as above.
const PAYMENT_CREDENTIALS_FILE: &str = "payment-credentials";
/// How often a restart starts a process before it gives up.
const RESTART_ATTEMPTS: u32 = 20;
/// How long one restarted process may take to answer ready.
const RESTART_READY_DEADLINE: Duration = Duration::from_secs(10);
/// Lines of each log printed when a test fails.
const LOG_TAIL_LINES: usize = 30;
/// The binaries a stack runs.
const BINARIES: [&str; 5] = [
    "lock-server",
    "payment-resource",
    "rail-proxy",
    "rail-stub",
    "payout-executor",
];

/// Knobs of a stack. The defaults keep scenarios fast: short leases, short hop budgets.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// `LOCK_SESSION_TTL` of executors.
    pub session_ttl: &'static str,
    /// `LOCK_DEFAULT_TTL` (the lease) of executors.
    pub lease: &'static str,
    /// `RAIL_HOP_TIMEOUT` of rail-proxy.
    pub rail_timeout: &'static str,
    /// `RAIL_HOP_BUDGET` everywhere.
    pub hop_budget: &'static str,
    /// Every service on HTTPS with a CA of the stack's own, every client trusting only it
    /// (local processes; the executors' own metrics port stays plain HTTP).
    pub tls: bool,
}

impl Default for StackOptions {
    /// Fast settings for local processes; in compose mode, settings that fit the compose
    /// stack's own (its services run with a 3 s hop budget and a 2 s rail timeout).
    fn default() -> Self {
        if compose::selected() {
            Self {
                session_ttl: "10s",
                lease: "10s",
                rail_timeout: "2s",
                hop_budget: "3s",
                tls: false,
            }
        } else {
            Self {
                session_ttl: "6s",
                lease: "6s",
                rail_timeout: "500ms",
                hop_budget: "1500ms",
                tls: false,
            }
        }
    }
}

/// A running stack.
#[derive(Debug)]
pub struct Stack {
    /// Where every process logs.
    pub log_dir: PathBuf,
    _logs: Option<tempfile::TempDir>,
    bins: Vec<PathBuf>,
    options: StackOptions,
    /// The two lock-server replicas.
    pub lock_servers: Vec<LockServer>,
    /// payment-resource's base URL.
    pub payment_url: String,
    /// rail-proxy's base URL.
    pub proxy_url: String,
    /// rail-stub's base URL.
    pub rail_url: String,
    /// paydb's URL (local processes only): attack tests write to it directly, as a store
    /// compromised or restored from elsewhere would.
    pub paydb_url: Option<String>,
    /// lockdb's URL (local processes on PostgreSQL only): a test restores it from a backup,
    /// as an operator recovering the lock store would.
    pub lockdb_url: Option<String>,
    /// Every role's secret.
    pub secrets: Secrets,
    signer: FenceSigner,
    services: Vec<Proc>,
    /// How each of `services` was started (name, binary, env, base URL), for restarts.
    service_specs: Vec<ServiceSpec>,
    /// The replicas' store and extra env, for restarts.
    lock_spec: Option<(LockStoreAt, Vec<(&'static str, String)>)>,
    /// Processes killed and replaced: their logs are part of the history.
    retired: Vec<Proc>,
    /// Restarts so far (names each new incarnation's log).
    incarnations: u32,
    /// The highest payout id created so far.
    last_payout: std::sync::atomic::AtomicI64,
    compose: bool,
    /// Executors started so far, by name.
    pub executors: Vec<Executor>,
    http: reqwest::Client,
    /// For the one plain port of a stack on TLS: the metrics port of an executor container
    /// the harness starts on compose (read by the container's address, which no certificate
    /// names).
    plain_http: reqwest::Client,
    /// The stack's CA and certificate, when it runs on TLS.
    pub tls: Option<TlsFiles>,
}

/// A running executor process.
#[derive(Debug)]
pub struct Executor {
    /// Its name (also its `EXECUTOR_ID`).
    pub name: String,
    /// The process.
    pub process: Proc,
    /// Base URL of its `/metrics` and health.
    pub url: String,
}

/// How a service process was started.
#[derive(Debug, Clone)]
struct ServiceSpec {
    name: &'static str,
    binary: PathBuf,
    env: Vec<(&'static str, String)>,
    url: String,
}

impl Stack {
    /// Starts PostgreSQL databases and every service but the executors. Logs go to a
    /// temporary directory, or under `keep_logs_in` when given (the demo keeps them).
    pub async fn start(
        options: StackOptions,
        keep_logs_in: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        if compose::selected() {
            return Self::start_compose(options).await;
        }
        Self::start_local(options, keep_logs_in, None).await
    }

    /// As [`Stack::start`] with local processes, its databases on the PostgreSQL server at
    /// `server_url` (a maintenance database URL): a fault campaign's own cluster.
    pub async fn start_on(
        options: StackOptions,
        keep_logs_in: Option<PathBuf>,
        server_url: &str,
    ) -> anyhow::Result<Self> {
        Self::start_local(options, keep_logs_in, Some(server_url)).await
    }
}

impl Stack {
    /// The harness's client for `url`: the stack's (HTTPS only, on TLS), or the plain one
    /// for an `http://` URL.
    pub(super) fn client_for(&self, url: &str) -> &reqwest::Client {
        if url.starts_with("http://") {
            &self.plain_http
        } else {
            &self.http
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let processes = self
                .lock_servers
                .iter()
                .map(|l| &l.process)
                .chain(&self.services)
                .chain(self.executors.iter().map(|e| &e.process));
            for process in processes {
                let log = process.log();
                let tail: Vec<&str> = log.lines().rev().take(LOG_TAIL_LINES).collect();
                eprintln!(
                    "---- {} (last {} lines) ----",
                    process.describe(),
                    tail.len()
                );
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
        if self.compose {
            self.executors.clear();
            compose::down();
        }
    }
}
