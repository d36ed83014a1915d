//! Starting a stack: local processes (their databases, the lock-server replicas, then every
//! other service in start order) or the compose project's containers.

use std::path::PathBuf;
use std::sync::atomic::AtomicI64;

use test_support::{ServiceProcess, TestDb, cargo_bins, free_port, wait_until_ok_with};

use super::lock_server::{LockServer, LockStoreAt, spawn_lock_server};
use super::process::{Proc, READY_DEADLINE};
use super::secrets::Secrets;
use super::tls::{self, TlsFiles};
use super::{
    BINARIES, LOCK_CREDENTIALS_FILE, PAYMENT_CREDENTIALS_FILE, ServiceSpec, Stack, StackOptions,
    TRUSTED_KEYS_FILE,
};
use crate::compose::{self, Container, etcd_selected};

/// The lock-server replicas of a local stack.
const LOCK_SERVER_NAMES: [&str; 2] = ["lock-server-1", "lock-server-2"];

/// What the services of a local stack share: where they log, their secrets and TLS files,
/// and the files they read credentials and trusted keys from.
struct Shared {
    log_dir: PathBuf,
    secrets: Secrets,
    tls: Option<TlsFiles>,
    /// `(key, path)` of the payment services' credentials file.
    payment_credentials: (&'static str, String),
    /// `(key, path)` of the resources' trusted-keys file.
    trusted_keys: (&'static str, String),
}

/// The base URLs of a local stack's payment-resource, rail-stub and rail-proxy.
struct Urls {
    payment: String,
    rail: String,
    proxy: String,
}

impl Stack {
    /// Local processes, their databases on a fresh database each (on the server at
    /// `server_url` when given); logs under `keep_logs_in` or a temporary directory.
    pub(super) async fn start_local(
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
        let (lockdb, paydb) = databases(server_url).await;
        let (shared, signer) = Shared::prepare(log_dir, &options)?;
        let lock_store = if etcd_selected()? {
            LockStoreAt::Etcd {
                endpoints: test_support::etcd::endpoints(),
                prefix: test_support::etcd::fresh_prefix(),
            }
        } else {
            LockStoreAt::Postgres(lockdb.url.clone())
        };
        let lock_env = shared.lock_env();
        let mut lock_servers = Vec::new();
        for name in LOCK_SERVER_NAMES {
            let (dir, tls) = (&shared.log_dir, shared.tls.as_ref());
            let replica = spawn_lock_server(&bins[0], name, &lock_store, &lock_env, dir, tls);
            lock_servers.push(replica.await?);
        }
        let urls = Urls::free(tls::scheme(shared.tls.as_ref()));
        let service_specs = shared.service_specs(&bins, &options, &paydb, &urls);
        let (services, http) = shared.spawn_services(&service_specs).await?;
        Ok(Self {
            _logs: logs,
            bins,
            options,
            lock_servers,
            paydb_url: Some(paydb.url.clone()),
            lockdb_url: matches!(lock_store, LockStoreAt::Postgres(_)).then(|| lockdb.url.clone()),
            signer,
            services,
            service_specs,
            lock_spec: Some((lock_store, lock_env)),
            retired: Vec::new(),
            incarnations: 0,
            last_payout: AtomicI64::new(0),
            compose: false,
            executors: Vec::new(),
            http,
            plain_http: tls::http_client(None)?,
            log_dir: shared.log_dir,
            secrets: shared.secrets,
            tls: shared.tls,
            payment_url: urls.payment,
            proxy_url: urls.proxy,
            rail_url: urls.rail,
        })
    }

    /// Compose mode: the infrastructure from compose.yaml, from a clean state.
    pub(super) async fn start_compose(options: StackOptions) -> anyhow::Result<Self> {
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
        let ready = |service: &str, url: &str| {
            let (what, health) = (
                format!("{service} to become ready"),
                format!("{url}/health/ready"),
            );
            let http = http.clone();
            async move { wait_until_ok_with(&http, &what, &health, READY_DEADLINE * 3).await }
        };
        let mut lock_servers = Vec::new();
        for (service, port) in [("lock-server-1", 8081), ("lock-server-2", 8091)] {
            let url = local(port);
            ready(service, &url).await;
            let process = Proc::Container(Container::of_service(service)?);
            lock_servers.push(LockServer { process, url });
        }
        let mut services = Vec::new();
        for (service, url) in [
            ("payment-resource", &payment_url),
            ("rail-proxy", &proxy_url),
            ("rail-stub", &rail_url),
        ] {
            ready(service, url).await;
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
            last_payout: AtomicI64::new(0),
            compose: true,
            executors: Vec::new(),
            http,
            plain_http: tls::http_client(None)?,
            tls,
        })
    }
}

/// lockdb and paydb: fresh databases on the server at `server_url`, or on the test process's.
async fn databases(server_url: Option<&str>) -> (TestDb, TestDb) {
    match server_url {
        Some(url) => (
            test_support::fresh_database_on(url).await,
            test_support::fresh_database_on(url).await,
        ),
        None => (
            test_support::fresh_database().await,
            test_support::fresh_database().await,
        ),
    }
}

impl Urls {
    /// URLs on free loopback ports.
    fn free(scheme: &str) -> Self {
        let url = |port: u16| format!("{scheme}://127.0.0.1:{port}");
        Self {
            payment: url(free_port()),
            rail: url(free_port()),
            proxy: url(free_port()),
        }
    }
}

/// `host:port` of a base URL, for a service's bind address.
fn bind_of(url: &str) -> String {
    url.rsplit("://").next().unwrap_or(url).to_owned()
}

impl Shared {
    /// Secrets, TLS files (when asked), and the empty credentials files and the trusted-keys
    /// file under `log_dir`; the signer whose key the resources trust.
    fn prepare(
        log_dir: PathBuf,
        options: &StackOptions,
    ) -> anyhow::Result<(Self, lock_api::FenceSigner)> {
        let secrets = Secrets::local();
        // Without TLS, the services talk over loopback in plain HTTP, said so explicitly.
        let tls = options.tls.then(|| TlsFiles::make(&log_dir)).transpose()?;
        let signer = secrets.signer()?;
        for file in [LOCK_CREDENTIALS_FILE, PAYMENT_CREDENTIALS_FILE] {
            std::fs::write(log_dir.join(file), "")?;
        }
        // Local resources read their trusted keys from a file they reload on SIGHUP (a key
        // rotation under live traffic); containers get them inline from `.env`.
        let keys_file = log_dir.join(TRUSTED_KEYS_FILE);
        std::fs::write(&keys_file, format!("{}\n", signer.verifier_entry()))?;
        let in_logs = |file: &str| log_dir.join(file).display().to_string();
        let shared = Self {
            payment_credentials: (
                "PAYMENT_CREDENTIALS_FILE",
                in_logs(PAYMENT_CREDENTIALS_FILE),
            ),
            trusted_keys: ("FENCE_PUBLIC_KEYS_FILE", keys_file.display().to_string()),
            log_dir,
            secrets,
            tls,
        };
        Ok((shared, signer))
    }

    /// The lock-server replicas' environment.
    fn lock_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("LOCK_TTL_MIN", "50ms".to_owned()),
            ("LOCK_REAPER_INTERVAL", "200ms".to_owned()),
            // Test stores are throwaway (PostgreSQL with fsync off).
            ("LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE", "true".to_owned()),
        ];
        env.extend(tls::server_env(self.tls.as_ref()));
        env.extend(self.secrets.lock_server_env());
        let credentials = self.log_dir.join(LOCK_CREDENTIALS_FILE);
        env.push(("LOCK_CREDENTIALS_FILE", credentials.display().to_string()));
        env
    }

    /// Every service but the lock-servers and the executors, in start order.
    fn service_specs(
        &self,
        bins: &[PathBuf],
        options: &StackOptions,
        paydb: &TestDb,
        urls: &Urls,
    ) -> Vec<ServiceSpec> {
        let secrets = &self.secrets;
        let payment = vec![
            ("DATABASE_URL", paydb.url.clone()),
            ("PAYMENT_BIND", bind_of(&urls.payment)),
            ("PAYMENT_PROXY_TOKEN", secrets.proxy.clone()),
            ("PAYMENT_CREATOR_TOKEN", secrets.creator.clone()),
            ("PAYOUT_EXECUTOR_TOKEN", secrets.executor.clone()),
            ("PAYMENT_ADMIN_TOKEN", secrets.payment_admin.clone()),
            ("PAYMENT_READER_TOKEN", secrets.reader.clone()),
            self.trusted_keys.clone(),
            self.payment_credentials.clone(),
            ("RAIL_HOP_BUDGET", options.hop_budget.to_owned()),
            // Short, so tests see a stuck payout counted.
            ("PAYMENT_STUCK_AFTER", "2s".to_owned()),
        ];
        let rail = vec![
            ("RAIL_STUB_BIND", bind_of(&urls.rail)),
            ("RAIL_PROXY_CREDENTIAL", secrets.rail.clone()),
            ("RAIL_STUB_ADMIN_TOKEN", secrets.rail_admin.clone()),
        ];
        let mut proxy = vec![
            ("RAIL_PROXY_BIND", bind_of(&urls.proxy)),
            ("PAYMENT_URL", urls.payment.clone()),
            ("RAIL_URL", urls.rail.clone()),
            ("RAIL_PROXY_CREDENTIAL", secrets.rail.clone()),
            ("PAYMENT_PROXY_TOKEN", secrets.proxy.clone()),
            ("PAYOUT_EXECUTOR_TOKEN", secrets.executor.clone()),
            self.trusted_keys.clone(),
            self.payment_credentials.clone(),
            ("RAIL_HOP_TIMEOUT", options.rail_timeout.to_owned()),
            ("RAIL_HOP_BUDGET", options.hop_budget.to_owned()),
        ];
        proxy.extend(tls::client_env(self.tls.as_ref()));
        [
            ("payment-resource", &bins[1], payment, &urls.payment),
            ("rail-stub", &bins[3], rail, &urls.rail),
            ("rail-proxy", &bins[2], proxy, &urls.proxy),
        ]
        .into_iter()
        .map(|(name, binary, mut env, url)| {
            env.extend(tls::server_env(self.tls.as_ref()));
            ServiceSpec {
                name,
                binary: binary.clone(),
                env,
                url: url.clone(),
            }
        })
        .collect()
    }

    /// Spawns `specs` and waits until each answers ready; the processes and the harness's
    /// client for them.
    async fn spawn_services(
        &self,
        specs: &[ServiceSpec],
    ) -> anyhow::Result<(Vec<Proc>, reqwest::Client)> {
        let services = specs
            .iter()
            .map(|s| {
                let process = ServiceProcess::spawn(s.name, &s.binary, &[], &s.env, &self.log_dir);
                Proc::Local(process)
            })
            .collect();
        let http = tls::http_client(self.tls.as_ref())?;
        for spec in specs {
            let url = &spec.url;
            let what = format!("{url} to become ready");
            let health = format!("{url}/health/ready");
            wait_until_ok_with(&http, &what, &health, READY_DEADLINE).await;
        }
        Ok((services, http))
    }
}
