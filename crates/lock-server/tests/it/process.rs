//! The real `lock-server` binary: restart keeps tokens rising, SIGTERM drains and exits 0,
//! the reaper logs `lease_expired`, a bad configuration exits non-zero with one line.

use std::time::Duration;

use lock_server::store::LockStore;
use nix::sys::signal::Signal;
use reqwest::{Method, StatusCode};
use test_support::{ServiceProcess, free_port, poll_until, wait_until_ok};

use crate::support::{Api, StoreAt, on_both_backends, token};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_lock-server");
const START_DEADLINE: Duration = Duration::from_secs(15);

/// The test stores are throwaway (PostgreSQL with fsync off): the durability guard is
/// overridden, except where a test checks the guard itself.
pub(crate) const UNSAFE_OVERRIDE: (&str, &str) = ("LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE", "true");

fn spawn(name: &str, at: &StoreAt, port: u16, logs: &std::path::Path) -> ServiceProcess {
    let mut env = at.env();
    env.push((UNSAFE_OVERRIDE.0, UNSAFE_OVERRIDE.1.into()));
    env.extend(base_env(port));
    ServiceProcess::spawn(name, BIN, &[], &env, logs)
}

pub(crate) fn base_env(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("LOCK_SERVER_BIND", format!("127.0.0.1:{port}")),
        ("UNSAFE_PLAINTEXT_HTTP", "true".into()),
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
    ]
}

pub(crate) async fn ready(api: &Api) {
    let url = format!("{}/health/ready", api.base);
    wait_until_ok("the lock-server to become ready", &url, START_DEADLINE).await;
}

pub(crate) async fn stop(mut process: ServiceProcess) -> String {
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

async fn restart_keeps_tokens_rising_and_sigterm_drains_cleanly(at: StoreAt) {
    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let api = Api::new(format!("http://127.0.0.1:{port}"));

    let first = spawn("lock-server-1", &at, port, logs.path());
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

    let second = spawn("lock-server-2", &at, port, logs.path());
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

on_both_backends!(
    restart_keeps_tokens_rising_and_sigterm_drains_cleanly,
    only_acquires_that_parked_count_as_waits,
);

/// `lock_waits_total{outcome}` of the replica at `api`, from `/metrics` (absent: a failure).
async fn waits(api: &Api, outcome: &str) -> u64 {
    let text = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("a body");
    let series = format!("outcome=\"{outcome}\"");
    text.lines()
        .find(|l| l.starts_with("lock_waits_total{") && l.contains(&series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("lock_waits_total{{{series}}} missing:\n{text}"))
}

/// A real process, so that its counters are its own.
async fn only_acquires_that_parked_count_as_waits(at: StoreAt) {
    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let api = Api::new(format!("http://127.0.0.1:{port}"));
    let server = spawn("lock-server", &at, port, logs.path());
    ready(&api).await;
    let path = "/v1/locks/counted/acquire";
    let ask = |session: &str, wait_ms: u64| serde_json::json!({"session_id": session, "ttl_ms": 30_000, "wait_ms": wait_ms});
    let (holder, late, next) = (
        api.session("holder", 30_000).await,
        api.session("late", 30_000).await,
        api.session("next", 30_000).await,
    );
    // A free key, asked with a wait: granted by the first try, no wait.
    let (status, grant) = api.post(path, ask(&holder, 3_000)).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    assert_eq!(
        waits(&api, "granted").await,
        0,
        "a grant at once is no wait"
    );
    // Parked until its wait ran out.
    let (status, body) = api.post(path, ask(&late, 200)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(waits(&api, "timed_out").await, 1);
    // Parked, then granted on the release.
    let waiting = {
        let (api, body) = (api.clone(), ask(&next, 3_000));
        tokio::spawn(async move { api.post(path, body).await })
    };
    poll_until("the waiter to park", START_DEADLINE, || async {
        let (_, info) = api.call(Method::GET, "/v1/locks/counted", None).await;
        (info["waiters"] == 1).then_some(())
    })
    .await;
    assert!(api.release("counted", &holder, token(&grant)).await);
    let (status, body) = waiting.await.expect("the waiter");
    assert_eq!(status, StatusCode::OK, "{body}");
    // PostgreSQL hands the freed key to its head waiter in the release's transaction; etcd
    // wakes it to ask.
    let (handed_over, asked) = match at {
        StoreAt::Postgres(_) => (1, 0),
        StoreAt::Etcd { .. } => (0, 1),
    };
    assert_eq!(
        (
            waits(&api, "handed_over").await,
            waits(&api, "granted").await
        ),
        (handed_over, asked)
    );
    stop(server).await;
}

/// Runs the binary to its exit (it must exit by itself); its status and stderr.
pub(crate) async fn run_to_exit(env: &[(&str, String)]) -> (std::process::ExitStatus, String) {
    let output = tokio::time::timeout(
        START_DEADLINE,
        tokio::process::Command::new(BIN)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the lock-server exits by itself")
    .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_store_that_can_lose_commits_is_refused_unless_overridden() {
    // One database with synchronous_commit off: a crash can undo acknowledged grants.
    let db = test_support::fresh_database().await;
    let mut admin =
        <sqlx::PgConnection as sqlx::Connection>::connect(test_support::pg::server_url())
            .await
            .unwrap();
    sqlx::Executor::execute(
        &mut admin,
        format!("ALTER DATABASE {} SET synchronous_commit = off", db.name).as_str(),
    )
    .await
    .unwrap();
    let at = StoreAt::Postgres(db.url.clone());
    let mut env = at.env();
    env.extend(base_env(free_port()));
    let (status, stderr) = run_to_exit(&env).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("synchronous_commit=off")
            && stderr.contains("LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE"),
        "names the setting and the override: {stderr}"
    );

    // The memory backend forgets its tokens on restart: refused the same way.
    let mut memory = vec![("LOCK_BACKEND", "memory".to_owned())];
    memory.extend(base_env(free_port()));
    let (status, stderr) = run_to_exit(&memory).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("memory backend"), "{stderr}");

    // With the override it starts, and says so in its log.
    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let api = Api::new(format!("http://127.0.0.1:{port}"));
    let process = spawn("overridden", &at, port, logs.path());
    ready(&api).await;
    let log = stop(process).await;
    assert!(
        log.contains("\"event\":\"non_durable_store\"") && log.contains("synchronous_commit=off"),
        "the override is logged loudly:\n{log}"
    );
}

#[tokio::test]
async fn the_guard_names_exactly_the_settings_that_are_off() {
    let db = test_support::fresh_database().await;
    let mut admin =
        <sqlx::PgConnection as sqlx::Connection>::connect(test_support::pg::server_url())
            .await
            .unwrap();
    for value in ["on", "off"] {
        sqlx::Executor::execute(
            &mut admin,
            format!(
                "ALTER DATABASE {} SET synchronous_commit = {value}",
                db.name
            )
            .as_str(),
        )
        .await
        .unwrap();
        let store = lock_server::store::PostgresStore::connect(&db.url, 1)
            .await
            .unwrap();
        let risks = store.durability_risks().await.unwrap();
        for setting in ["fsync", "synchronous_commit"] {
            let shown: String = sqlx::query_scalar(&format!("SHOW {setting}"))
                .fetch_one(store.pool())
                .await
                .unwrap();
            assert_eq!(
                risks.iter().any(|r| r.contains(&format!("{setting}=off"))),
                shown == "off",
                "{setting} is {shown}: {risks:?}"
            );
        }
    }
    // etcd acknowledges a write once a majority has it in its fsynced log.
    let etcd = StoreAt::etcd().open().await;
    assert_eq!(etcd.durability_risks().await.unwrap(), Vec::<String>::new());
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
