//! The store-clock guard on real processes: PostgreSQL runs under libfaketime and its wall
//! clock steps forward past every lease while a client holds a key. Without the guard the
//! store hands the key to a second session at once (it judges the first lease over); with
//! it the real `lock-server` binary withholds that grant, says so loudly, answers no grant
//! for the longest lease, and a replica started after the step holds too.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use test_support::faketime::FakeClock;
use test_support::{
    ServiceProcess, TEST_SETTINGS, ThrowawayCluster, free_port, fresh_database_on, poll_until,
};

use crate::process::{BIN, UNSAFE_OVERRIDE, base_env, ready};
use crate::support::{Api, StoreAt};

/// `LOCK_TTL_MAX` of the first replica: the longest lease, so the guard's hold.
const TTL_MAX: Duration = Duration::from_secs(3);
/// How soon a grant the replica withheld is given back (C2 §L4: no orphan grant).
const ORPHAN_FREED_WITHIN: Duration = Duration::from_millis(200);
/// How far the database host's clock steps: many leases.
const STEP_SECS: i64 = 60;

fn spawn(name: &str, at: &StoreAt, ttl_max: &str, logs: &std::path::Path) -> (ServiceProcess, Api) {
    let port = free_port();
    let mut env = at.env();
    env.push((UNSAFE_OVERRIDE.0, UNSAFE_OVERRIDE.1.into()));
    env.extend(base_env(port));
    for name in ["LOCK_TTL_MAX", "LOCK_SESSION_TTL", "LOCK_DEFAULT_TTL"] {
        env.push((name, ttl_max.into()));
    }
    let process = ServiceProcess::spawn(name, BIN, &[], &env, logs);
    (process, Api::new(format!("http://127.0.0.1:{port}")))
}

fn stepped_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter(|l| l.contains("\"event\":\"store_clock_stepped\""))
        .map(|l| serde_json::from_str(l).expect("a JSON log line"))
        .collect()
}

/// The grant the store made and the replica withheld is given back at once, not left to a
/// session that was told nothing until its lease ends.
async fn assert_withheld_grant_given_back(api: &Api) {
    poll_until(
        "the withheld grant to be given back",
        ORPHAN_FREED_WITHIN,
        || async {
            let (status, body) = api
                .call(reqwest::Method::GET, "/v1/locks/payout:1", None)
                .await;
            match status {
                StatusCode::NOT_FOUND => Some(()),
                StatusCode::OK => None,
                other => panic!("{other} {body}"),
            }
        },
    )
    .await;
}

/// The `holder` of `grant` is told the truth by its next renewal: the store ended its grant
/// (409), its session (410), or the reaper already removed that session (404).
async fn assert_holder_told_by_its_renewal(api: &Api, holder: &str, grant: &serde_json::Value) {
    let (status, body) = api
        .post(
            "/v1/locks/payout:1/renew",
            json!({"session_id": holder, "fencing_token": grant["fencing_token"]}),
        )
        .await;
    assert!(
        [
            StatusCode::CONFLICT,
            StatusCode::GONE,
            StatusCode::NOT_FOUND
        ]
        .contains(&status),
        "{status} {body}"
    );
}

/// The step is counted once and logged once, at ERROR, with how far ahead the store is.
async fn assert_step_counted_and_logged_once(api: &Api, replica: &ServiceProcess) {
    assert_eq!(
        api.metric("lock_store_clock_steps_total{backend=\"postgres\"}")
            .await,
        1.0,
        "one step, counted once"
    );
    let lines = stepped_lines(&replica.log());
    assert_eq!(lines.len(), 1, "one ERROR line:\n{}", replica.log());
    assert_eq!(lines[0]["level"], "ERROR", "{}", lines[0]);
    assert!(
        lines[0]["ahead_ms"].as_u64().is_some_and(|ms| ms >= 59_000),
        "{}",
        lines[0]
    );
}

/// Polls, in a fresh session kept alive, until payout:1 is granted again: when it was.
async fn wait_until_grants_resume(api: &Api, lease_ms: u64) -> Instant {
    let resumed = api.session("after-the-hold", lease_ms).await;
    poll_until(
        "grants to resume after the hold",
        Duration::from_secs(20),
        || {
            let resumed = resumed.clone();
            async move {
                let (status, body) = api
                    .call(
                        reqwest::Method::POST,
                        &format!("/v1/sessions/{resumed}/heartbeat"),
                        None,
                    )
                    .await;
                assert_eq!(status, StatusCode::OK, "the session is kept alive: {body}");
                let (status, body) = api.acquire("payout:1", &resumed, lease_ms).await;
                match status {
                    StatusCode::OK => Some(Instant::now()),
                    StatusCode::SERVICE_UNAVAILABLE | StatusCode::CONFLICT => None,
                    other => panic!("{other} {body}"),
                }
            }
        },
    )
    .await
}

/// A replica that starts after the step has no reading from before it: it compares the
/// store's clock with its host's wall clock, finds it a minute ahead, and holds too.
async fn assert_a_replica_started_after_the_step_holds(at: &StoreAt, logs: &std::path::Path) {
    let (second, api) = spawn("lock-server-2", at, "60s", logs);
    ready(&api).await;
    let session = api.session("on-the-new-replica", 10_000).await;
    let (status, body) = api.acquire("payout:3", &session, 10_000).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let lines = stepped_lines(&second.log());
    assert!(
        lines.iter().any(|l| l["at_start"] == true),
        "the new replica said why:\n{}",
        second.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_step_of_the_stores_clock_withholds_the_grant_and_holds_grants_for_the_longest_lease()
 {
    let clock = FakeClock::new().unwrap_or_else(|e| panic!("{e}"));
    let cluster = ThrowawayCluster::start_with_env(TEST_SETTINGS, clock.env())
        .unwrap_or_else(|e| panic!("start PostgreSQL under libfaketime: {e}"));
    let at = StoreAt::Postgres(fresh_database_on(&cluster.url("postgres")).await.url);
    let logs = tempfile::tempdir().unwrap();
    let lease_ms = u64::try_from(TTL_MAX.as_millis()).unwrap();

    let (first, api) = spawn("lock-server-1", &at, "3s", logs.path());
    ready(&api).await;
    let holder = api.session("holder", lease_ms).await;
    let held_from = Instant::now();
    let (status, grant) = api.acquire("payout:1", &holder, lease_ms).await;
    assert_eq!(status, StatusCode::OK, "{grant}");

    clock.set_offset_secs(STEP_SECS).unwrap();
    let stepped_at = Instant::now();
    let newcomer = api.session("newcomer", lease_ms).await;
    let (status, refused) = api.acquire("payout:1", &newcomer, lease_ms).await;
    assert!(
        held_from.elapsed() < TTL_MAX,
        "the premise: the holder's lease had not ended by its own clock when the newcomer asked"
    );
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "the store judged the holder's lease over and granted the key again; the replica must not answer that grant: {refused}"
    );
    assert_eq!(refused["code"], "STORE_UNAVAILABLE", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("clock stepped")),
        "{refused}"
    );
    assert_withheld_grant_given_back(&api).await;
    assert_holder_told_by_its_renewal(&api, &holder, &grant).await;
    // Every key is held, not only the one that showed the step.
    let (status, body) = api.acquire("payout:2", &newcomer, lease_ms).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");

    assert_step_counted_and_logged_once(&api, &first).await;

    // After the hold, grants come back: never sooner than the longest lease after the step.
    let granted_at = wait_until_grants_resume(&api, lease_ms).await;
    assert!(
        granted_at.duration_since(stepped_at) >= TTL_MAX,
        "a grant came {:?} after the step, inside the hold of {TTL_MAX:?}",
        granted_at.duration_since(stepped_at)
    );

    assert_a_replica_started_after_the_step_holds(&at, logs.path()).await;
}
