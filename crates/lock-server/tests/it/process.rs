//! The real `lock-server` binary: restart keeps tokens rising, SIGTERM drains and exits 0,
//! the reaper logs `lease_expired`, a bad configuration exits non-zero with one line.

use std::time::Duration;

use nix::sys::signal::Signal;
use reqwest::{Method, StatusCode};
use test_support::{ServiceProcess, free_port, poll_until, wait_until_ok};

use crate::support::{Api, token};

const BIN: &str = env!("CARGO_BIN_EXE_lock-server");
const START_DEADLINE: Duration = Duration::from_secs(15);

fn spawn(name: &str, database_url: &str, port: u16, logs: &std::path::Path) -> ServiceProcess {
    ServiceProcess::spawn(
        name,
        BIN,
        &[],
        &[
            ("DATABASE_URL", database_url.to_owned()),
            ("LOCK_SERVER_BIND", format!("127.0.0.1:{port}")),
            ("LOCK_TTL_MIN", "50ms".into()),
            ("LOCK_REAPER_INTERVAL", "100ms".into()),
            ("LOCK_DRAIN_GRACE", "200ms".into()),
            ("LOG_FORMAT", "json".into()),
            ("LOCK_CLIENT_TOKEN", crate::support::CLIENT_TOKEN.into()),
            (
                "LOCK_SIGNING_KEY",
                test_support::signing_key_base64().into(),
            ),
            (
                "LOCK_SIGNING_KEY_ID",
                test_support::keys::SIGNING_KEY_ID.into(),
            ),
        ],
        logs,
    )
}

async fn ready(api: &Api) {
    let url = format!("{}/health/ready", api.base);
    wait_until_ok("the lock-server to become ready", &url, START_DEADLINE).await;
}

async fn stop(mut process: ServiceProcess) -> String {
    process.signal(Signal::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(10), process.wait())
        .await
        .expect("exits after SIGTERM");
    assert!(
        status.success(),
        "SIGTERM exits 0, got {status}:\n{}",
        process.log()
    );
    process.log()
}

#[tokio::test]
async fn restart_keeps_tokens_rising_and_sigterm_drains_cleanly() {
    let db = test_support::fresh_database().await;
    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let api = Api::new(format!("http://127.0.0.1:{port}"));

    let first = spawn("lock-server-1", &db.url, port, logs.path());
    ready(&api).await;
    let session = api.session("before-restart", 30_000).await;
    let (status, grant) = api.acquire("payout:1", &session, 30_000).await;
    assert_eq!(status, StatusCode::OK);
    let t1 = token(&grant);
    assert!(api.release("payout:1", &session, t1).await);
    let (status, _) = api.acquire("short-lived", &session, 100).await;
    assert_eq!(status, StatusCode::OK);
    poll_until(
        "the reaper to log lease_expired",
        Duration::from_secs(10),
        || async {
            first
                .log()
                .lines()
                .any(|l| l.contains("\"event\":\"lease_expired\"") && l.contains("short-lived"))
                .then_some(())
        },
    )
    .await;
    let line = first
        .log()
        .lines()
        .find(|l| l.contains("lease_expired"))
        .unwrap()
        .to_owned();
    let event: serde_json::Value = serde_json::from_str(&line).expect("JSON log line");
    for field in ["owner", "session", "key", "token", "backend", "reason"] {
        assert!(
            !event[field].is_null(),
            "lease_expired lacks {field}: {line}"
        );
    }
    let log = stop(first).await;
    assert!(
        log.contains("\"event\":\"draining\""),
        "drain was logged:\n{log}"
    );

    let second = spawn("lock-server-2", &db.url, port, logs.path());
    ready(&api).await;
    let session = api.session("after-restart", 30_000).await;
    let (status, grant) = api.acquire("payout:1", &session, 30_000).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        token(&grant) > t1,
        "token after restart {} > {t1}",
        token(&grant)
    );
    let (status, _) = api.call(Method::GET, "/health/live", None).await;
    assert_eq!(status, StatusCode::OK);
    stop(second).await;
}

#[tokio::test]
async fn bad_configuration_exits_non_zero_with_one_line() {
    let output = tokio::process::Command::new(BIN)
        .env("LOCK_BACKEND", "memory")
        .env("LOCK_SERVER_BIND", "127.0.0.1:0")
        .env("LOCK_TTL_MIN", "2s")
        .env("LOCK_TTL_MAX", "1s")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("lock.ttl.min"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
