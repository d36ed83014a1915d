//! Starting the real service binaries as separate processes on free loopback ports.

use std::path::Path;
use std::time::Duration;

use test_support::{ServiceProcess, cargo_bin, free_port, wait_until_ok};

/// How long a service may take to become ready.
pub const READY_DEADLINE: Duration = Duration::from_secs(30);

/// A running lock-server process.
#[derive(Debug)]
pub struct LockServer {
    /// The process (killed when dropped).
    pub process: ServiceProcess,
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
    let binary = cargo_bin("lock-server").map_err(anyhow::Error::msg)?;
    let port = free_port();
    let mut env = vec![
        ("DATABASE_URL", database_url.to_owned()),
        ("LOCK_SERVER_BIND", format!("127.0.0.1:{port}")),
    ];
    env.extend(extra_env.iter().cloned());
    let process = ServiceProcess::spawn(name, &binary, &[], &env, log_dir);
    let url = format!("http://127.0.0.1:{port}");
    wait_until_ok(
        "the lock-server to become ready",
        &format!("{url}/health/ready"),
        READY_DEADLINE,
    )
    .await;
    Ok(LockServer { process, url })
}
