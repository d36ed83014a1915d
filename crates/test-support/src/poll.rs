//! Waiting for a condition with a deadline: the only way tests synchronise with time.

use std::future::Future;
use std::time::{Duration, Instant};

/// Budget of one readiness probe.
pub const PROBE_TIMEOUT_MS: u64 = 2_000;
/// How often a condition is re-checked.
pub const POLL_INTERVAL_MS: u64 = 20;

/// Calls `check` until it returns `Some`, and returns that value. Panics with `what` when
/// `timeout` passes first.
pub async fn poll_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
    }
}

/// Polls `url` until it answers 200, or panics after `timeout` naming `what`.
pub async fn wait_until_ok(what: &str, url: &str, timeout: Duration) {
    // Each probe has its own short budget: a stopped process accepts connections but never
    // answers, and must not hang the caller past `timeout`.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(PROBE_TIMEOUT_MS))
        .build()
        .expect("build the probe client");
    wait_until_ok_with(&http, what, url, timeout).await;
}

/// As [`wait_until_ok`], probing with `http` (e.g. a client that trusts a test CA).
pub async fn wait_until_ok_with(http: &reqwest::Client, what: &str, url: &str, timeout: Duration) {
    poll_until(what, timeout, || async {
        let response = http
            .get(url)
            .timeout(Duration::from_millis(PROBE_TIMEOUT_MS))
            .send()
            .await
            .ok()?;
        (response.status() == reqwest::StatusCode::OK).then_some(())
    })
    .await;
}
