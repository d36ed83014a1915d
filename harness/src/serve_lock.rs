//! `harness serve-lock`: one lock-server on a throwaway PostgreSQL database, for test suites
//! that are not Rust (the Python SDK's pytest). It prints one JSON line, what a client needs
//! (`url`, `client_token`), an operator's credential (`admin_token`, for revokes), what a
//! resource trusts (`public_keys`), a second fresh database for the suite's own resources
//! (`database_url`: the fence kit's tests, not the lock-server's) and what a
//! test needs to fault the server (`pid`, `log`), then runs until its standard input closes,
//! and stops everything it started.

use std::io::{Read, Write};

use crate::stack::start_lock_server;

/// The operator credential (`LOCK_ADMIN_TOKEN`) of the server it starts: a test's, on loopback.
const ADMIN_TOKEN: &str = "serve-lock-admin-token";

/// Runs the server until stdin closes.
pub async fn run() -> anyhow::Result<()> {
    let database = test_support::fresh_database().await;
    let logs = tempfile::Builder::new().prefix("serve-lock-").tempdir()?;
    let admin = [("LOCK_ADMIN_TOKEN", ADMIN_TOKEN.to_owned())];
    let server = start_lock_server("lock-server", &database.url, &admin, logs.path()).await?;
    let resources = test_support::fresh_database().await;
    let ready = serde_json::json!({
        "url": server.url,
        "client_token": test_support::keys::LOCK_CLIENT_TOKEN,
        "admin_token": ADMIN_TOKEN,
        "public_keys": test_support::keys::public_keys(),
        "database_url": resources.url,
        "pid": server.process.pid().as_raw(),
        "log": logs.path().join("lock-server.log"),
    });
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{ready}")?;
    stdout.flush()?;
    drop(stdout);
    // Until the test suite that started it closes the pipe (or exits).
    tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await??;
    drop(server);
    Ok(())
}
