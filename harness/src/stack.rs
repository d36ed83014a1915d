//! The real services as separate OS processes on free loopback ports: PostgreSQL (the shared
//! test helper), two lock-server replicas, payment-resource, rail-proxy, rail-stub and any
//! number of executors. Each process logs to its own file; every process is killed when the
//! stack is dropped (also when a test panics, and then the logs' tails are printed).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use lock_api::FenceSigner;
use lock_client::LockClientConfig;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use payment_api::{CreatePayout, Fault, LedgerSummary, Payout, Received, Submission};
use reqwest::StatusCode;
use test_support::{ServiceProcess, cargo_bin, cargo_bins, free_port, wait_until_ok};

use crate::audit::{Audit, DeclaredLoss, declared_losses};
use crate::compose::{self, Container, etcd_selected};
use crate::metrics::Metrics;

/// Whether process `pid` is stopped (state `T` in `/proc/PID/stat`: SIGSTOP).
pub fn pid_stopped(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw()))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// A service as the harness sees it: a local process, or a container (compose mode).
#[derive(Debug)]
pub enum Proc {
    /// A child process of the harness.
    Local(ServiceProcess),
    /// A container.
    Container(Container),
}

/// Where a process's log can be read: its file, or `docker logs` of its container.
#[derive(Debug, Clone)]
pub enum LogSource {
    /// A local process's log file.
    File(PathBuf),
    /// A container's id.
    Docker(String),
}

impl LogSource {
    /// Everything logged so far (empty if unreadable).
    pub fn read(&self) -> String {
        match self {
            Self::File(path) => std::fs::read_to_string(path).unwrap_or_default(),
            Self::Docker(id) => compose::Container::log_of(id),
        }
    }
}

impl Proc {
    /// The host pid of the service process.
    pub fn pid(&self) -> Pid {
        match self {
            Self::Local(p) => p.pid(),
            Self::Container(c) => c.pid().expect("the container's service pid"),
        }
    }

    /// Sends `signal` to the service process.
    pub fn signal(&self, signal: Signal) {
        match self {
            Self::Local(p) => p.signal(signal),
            Self::Container(c) => c.signal(signal).expect("signal the container's service"),
        }
    }

    /// Whether the process is stopped (state `T` in `/proc/PID/stat`: SIGSTOP).
    pub fn is_stopped(&self) -> bool {
        pid_stopped(self.pid())
    }

    /// Polls until the process is stopped; panics naming `what` after `deadline`.
    pub async fn wait_stopped(&self, what: &str, deadline: Duration) {
        test_support::poll_until(what, deadline, || async { self.is_stopped().then_some(()) })
            .await;
    }

    /// Waits up to `deadline` for the process to exit; its exit code.
    pub async fn wait_exit(&mut self, deadline: Duration) -> anyhow::Result<i32> {
        match self {
            Self::Local(p) => {
                let status = tokio::time::timeout(deadline, p.wait())
                    .await
                    .with_context(|| format!("no exit within {deadline:?}"))?;
                status.code().context("killed by a signal")
            }
            Self::Container(c) => {
                let id = c.id.clone();
                let wait = tokio::task::spawn_blocking(move || Container::wait_exit_of(&id));
                tokio::time::timeout(deadline, wait)
                    .await
                    .with_context(|| format!("no exit within {deadline:?}"))??
            }
        }
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        match self {
            Self::Local(p) => p.log(),
            Self::Container(c) => c.log(),
        }
    }

    /// Where its log can be read again later, without the process at hand.
    pub fn log_source(&self) -> LogSource {
        match self {
            Self::Local(p) => LogSource::File(p.log_path().to_path_buf()),
            Self::Container(c) => LogSource::Docker(c.id.clone()),
        }
    }

    /// Where its log is, for humans.
    pub fn describe(&self) -> String {
        match self {
            Self::Local(p) => p.log_path().display().to_string(),
            Self::Container(c) => format!("docker logs {}", c.name),
        }
    }

    /// The container, in compose mode.
    pub fn container(&self) -> Option<&Container> {
        match self {
            Self::Container(c) => Some(c),
            Self::Local(_) => None,
        }
    }
}

/// How long a service may take to become ready.
pub const READY_DEADLINE: Duration = Duration::from_secs(30);
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

/// A running lock-server process.
#[derive(Debug)]
pub struct LockServer {
    /// The process (killed when dropped).
    pub process: Proc,
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
}

/// Builds (if needed) and starts `lock-server` on `database_url` with `extra_env`, logging to
/// `log_dir/{name}.log`, and waits until `/health/ready` answers 200.
pub async fn start_lock_server(
    name: &str,
    database_url: &str,
    extra_env: &[(&str, String)],
    log_dir: &Path,
) -> anyhow::Result<LockServer> {
    let store = LockStoreAt::Postgres(database_url.to_owned());
    spawn_lock_server_at(name, &store, extra_env, log_dir).await
}

/// Builds (if needed) and starts `lock-server` on `store`, as [`start_lock_server`] does.
pub async fn spawn_lock_server_at(
    name: &str,
    store: &LockStoreAt,
    extra_env: &[(&str, String)],
    log_dir: &Path,
) -> anyhow::Result<LockServer> {
    let binary = cargo_bin("lock-server").map_err(anyhow::Error::msg)?;
    spawn_lock_server(&binary, name, store, extra_env, log_dir).await
}

async fn spawn_lock_server(
    binary: &Path,
    name: &str,
    store: &LockStoreAt,
    extra_env: &[(&str, String)],
    log_dir: &Path,
) -> anyhow::Result<LockServer> {
    let port = free_port();
    let mut env = store.env();
    env.push(("LOCK_SERVER_BIND", format!("127.0.0.1:{port}")));
    env.extend(test_support::keys::lock_server_env());
    env.extend(extra_env.iter().cloned());
    let process = ServiceProcess::spawn(name, binary, &[], &env, log_dir);
    let url = format!("http://127.0.0.1:{port}");
    wait_until_ok(
        &format!("{name} to become ready"),
        &format!("{url}/health/ready"),
        READY_DEADLINE,
    )
    .await;
    Ok(LockServer {
        process: Proc::Local(process),
        url,
    })
}

/// The lock-servers' store in a local stack, chosen by `HARNESS_LOCK_BACKEND`.
#[derive(Debug, Clone)]
pub enum LockStoreAt {
    /// A PostgreSQL database (the default).
    Postgres(String),
    /// A key prefix on etcd members.
    Etcd {
        /// Client URLs.
        endpoints: Vec<String>,
        /// This stack's prefix.
        prefix: String,
    },
}

impl LockStoreAt {
    /// The backend's name as lock-servers and clients label it (`backend` in metrics).
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Etcd { .. } => "etcd",
        }
    }

    /// The environment that points a lock-server at it.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Postgres(url) => vec![
                ("LOCK_BACKEND", "postgres".into()),
                ("DATABASE_URL", url.clone()),
            ],
            Self::Etcd { endpoints, prefix } => vec![
                ("LOCK_BACKEND", "etcd".into()),
                ("LOCK_ETCD_ENDPOINTS", endpoints.join(",")),
                ("LOCK_ETCD_PREFIX", prefix.clone()),
            ],
        }
    }
}

/// A lock-client configuration for lock-servers started by [`start_lock_server`] or a
/// local stack: the test client credential.
pub fn lock_client_config(
    endpoints: impl IntoIterator<Item = impl Into<String>>,
) -> LockClientConfig {
    lock_client_config_with(endpoints, test_support::keys::LOCK_CLIENT_TOKEN)
}

/// A lock-client configuration presenting `credential`.
fn lock_client_config_with(
    endpoints: impl IntoIterator<Item = impl Into<String>>,
    credential: &str,
) -> LockClientConfig {
    let mut config = LockClientConfig::new(endpoints);
    config.credential = Some(lock_client::Credential::new(credential));
    config
}

/// An HTTP client that presents the lock clients' credential (raw L1-L7 calls of tests and
/// benchmarks).
pub fn lock_http(credential: &str) -> anyhow::Result<reqwest::Client> {
    let headers = lock_client::bearer_headers(credential)
        .context("the lock client credential is not a valid header value")?;
    Ok(reqwest::Client::builder()
        .timeout(HTTP_TIMEOUT)
        .default_headers(headers)
        .build()?)
}

/// The secrets of a stack's roles (C5): each service gets only those of its own roles.
#[derive(Debug, Clone)]
pub struct Secrets {
    /// P0 (`PAYMENT_CREATOR_TOKEN`).
    pub creator: String,
    /// Executors to payment-resource and rail-proxy (`PAYOUT_EXECUTOR_TOKEN`).
    pub executor: String,
    /// Operators' repairs at payment-resource (`PAYMENT_ADMIN_TOKEN`).
    pub payment_admin: String,
    /// Lock clients on L1-L7 (`LOCK_CLIENT_TOKEN`).
    pub lock_client: String,
    /// L8 (`LOCK_ADMIN_TOKEN`).
    pub lock_admin: String,
    /// rail-proxy to payment-resource (`PAYMENT_PROXY_TOKEN`).
    pub proxy: String,
    /// rail-proxy to rail-stub (`RAIL_PROXY_CREDENTIAL`).
    pub rail: String,
    /// rail-stub's admin (`RAIL_STUB_ADMIN_TOKEN`).
    pub rail_admin: String,
    /// `LOCK_SIGNING_KEY_ID`.
    pub signing_key_id: String,
    /// `LOCK_SIGNING_KEY`.
    pub signing_key: String,
}

impl Secrets {
    /// Fresh role tokens and the test signing key (local processes).
    fn local() -> Self {
        Self {
            creator: secret(),
            executor: secret(),
            payment_admin: secret(),
            lock_client: test_support::keys::LOCK_CLIENT_TOKEN.to_owned(),
            lock_admin: secret(),
            proxy: secret(),
            rail: secret(),
            rail_admin: secret(),
            signing_key_id: test_support::keys::SIGNING_KEY_ID.to_owned(),
            signing_key: test_support::signing_key_base64().to_owned(),
        }
    }

    /// The compose stack's, from `.env`.
    fn from_env_file(env: &[(String, String)]) -> anyhow::Result<Self> {
        let get = |key: &str| {
            env.iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .with_context(|| format!("{key} in .env"))
        };
        Ok(Self {
            creator: get("PAYMENT_CREATOR_TOKEN")?,
            executor: get("PAYOUT_EXECUTOR_TOKEN")?,
            payment_admin: get("PAYMENT_ADMIN_TOKEN")?,
            lock_client: get("LOCK_CLIENT_TOKEN")?,
            lock_admin: get("LOCK_ADMIN_TOKEN")?,
            proxy: get("PAYMENT_PROXY_TOKEN")?,
            rail: get("RAIL_PROXY_CREDENTIAL")?,
            rail_admin: get("RAIL_STUB_ADMIN_TOKEN")?,
            signing_key_id: get("LOCK_SIGNING_KEY_ID")?,
            signing_key: get("LOCK_SIGNING_KEY")?,
        })
    }

    /// The signer the stack's lock-servers use.
    pub fn signer(&self) -> anyhow::Result<FenceSigner> {
        FenceSigner::from_secret(&self.signing_key_id, &self.signing_key)
            .map_err(|e| anyhow::anyhow!("LOCK_SIGNING_KEY: {e}"))
    }

    /// Env of a lock-server replica.
    fn lock_server_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LOCK_CLIENT_TOKEN", self.lock_client.clone()),
            ("LOCK_ADMIN_TOKEN", self.lock_admin.clone()),
            ("LOCK_SIGNING_KEY", self.signing_key.clone()),
            ("LOCK_SIGNING_KEY_ID", self.signing_key_id.clone()),
        ]
    }
}

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
            }
        } else {
            Self {
                session_ttl: "6s",
                lease: "6s",
                rail_timeout: "500ms",
                hop_budget: "1500ms",
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

fn secret() -> String {
    uuid::Uuid::new_v4().simple().to_string()
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
        lock_env.extend(secrets.lock_server_env());
        let mut lock_servers = Vec::new();
        for name in ["lock-server-1", "lock-server-2"] {
            lock_servers
                .push(spawn_lock_server(&bins[0], name, &lock_store, &lock_env, &log_dir).await?);
        }
        let (pay_port, proxy_port, rail_port) = (free_port(), free_port(), free_port());
        let payment_url = format!("http://127.0.0.1:{pay_port}");
        let proxy_url = format!("http://127.0.0.1:{proxy_port}");
        let rail_url = format!("http://127.0.0.1:{rail_port}");
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
                    ("FENCE_PUBLIC_KEYS", public_keys.clone()),
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
                    ("FENCE_PUBLIC_KEYS", public_keys.clone()),
                    ("RAIL_HOP_TIMEOUT", options.rail_timeout.to_owned()),
                    ("RAIL_HOP_BUDGET", options.hop_budget.to_owned()),
                ],
            ),
        ];
        let urls = [payment_url.clone(), rail_url.clone(), proxy_url.clone()];
        let service_specs: Vec<ServiceSpec> = specs
            .into_iter()
            .zip(urls)
            .map(|((name, binary, env), url)| ServiceSpec {
                name,
                binary: binary.clone(),
                env,
                url,
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
        for url in [&payment_url, &rail_url, &proxy_url] {
            wait_until_ok(
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
            http: reqwest::Client::builder().timeout(HTTP_TIMEOUT).build()?,
        })
    }

    /// Compose mode: the infrastructure from compose.yaml, from a clean state.
    async fn start_compose(options: StackOptions) -> anyhow::Result<Self> {
        let env = compose::env_file()?;
        let secrets = Secrets::from_env_file(&env)?;
        let signer = secrets.signer()?;
        tokio::task::spawn_blocking(compose::up).await??;
        let local = |port: u16| format!("http://127.0.0.1:{port}");
        let (payment_url, proxy_url, rail_url) = (local(8082), local(8083), local(8085));
        let mut lock_servers = Vec::new();
        for (service, port) in [("lock-server-1", 8081), ("lock-server-2", 8091)] {
            let url = local(port);
            wait_until_ok(
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
            wait_until_ok(
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
            http: reqwest::Client::builder().timeout(HTTP_TIMEOUT).build()?,
        })
    }

    /// Starts an executor named `name` with `extra_env`, and waits until it serves health.
    pub async fn start_executor(
        &mut self,
        name: &str,
        extra_env: &[(&str, String)],
    ) -> anyhow::Result<&Executor> {
        self.spawn_executor(name, extra_env, true).await
    }

    /// Starts an executor; waits for its health only when `wait_ready` (an executor armed
    /// to stop itself may do so before it ever answers).
    pub async fn spawn_executor(
        &mut self,
        name: &str,
        extra_env: &[(&str, String)],
        wait_ready: bool,
    ) -> anyhow::Result<&Executor> {
        let common = [
            ("EXECUTOR_ID", name.to_owned()),
            ("LOCK_SESSION_TTL", self.options.session_ttl.to_owned()),
            ("LOCK_DEFAULT_TTL", self.options.lease.to_owned()),
            ("RAIL_HOP_BUDGET", self.options.hop_budget.to_owned()),
            ("EXECUTOR_POLL_INTERVAL", "50ms".to_owned()),
            ("LOCK_CLIENT_TOKEN", self.secrets.lock_client.clone()),
            ("PAYOUT_EXECUTOR_TOKEN", self.secrets.executor.clone()),
        ];
        let (process, url) = if self.compose {
            let mut env = vec![
                ("EXECUTOR_BIND", "0.0.0.0:8084".to_owned()),
                ("PAYMENT_URL", "http://payment-resource:8082".to_owned()),
                ("RAIL_PROXY_URL", "http://rail-proxy:8083".to_owned()),
                (
                    "LOCK_ENDPOINTS",
                    "http://lock-server-1:8081,http://lock-server-2:8081".to_owned(),
                ),
            ];
            env.extend(common.iter().cloned());
            env.extend(extra_env.iter().cloned());
            let container = tokio::task::block_in_place(|| Container::run_executor(name, &env))?;
            let url = format!("http://{}:8084", container.ip()?);
            (Proc::Container(container), url)
        } else {
            let port = free_port();
            let endpoints: Vec<&str> = self.lock_servers.iter().map(|l| l.url.as_str()).collect();
            let mut env = vec![
                ("EXECUTOR_BIND", format!("127.0.0.1:{port}")),
                ("PAYMENT_URL", self.payment_url.clone()),
                ("RAIL_PROXY_URL", self.proxy_url.clone()),
                ("LOCK_ENDPOINTS", endpoints.join(",")),
            ];
            env.extend(common.iter().cloned());
            env.extend(extra_env.iter().cloned());
            let process = ServiceProcess::spawn(name, &self.bins[4], &[], &env, &self.log_dir);
            (Proc::Local(process), format!("http://127.0.0.1:{port}"))
        };
        if wait_ready {
            wait_until_ok(
                &format!("{name} to become ready"),
                &format!("{url}/health/ready"),
                READY_DEADLINE,
            )
            .await;
        }
        self.executors.push(Executor {
            name: name.to_owned(),
            process,
            url,
        });
        self.executors.last().context("just pushed")
    }

    /// Creates `count` payouts (idempotency keys `{prefix}-{i}`) and returns their ids.
    pub async fn create_payouts(&self, prefix: &str, count: usize) -> anyhow::Result<Vec<i64>> {
        let mut ids = Vec::with_capacity(count);
        for i in 0..count {
            let body = CreatePayout {
                amount_minor: 1_000 + i as i64,
                currency: "EUR".into(),
                beneficiary: format!("beneficiary {i}"),
            };
            let payout: Payout = self
                .http
                .post(format!("{}/v1/payouts", self.payment_url))
                .bearer_auth(&self.secrets.creator)
                .header(payment_api::IDEMPOTENCY_KEY_HEADER, format!("{prefix}-{i}"))
                .json(&body)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            ids.push(payout.payout_id);
            self.last_payout
                .fetch_max(payout.payout_id, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(ids)
    }

    /// The lock-servers' backend (`backend` label of lock metrics).
    pub fn lock_backend(&self) -> &'static str {
        match &self.lock_spec {
            Some((store, _)) => store.backend(),
            None if etcd_selected().unwrap_or(false) => "etcd",
            None => "postgres",
        }
    }

    /// The highest payout id created so far.
    pub async fn last_payout_id(&self) -> Option<i64> {
        let id = self.last_payout.load(std::sync::atomic::Ordering::SeqCst);
        (id > 0).then_some(id)
    }

    /// Restarts replica `index` (after it was killed) on its port, as a new incarnation with
    /// its own log; the old process is kept for its log. Like a supervisor, it starts the
    /// process again until it answers ready (a replica started while the store is down
    /// exits: "cannot open the store").
    pub async fn restart_lock_server(&mut self, index: usize) -> anyhow::Result<()> {
        let (store, env) = self
            .lock_spec
            .clone()
            .context("restarts need local processes")?;
        let url = self.lock_servers[index].url.clone();
        let port = url.rsplit(':').next().unwrap_or_default().to_owned();
        let mut all = store.env();
        all.push(("LOCK_SERVER_BIND", format!("127.0.0.1:{port}")));
        all.extend(env);
        let binary = self.bins[0].clone();
        let name = format!("lock-server-{}", index + 1);
        let process = self.supervise(&name, &binary, &all, &url).await?;
        let old = std::mem::replace(&mut self.lock_servers[index].process, process);
        self.retired.push(old);
        Ok(())
    }

    /// Starts `binary` as a new incarnation of `name` until it answers `url/health/ready`
    /// (each incarnation with its own log, the failed ones retired).
    async fn supervise(
        &mut self,
        name: &str,
        binary: &Path,
        env: &[(&str, String)],
        url: &str,
    ) -> anyhow::Result<Proc> {
        for _ in 0..RESTART_ATTEMPTS {
            self.incarnations += 1;
            let log_name = format!("{name}.{}", self.incarnations);
            let process = ServiceProcess::spawn(&log_name, binary, &[], env, &self.log_dir);
            if self.ready_within(url, RESTART_READY_DEADLINE).await {
                return Ok(Proc::Local(process));
            }
            process.signal(Signal::SIGKILL);
            self.retired.push(Proc::Local(process));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        bail!("{name} did not become ready after {RESTART_ATTEMPTS} starts")
    }

    /// Whether `url/health/ready` answers 200 within `deadline` (never panics).
    async fn ready_within(&self, url: &str, deadline: Duration) -> bool {
        let started = std::time::Instant::now();
        while started.elapsed() < deadline {
            let ok = self
                .http
                .get(format!("{url}/health/ready"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    fn service_index(&self, name: &str) -> anyhow::Result<usize> {
        self.service_specs
            .iter()
            .position(|s| s.name == name)
            .with_context(|| format!("no local service {name}"))
    }

    /// kill -9 of service `name` (payment-resource, rail-stub, rail-proxy).
    pub fn kill_service(&self, name: &str) -> anyhow::Result<()> {
        let index = self.service_index(name)?;
        self.services[index].signal(Signal::SIGKILL);
        Ok(())
    }

    /// Starts service `name` again (after a kill), as a new incarnation with its own log,
    /// until it answers ready.
    pub async fn restart_service(&mut self, name: &str) -> anyhow::Result<()> {
        let index = self.service_index(name)?;
        let spec = self.service_specs[index].clone();
        let process = self
            .supervise(spec.name, &spec.binary, &spec.env, &spec.url)
            .await?;
        let old = std::mem::replace(&mut self.services[index], process);
        self.retired.push(old);
        Ok(())
    }

    /// Cuts executor `index` off the project network (`docker network disconnect`), or
    /// reconnects it and learns its new address (compose mode).
    pub fn partition_executor(&mut self, index: usize, cut: bool) -> anyhow::Result<()> {
        let executor = &mut self.executors[index];
        let container = executor
            .process
            .container()
            .context("partitions need compose mode")?;
        if cut {
            container.disconnect()
        } else {
            container.connect()?;
            executor.url = format!("http://{}:8084", container.ip()?);
            Ok(())
        }
    }

    /// Every service answers `/health/ready` (none needs a manual restart).
    pub async fn all_ready(&self) -> anyhow::Result<()> {
        let urls = self
            .lock_servers
            .iter()
            .map(|l| l.url.clone())
            .chain([
                self.payment_url.clone(),
                self.proxy_url.clone(),
                self.rail_url.clone(),
            ])
            .chain(self.executors.iter().map(|e| e.url.clone()));
        for url in urls {
            let status = self
                .http
                .get(format!("{url}/health/ready"))
                .send()
                .await
                .with_context(|| format!("{url} does not answer"))?
                .status();
            if !status.is_success() {
                bail!("{url}/health/ready answered {status}");
            }
        }
        Ok(())
    }

    /// The logs of every lock-server incarnation.
    pub fn lock_server_logs(&self) -> Vec<String> {
        self.lock_servers
            .iter()
            .map(|l| l.process.log())
            .chain(
                self.retired
                    .iter()
                    .filter(|p| p.describe().contains("lock-server"))
                    .map(Proc::log),
            )
            .collect()
    }

    /// Each executor's name and log.
    pub fn executor_logs(&self) -> Vec<(String, String)> {
        self.executors
            .iter()
            .map(|e| (e.name.clone(), e.process.log()))
            .collect()
    }

    /// One payout.
    pub async fn payout(&self, id: i64) -> anyhow::Result<Payout> {
        Ok(self
            .http
            .get(format!("{}/v1/payouts/{id}", self.payment_url))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// The payout's submission, if any.
    pub async fn submission(&self, id: i64) -> anyhow::Result<Option<Submission>> {
        let response = self
            .http
            .get(format!("{}/v1/payouts/{id}/submission", self.payment_url))
            .send()
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Ok(Some(response.error_for_status()?.json().await?))
    }

    /// Everything rail-stub received for `id`.
    pub async fn rail_received(&self, id: i64) -> anyhow::Result<Vec<Received>> {
        Ok(self
            .http
            .get(format!("{}/v1/received?payout_id={id}", self.rail_url))
            .bearer_auth(&self.secrets.rail_admin)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Scripts a rail fault.
    pub async fn rail_fault(&self, fault: &Fault) -> anyhow::Result<()> {
        self.http
            .post(format!("{}/v1/faults", self.rail_url))
            .bearer_auth(&self.secrets.rail_admin)
            .json(fault)
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// rail-stub's admin credential (faults, the received list).
    pub fn rail_admin_token(&self) -> &str {
        &self.secrets.rail_admin
    }

    /// The proof the stack's lock-servers gave the grant of `payout:{payout_id}` with `token`
    /// (its session read from their audit trail), or would give one to a fixed session when
    /// they never granted that token (a forged or future token).
    pub fn proof(&self, payout_id: i64, token: i64) -> String {
        let key = payment_api::payout_lock_key(payout_id);
        let granted_to = self.audit().ok().and_then(|audit| {
            audit
                .grants
                .iter()
                .rev()
                .find(|g| g.key == key.as_str() && g.token == token)
                .and_then(|g| g.session.parse::<uuid::Uuid>().ok())
        });
        let token = lock_api::FencingToken(u64::try_from(token).unwrap_or_default());
        let grant = match granted_to {
            Some(session) => lock_api::GrantId::derive(lock_api::SessionId(session), &key, token),
            None => test_support::test_grant(1, &key, token),
        };
        self.signer.sign(&key, token, &grant)
    }

    /// A lock-client configuration for this stack's lock-servers and credential.
    pub fn lock_client_config(&self) -> LockClientConfig {
        lock_client_config_with(self.lock_endpoints(), &self.secrets.lock_client)
    }

    /// A fenced write to `url` for `payout_id` presenting `token`, as an executor sends it.
    pub fn fenced_request(
        &self,
        method: reqwest::Method,
        url: &str,
        payout_id: i64,
        token: i64,
    ) -> reqwest::RequestBuilder {
        self.http
            .request(method, url)
            .bearer_auth(&self.secrets.executor)
            .header(lock_api::FENCING_TOKEN_HEADER, token.to_string())
            .header(lock_api::FENCING_PROOF_HEADER, self.proof(payout_id, token))
    }

    /// P2 with `token` (and its genuine proof), as a stale executor would send it: the
    /// status and the error code, if any.
    pub async fn try_claim(&self, id: i64, token: i64) -> anyhow::Result<(u16, Option<String>)> {
        let url = format!("{}/v1/payouts/{id}/claim", self.payment_url);
        self.try_write(url, id, token).await
    }

    /// A submit through rail-proxy with `token` (and its genuine proof): the status and the
    /// error code, if any.
    pub async fn try_submit(&self, id: i64, token: i64) -> anyhow::Result<(u16, Option<String>)> {
        let url = format!("{}/v1/payouts/{id}/submit", self.proxy_url);
        self.try_write(url, id, token).await
    }

    async fn try_write(
        &self,
        url: String,
        id: i64,
        token: i64,
    ) -> anyhow::Result<(u16, Option<String>)> {
        let response = self
            .fenced_request(reqwest::Method::POST, &url, id, token)
            .send()
            .await?;
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        Ok((status, body["code"].as_str().map(str::to_owned)))
    }

    /// L7 on the first replica: the holder's token of `key`, or `None` when nobody holds it.
    pub async fn lock_holder(&self, key: &str) -> anyhow::Result<Option<i64>> {
        let response = self
            .http
            .get(format!("{}/v1/locks/{key}", self.lock_servers[0].url))
            .bearer_auth(&self.secrets.lock_client)
            .send()
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let info: serde_json::Value = response.error_for_status()?.json().await?;
        Ok(info["fencing_token"].as_i64())
    }

    /// The lock-servers' audit trail, merged over the replicas and their incarnations.
    pub fn audit(&self) -> anyhow::Result<Audit> {
        let logs = self.lock_server_logs();
        Audit::from_logs(logs.iter().map(String::as_str))
    }

    /// Every loss the executors' SDKs declared.
    pub fn declared_losses(&self) -> anyhow::Result<Vec<DeclaredLoss>> {
        let mut losses = Vec::new();
        for executor in &self.executors {
            losses.extend(declared_losses(&executor.process.log())?);
        }
        Ok(losses)
    }

    /// The lock-servers' endpoints, as an SDK's `LOCK_ENDPOINTS` lists them.
    pub fn lock_endpoints(&self) -> Vec<String> {
        self.lock_servers.iter().map(|l| l.url.clone()).collect()
    }

    /// The ledger balance check.
    pub async fn ledger(&self) -> anyhow::Result<LedgerSummary> {
        Ok(self
            .http
            .get(format!("{}/v1/ledger/summary", self.payment_url))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// One scrape of `url/metrics`.
    pub async fn metrics(&self, url: &str) -> anyhow::Result<Metrics> {
        let text = self
            .http
            .get(format!("{url}/metrics"))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        Metrics::parse(&text)
    }

    /// The sum of the series of `name` whose labels include `labels`, from `url/metrics`.
    /// A series that is not exported is an error, never 0.
    pub async fn metric(
        &self,
        url: &str,
        name: &str,
        labels: &[(&str, &str)],
    ) -> anyhow::Result<f64> {
        self.metrics(url).await?.sum(name, labels)
    }

    /// Polls until every payout in `ids` is terminal, or fails after `deadline`.
    pub async fn wait_terminal(
        &self,
        ids: &[i64],
        deadline: Duration,
    ) -> anyhow::Result<Vec<Payout>> {
        let started = std::time::Instant::now();
        loop {
            let mut payouts = Vec::with_capacity(ids.len());
            for id in ids {
                payouts.push(self.payout(*id).await?);
            }
            if payouts.iter().all(|p| p.state.is_terminal()) {
                return Ok(payouts);
            }
            if started.elapsed() > deadline {
                let open: Vec<_> = payouts
                    .iter()
                    .filter(|p| !p.state.is_terminal())
                    .map(|p| (p.payout_id, p.state))
                    .collect();
                bail!("payouts still open after {deadline:?}: {open:?}");
            }
            tokio::time::sleep(Duration::from_millis(
                test_support::poll::POLL_INTERVAL_MS * 5,
            ))
            .await;
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
