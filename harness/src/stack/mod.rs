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
mod tls;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use lock_api::FenceSigner;
use lock_client::LockClientConfig;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use payment_api::{CreatePayout, Fault, LedgerSummary, Payout, Received, Submission};
use reqwest::StatusCode;
use test_support::{ServiceProcess, cargo_bin, cargo_bins, free_port, wait_until_ok_with};

use crate::audit::{Audit, DeclaredLoss, declared_losses};
use crate::compose::{self, Container, etcd_selected};
use crate::metrics::Metrics;

pub use lock_server::{
    LockServer, LockStoreAt, lock_client_config, lock_http, spawn_lock_server_at, start_lock_server,
};
use lock_server::{lock_client_config_with, spawn_lock_server};
pub use process::{LogSource, Proc, pid_stopped};
pub use secrets::Secrets;
pub use tls::TlsFiles;

/// How long a service may take to become ready.
pub const READY_DEADLINE: Duration = Duration::from_secs(30);
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
/// Budget of one harness call to a service: a stopped process must not hang a test.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
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

    async fn start_local(
        options: StackOptions,
        keep_logs_in: Option<PathBuf>,
        server_url: Option<&str>,
    ) -> anyhow::Result<Self> {
        let bins = tokio::task::spawn_blocking(|| cargo_bins(&BINARIES))
            .await?
            .map_err(anyhow::Error::msg)?;
        let (log_dir, logs) = match keep_logs_in {
            Some(dir) => {
                std::fs::create_dir_all(&dir)?;
                (dir, None)
            }
            None => {
                let logs = tempfile::Builder::new().prefix("stack-logs-").tempdir()?;
                (logs.path().to_path_buf(), Some(logs))
            }
        };
        let (lockdb, paydb) = match server_url {
            Some(url) => (
                test_support::fresh_database_on(url).await,
                test_support::fresh_database_on(url).await,
            ),
            None => (
                test_support::fresh_database().await,
                test_support::fresh_database().await,
            ),
        };
        let secrets = Secrets::local();
        // Without TLS, the services talk over loopback in plain HTTP, said so explicitly.
        let tls = options.tls.then(|| TlsFiles::make(&log_dir)).transpose()?;
        let signer = secrets.signer()?;
        let public_keys = signer.verifier_entry();
        let lock_store = if etcd_selected()? {
            LockStoreAt::Etcd {
                endpoints: test_support::etcd::endpoints(),
                prefix: test_support::etcd::fresh_prefix(),
            }
        } else {
            LockStoreAt::Postgres(lockdb.url.clone())
        };
        let mut lock_env = vec![
            ("LOCK_TTL_MIN", "50ms".to_owned()),
            ("LOCK_REAPER_INTERVAL", "200ms".to_owned()),
            // Test stores are throwaway (PostgreSQL with fsync off).
            ("LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE", "true".to_owned()),
        ];
        lock_env.extend(tls::server_env(tls.as_ref()));
        lock_env.extend(secrets.lock_server_env());
        let lock_credentials = log_dir.join(LOCK_CREDENTIALS_FILE);
        let payment_credentials = log_dir.join(PAYMENT_CREDENTIALS_FILE);
        for file in [&lock_credentials, &payment_credentials] {
            std::fs::write(file, "")?;
        }
        lock_env.push((
            "LOCK_CREDENTIALS_FILE",
            lock_credentials.display().to_string(),
        ));
        let payment_credentials = (
            "PAYMENT_CREDENTIALS_FILE",
            payment_credentials.display().to_string(),
        );
        let mut lock_servers = Vec::new();
        for name in ["lock-server-1", "lock-server-2"] {
            lock_servers.push(
                spawn_lock_server(
                    &bins[0],
                    name,
                    &lock_store,
                    &lock_env,
                    &log_dir,
                    tls.as_ref(),
                )
                .await?,
            );
        }
        // Local resources read their trusted keys from a file they reload on SIGHUP (a key
        // rotation under live traffic); containers get them inline from `.env`.
        let keys_file = log_dir.join(TRUSTED_KEYS_FILE);
        std::fs::write(&keys_file, format!("{public_keys}\n"))?;
        let trusted_keys = ("FENCE_PUBLIC_KEYS_FILE", keys_file.display().to_string());
        let (pay_port, proxy_port, rail_port) = (free_port(), free_port(), free_port());
        let scheme = tls::scheme(tls.as_ref());
        let payment_url = format!("{scheme}://127.0.0.1:{pay_port}");
        let proxy_url = format!("{scheme}://127.0.0.1:{proxy_port}");
        let rail_url = format!("{scheme}://127.0.0.1:{rail_port}");
        // (name, binary, env): every service but the executors, in start order.
        let specs = [
            (
                "payment-resource",
                &bins[1],
                vec![
                    ("DATABASE_URL", paydb.url.clone()),
                    ("PAYMENT_BIND", format!("127.0.0.1:{pay_port}")),
                    ("PAYMENT_PROXY_TOKEN", secrets.proxy.clone()),
                    ("PAYMENT_CREATOR_TOKEN", secrets.creator.clone()),
                    ("PAYOUT_EXECUTOR_TOKEN", secrets.executor.clone()),
                    ("PAYMENT_ADMIN_TOKEN", secrets.payment_admin.clone()),
                    ("PAYMENT_READER_TOKEN", secrets.reader.clone()),
                    trusted_keys.clone(),
                    payment_credentials.clone(),
                    ("RAIL_HOP_BUDGET", options.hop_budget.to_owned()),
                    // Short, so tests see a stuck payout counted.
                    ("PAYMENT_STUCK_AFTER", "2s".to_owned()),
                ],
            ),
            (
                "rail-stub",
                &bins[3],
                vec![
                    ("RAIL_STUB_BIND", format!("127.0.0.1:{rail_port}")),
                    ("RAIL_PROXY_CREDENTIAL", secrets.rail.clone()),
                    ("RAIL_STUB_ADMIN_TOKEN", secrets.rail_admin.clone()),
                ],
            ),
            (
                "rail-proxy",
                &bins[2],
                vec![
                    ("RAIL_PROXY_BIND", format!("127.0.0.1:{proxy_port}")),
                    ("PAYMENT_URL", payment_url.clone()),
                    ("RAIL_URL", rail_url.clone()),
                    ("RAIL_PROXY_CREDENTIAL", secrets.rail.clone()),
                    ("PAYMENT_PROXY_TOKEN", secrets.proxy.clone()),
                    ("PAYOUT_EXECUTOR_TOKEN", secrets.executor.clone()),
                    trusted_keys.clone(),
                    payment_credentials,
                    ("RAIL_HOP_TIMEOUT", options.rail_timeout.to_owned()),
                    ("RAIL_HOP_BUDGET", options.hop_budget.to_owned()),
                ],
            ),
        ];
        let urls = [payment_url.clone(), rail_url.clone(), proxy_url.clone()];
        let service_specs: Vec<ServiceSpec> = specs
            .into_iter()
            .zip(urls)
            .map(|((name, binary, mut env), url)| {
                env.extend(tls::server_env(tls.as_ref()));
                if name == "rail-proxy" {
                    env.extend(tls::client_env(tls.as_ref()));
                }
                ServiceSpec {
                    name,
                    binary: binary.clone(),
                    env,
                    url,
                }
            })
            .collect();
        let services: Vec<Proc> = service_specs
            .iter()
            .map(|s| {
                Proc::Local(ServiceProcess::spawn(
                    s.name,
                    &s.binary,
                    &[],
                    &s.env,
                    &log_dir,
                ))
            })
            .collect();
        let http = tls::http_client(tls.as_ref())?;
        for url in [&payment_url, &rail_url, &proxy_url] {
            test_support::wait_until_ok_with(
                &http,
                &format!("{url} to become ready"),
                &format!("{url}/health/ready"),
                READY_DEADLINE,
            )
            .await;
        }
        Ok(Self {
            log_dir,
            _logs: logs,
            bins,
            options,
            lock_servers,
            payment_url,
            proxy_url,
            rail_url,
            paydb_url: Some(paydb.url.clone()),
            lockdb_url: matches!(lock_store, LockStoreAt::Postgres(_)).then(|| lockdb.url.clone()),
            secrets,
            signer,
            services,
            service_specs,
            lock_spec: Some((lock_store, lock_env.clone())),
            retired: Vec::new(),
            incarnations: 0,
            last_payout: std::sync::atomic::AtomicI64::new(0),
            compose: false,
            executors: Vec::new(),
            http,
            plain_http: tls::http_client(None)?,
            tls,
        })
    }

    /// Compose mode: the infrastructure from compose.yaml, from a clean state.
    async fn start_compose(options: StackOptions) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !options.tls,
            "compose runs on TLS always: StackOptions::tls is for local processes"
        );
        let env = compose::env_file()?;
        let secrets = Secrets::from_env_file(&env)?;
        let signer = secrets.signer()?;
        tokio::task::spawn_blocking(compose::up).await??;
        let tls = Some(TlsFiles::of_compose(compose::exported_ca())?);
        let http = tls::http_client(tls.as_ref())?;
        let local = |port: u16| format!("https://127.0.0.1:{port}");
        let (payment_url, proxy_url, rail_url) = (local(8082), local(8083), local(8085));
        let mut lock_servers = Vec::new();
        for (service, port) in [("lock-server-1", 8081), ("lock-server-2", 8091)] {
            let url = local(port);
            wait_until_ok_with(
                &http,
                &format!("{service} to become ready"),
                &format!("{url}/health/ready"),
                READY_DEADLINE * 3,
            )
            .await;
            lock_servers.push(LockServer {
                process: Proc::Container(Container::of_service(service)?),
                url,
            });
        }
        let mut services = Vec::new();
        for (service, url) in [
            ("payment-resource", &payment_url),
            ("rail-proxy", &proxy_url),
            ("rail-stub", &rail_url),
        ] {
            wait_until_ok_with(
                &http,
                &format!("{service} to become ready"),
                &format!("{url}/health/ready"),
                READY_DEADLINE * 3,
            )
            .await;
            services.push(Proc::Container(Container::of_service(service)?));
        }
        let logs = tempfile::Builder::new().prefix("stack-logs-").tempdir()?;
        Ok(Self {
            log_dir: logs.path().to_path_buf(),
            _logs: Some(logs),
            bins: Vec::new(),
            options,
            lock_servers,
            payment_url,
            proxy_url,
            rail_url,
            paydb_url: None,
            lockdb_url: None,
            secrets,
            signer,
            services,
            service_specs: Vec::new(),
            lock_spec: None,
            retired: Vec::new(),
            incarnations: 0,
            last_payout: std::sync::atomic::AtomicI64::new(0),
            compose: true,
            executors: Vec::new(),
            http,
            plain_http: tls::http_client(None)?,
            tls,
        })
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
