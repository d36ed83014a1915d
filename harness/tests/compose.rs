//! S5, compose only: executor A is cut off the network (`docker network disconnect`) while it
//! holds a payout's lock mid-submit. A declares the lock lost by its own clock within
//! ttl × (1 − margin) + one heartbeat period; B settles the payout; A is reconnected and
//! writes nothing; the rail saw the payout once.
//!
//! Run: `deploy/build-images.sh`, then
//! `HARNESS_STACK=compose cargo test -p harness --features compose --test compose`.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime};

use harness::stack::{Stack, StackOptions};
use payment_api::{Fault, FaultKind, PayoutState};
use test_support::poll_until;

/// The executors' TTL in compose mode (StackOptions::default) and the default margin.
const TTL: Duration = Duration::from_secs(10);
const MARGIN: f64 = 0.30;
/// Log timestamps have microseconds; docker and the host share one clock. Allowance for
/// the disconnect call itself and log flushing.
const SLACK: Duration = Duration::from_millis(1_500);

fn log_time(line: &serde_json::Value) -> SystemTime {
    let stamp = line["timestamp"].as_str().unwrap();
    let parsed = chrono::DateTime::parse_from_rfc3339(stamp).unwrap();
    SystemTime::UNIX_EPOCH
        + Duration::from_micros(u64::try_from(parsed.timestamp_micros()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_a_partitioned_executor_gives_up_its_lock_in_time_and_writes_nothing() {
    assert!(
        harness::compose::selected(),
        "S5 runs against compose: set HARNESS_STACK=compose"
    );
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    let ids = stack.create_payouts("s5", 1).await.unwrap();
    let id = ids[0];
    let cut_at = cut_a_off_mid_submit(&mut stack, id).await;
    assert_a_declares_the_loss_in_time(&stack, cut_at).await;

    stack.start_executor("executor-b", &[]).await.unwrap();
    let settled = stack
        .wait_terminal(&ids, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        settled[0].state,
        PayoutState::Settled,
        "B settled the payout"
    );
    assert_a_writes_nothing_once_reconnected(&stack, id, cut_at, settled[0].fence).await;
    assert_eq!(
        stack.rail_received(id).await.unwrap().len(),
        1,
        "I1: the rail saw the payout once"
    );
    let ledger = stack.ledger().await.unwrap();
    assert_eq!((ledger.postings, ledger.settled_payouts), (1, 1));
}

/// Starts executor A on payout `id` with a slow (but in-budget) rail call, and cuts it off
/// the network while it holds the lock mid-submit; when it was cut.
async fn cut_a_off_mid_submit(stack: &mut Stack, id: i64) -> SystemTime {
    stack
        .rail_fault(&Fault {
            payout_id: Some(id),
            fault: FaultKind::Delay { delay_ms: 1_500 },
        })
        .await
        .unwrap();
    stack.start_executor("executor-a", &[]).await.unwrap();
    poll_until("A to be mid-submit", Duration::from_secs(30), || async {
        (stack.payout(id).await.ok()?.state == PayoutState::Submitted).then_some(())
    })
    .await;
    stack.executors[0]
        .process
        .container()
        .unwrap()
        .disconnect()
        .unwrap();
    SystemTime::now()
}

/// A declares its lock lost by its own clock within ttl × (1 − margin) + one heartbeat
/// period of `cut_at`, and says whose, which session, which backend and why.
async fn assert_a_declares_the_loss_in_time(stack: &Stack, cut_at: SystemTime) {
    let a = stack.executors[0].process.container().unwrap();
    let period = Duration::from_secs_f64(TTL.as_secs_f64() * (1.0 - MARGIN) / 3.0);
    let bound = TTL.mul_f64(1.0 - MARGIN) + period;
    let lost = poll_until(
        "A to declare its lock lost",
        bound + Duration::from_secs(10),
        || async {
            a.log()
                .lines()
                .filter(|l| l.contains("\"event\":\"session_lost\""))
                .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        },
    )
    .await;
    let after = log_time(&lost).duration_since(cut_at).unwrap_or_default();
    assert!(
        after <= bound + SLACK,
        "A declared the loss {after:?} after the cut; bound {bound:?}"
    );
    for field in ["owner", "session", "backend", "reason"] {
        assert!(!lost[field].is_null(), "session_lost lacks {field}: {lost}");
    }
}

/// Reconnects A: it answers again, has posted nothing since `cut_at`, and payout `id` is as
/// B left it (settled, fence `fence_before`).
async fn assert_a_writes_nothing_once_reconnected(
    stack: &Stack,
    id: i64,
    cut_at: SystemTime,
    fence_before: i64,
) {
    let a = stack.executors[0].process.container().unwrap();
    a.connect().unwrap();
    // Reconnected, A may get another address (B may hold its old one by now).
    let a_url = format!("http://{}:8084", a.ip().unwrap());
    poll_until("A to answer again", Duration::from_secs(30), || async {
        stack
            .metric(&a_url, "payout_execute_seconds_count", &[])
            .await
            .ok()
    })
    .await;
    let acked_by_a = stack
        .metric(
            &a_url,
            "payout_execute_seconds_count",
            &[("outcome", "acked")],
        )
        .await
        .unwrap();
    let a_log = stack.executors[0].process.log();
    let events: Vec<&str> = a_log
        .lines()
        .filter(|l| {
            l.contains("payout_attempted")
                || l.contains("step_failed")
                || l.contains("session_lost")
        })
        .collect();
    assert_eq!(
        acked_by_a,
        0.0,
        "A never posted; cut at {cut_at:?}; A's events:\n{}",
        events.join("\n")
    );
    let after_reconnect = stack.payout(id).await.unwrap();
    assert_eq!(
        (after_reconnect.state, after_reconnect.fence),
        (PayoutState::Settled, fence_before),
        "nothing moved"
    );
}

/// Prometheus' base URL in compose.yaml (published on loopback only).
const PROMETHEUS: &str = "http://127.0.0.1:9090";
/// Every scrape target of deploy/prometheus/prometheus.yml.
const TARGETS: usize = 7;
/// Alert rules in deploy/prometheus/alerts.yml.
const ALERT_RULES: usize = 9;

async fn prometheus_get(http: &reqwest::Client, path: &str) -> Option<serde_json::Value> {
    let body: serde_json::Value = http
        .get(format!("{PROMETHEUS}{path}"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    (body["status"] == "success").then_some(body)
}

/// Tears the project down when the test ends, however it ends.
struct Down;
impl Drop for Down {
    fn drop(&mut self) {
        harness::compose::down();
    }
}

/// The whole compose.yaml, as an operator starts it: every service healthy and non-root on
/// its small image, Prometheus finds every target up over HTTPS, has loaded the alert rules,
/// the payout metrics are there before any payout exists, and payouts settle on TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_every_service_and_has_the_payout_metrics() {
    assert!(
        harness::compose::selected(),
        "runs against compose: set HARNESS_STACK=compose"
    );
    tokio::task::spawn_blocking(harness::compose::up_all)
        .await
        .unwrap()
        .unwrap();
    let _down = Down;
    // Every service's container turns healthy by its own HEALTHCHECK (the service's own
    // `--probe`, over HTTPS) and runs as a non-root user.
    for service in [
        "lock-server-1",
        "lock-server-2",
        "payment-resource",
        "rail-proxy",
        "rail-stub",
        "executor-1",
        "executor-2",
    ] {
        let container = harness::compose::Container::of_service(service).unwrap();
        let inspect = |format: &str| {
            let out = std::process::Command::new("docker")
                .args(["inspect", "--format", format, &container.id])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        poll_until(
            &format!("{service} to be healthy"),
            Duration::from_secs(60),
            || async { (inspect("{{.State.Health.Status}}") == "healthy").then_some(()) },
        )
        .await;
        let user = inspect("{{.Config.User}}");
        assert!(
            !user.is_empty() && user != "0" && user != "root",
            "{service} runs as {user:?}"
        );
    }
    let http = reqwest::Client::new();
    let targets = poll_until(
        "Prometheus to see every target up",
        Duration::from_secs(90),
        || async {
            let body = prometheus_get(&http, "/api/v1/targets?state=active").await?;
            let active = body["data"]["activeTargets"].as_array()?.clone();
            (active.len() == TARGETS && active.iter().all(|t| t["health"] == "up"))
                .then_some(active)
        },
    )
    .await;
    let jobs: std::collections::BTreeSet<&str> = targets
        .iter()
        .filter_map(|t| t["labels"]["job"].as_str())
        .collect();
    assert_eq!(
        jobs.into_iter().collect::<Vec<_>>(),
        [
            "lock-server",
            "payment-resource",
            "payout-executor",
            "rail-proxy",
            "rail-stub"
        ]
    );
    let rules = prometheus_get(&http, "/api/v1/rules").await.unwrap();
    let loaded: usize = rules["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["rules"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(loaded, ALERT_RULES, "alert rules loaded: {rules}");
    // Exported from start: present in Prometheus before any payout exists.
    for (query, series) in [
        ("payout_execute_seconds_count", 18), // nine outcomes on each of two executors
        ("lock_session_lost_total", 2),
        ("rail_duplicate_attempted_total", 1),
        ("payouts_stuck", 1),
        ("payouts_posted_total", 3),
        ("lock_grants_total", 2),
    ] {
        let found = poll_until(
            &format!("Prometheus to have {query}"),
            Duration::from_secs(30),
            || async {
                let body = prometheus_get(&http, &format!("/api/v1/query?query={query}")).await?;
                let n = body["data"]["result"].as_array()?.len();
                (n >= series).then_some(n)
            },
        )
        .await;
        assert!(found >= series, "{query}: {found} series");
    }
    settles_payouts_on_tls(&http, &targets).await;
}

/// The stack is on TLS end to end: Prometheus scrapes every target over HTTPS, a plain
/// request to a service's port is refused, and payouts created over HTTPS (trusting the CA
/// tls-init exported) are settled by compose.yaml's own executors, each once.
async fn settles_payouts_on_tls(plain: &reqwest::Client, targets: &[serde_json::Value]) {
    for target in targets {
        let url = target["scrapeUrl"].as_str().unwrap_or_default();
        assert!(url.starts_with("https://"), "scraped in clear: {target}");
    }
    let refused = plain
        .get("http://127.0.0.1:8081/health/ready")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::BAD_REQUEST);
    let env = harness::compose::env_file().unwrap();
    let secret = |key: &str| {
        env.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{key} not in .env"))
    };
    let ca = harness::stack::TlsFiles::of_compose(harness::compose::exported_ca()).unwrap();
    let https = ca
        .client()
        .apply(reqwest::Client::builder().timeout(Duration::from_secs(10)))
        .unwrap()
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..10 {
        let payout: payment_api::Payout = https
            .post("https://127.0.0.1:8082/v1/payouts")
            .bearer_auth(secret("PAYMENT_CREATOR_TOKEN"))
            .header(
                payment_api::IDEMPOTENCY_KEY_HEADER,
                format!("compose-tls-{i}"),
            )
            .json(&payment_api::CreatePayout {
                amount_minor: 100 + i,
                currency: "EUR".into(),
                beneficiary: format!("beneficiary {i}"),
            })
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.push(payout.payout_id);
    }
    let reader = secret("PAYMENT_READER_TOKEN");
    for id in ids {
        poll_until(
            &format!("payout {id} to settle"),
            Duration::from_secs(60),
            || async {
                let payout: payment_api::Payout = https
                    .get(format!("https://127.0.0.1:8082/v1/payouts/{id}"))
                    .bearer_auth(&reader)
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                (payout.state == PayoutState::Settled).then_some(())
            },
        )
        .await;
    }
    let summary: payment_api::LedgerSummary = https
        .get("https://127.0.0.1:8082/v1/ledger/summary")
        .bearer_auth(&reader)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (summary.postings, summary.settled_payouts),
        (10, 10),
        "each payout posted once"
    );
}
