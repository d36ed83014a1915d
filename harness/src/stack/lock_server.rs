//! lock-server processes on their own, and where their store lives (PostgreSQL or etcd).

use std::path::Path;

use anyhow::Context;
use lock_client::ClientBuilder;
use test_support::{ServiceProcess, cargo_bin, free_port};

use super::process::{Proc, READY_DEADLINE};
use super::tls::{self, HTTP_TIMEOUT, TlsFiles};

/// A running lock-server process.
#[derive(Debug)]
pub struct LockServer {
    /// The process (killed when dropped).
    pub process: Proc,
    /// Its base URL, `http://127.0.0.1:PORT` (`https://` on TLS).
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
    spawn_lock_server_at(name, &store, extra_env, log_dir, None).await
}

/// Builds (if needed) and starts `lock-server` on `store`, as [`start_lock_server`] does;
/// on HTTPS with `tls`'s certificate when given.
pub async fn spawn_lock_server_at(
    name: &str,
    store: &LockStoreAt,
    extra_env: &[(&str, String)],
    log_dir: &Path,
    tls: Option<&TlsFiles>,
) -> anyhow::Result<LockServer> {
    let binary = cargo_bin("lock-server").map_err(anyhow::Error::msg)?;
    let mut env = extra_env.to_vec();
    env.extend(tls::server_env(tls));
    spawn_lock_server(&binary, name, store, &env, log_dir, tls).await
}

pub(super) async fn spawn_lock_server(
    binary: &Path,
    name: &str,
    store: &LockStoreAt,
    extra_env: &[(&str, String)],
    log_dir: &Path,
    tls: Option<&TlsFiles>,
) -> anyhow::Result<LockServer> {
    let port = free_port();
    let mut env = store.env();
    env.push(("LOCK_SERVER_BIND", format!("127.0.0.1:{port}")));
    env.extend(test_support::keys::lock_server_env());
    env.extend(extra_env.iter().cloned());
    env.extend(tls::server_env(tls));
    let process = ServiceProcess::spawn(name, binary, &[], &env, log_dir);
    let url = format!("{}://127.0.0.1:{port}", tls::scheme(tls));
    test_support::wait_until_ok_with(
        &tls::http_client(tls)?,
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
pub fn lock_client_builder(
    endpoints: impl IntoIterator<Item = impl Into<String>>,
) -> ClientBuilder {
    lock_client_builder_with(endpoints, test_support::keys::LOCK_CLIENT_TOKEN)
}

/// A lock-client configuration presenting `credential`.
pub(super) fn lock_client_builder_with(
    endpoints: impl IntoIterator<Item = impl Into<String>>,
    credential: &str,
) -> ClientBuilder {
    // A stack without TLS serves plain HTTP on loopback and tells its own processes so
    // (UNSAFE_PLAINTEXT_HTTP); its clients are told the same. A stack on TLS replaces this.
    lock_client::LockClient::builder(endpoints)
        .credential(credential)
        .tls(lock_client::ClientTls::plaintext())
}

/// An HTTP client that presents the lock clients' credential (raw calls of tests and
/// benchmarks, on every lock route but revoke).
pub fn lock_http(credential: &str) -> anyhow::Result<reqwest::Client> {
    let headers = tls_kit::bearer_headers(credential)
        .context("the lock client credential is not a valid header value")?;
    Ok(reqwest::Client::builder()
        .timeout(HTTP_TIMEOUT)
        .default_headers(headers)
        .build()?)
}
