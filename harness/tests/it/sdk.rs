//! The SDK against a real lock-server process on a real PostgreSQL (loss before expiry,
//! contention): hold a lock for 3× its TTL, then freeze the heartbeat and see the loss
//! within ttl × (1 − margin) + one period, before the server expires the grant.

use std::time::{Duration, Instant};

use harness::stack::start_lock_server;
use lock_api::LockKey;
use lock_client::{AcquirePolicy, LockClient};
use reqwest::StatusCode;
use test_support::poll_until;

const TTL: Duration = Duration::from_secs(1);
/// Polling granularity and scheduling noise allowed on top of the bound.
const SLACK: Duration = Duration::from_millis(150);

async fn server() -> (harness::stack::LockServer, tempfile::TempDir) {
    let db = test_support::fresh_database().await;
    let logs = tempfile::tempdir().unwrap();
    let server = start_lock_server(
        "lock-server",
        &db.url,
        &[("LOCK_TTL_MIN", "50ms".into())],
        logs.path(),
    )
    .await
    .unwrap();
    (server, logs)
}

fn client(url: &str) -> LockClient {
    harness::stack::lock_client_builder([url])
        .session_ttl(TTL)
        .build()
        .unwrap()
}

/// L7 for `key`: the grant's JSON, `None` when not held.
async fn inspect(url: &str, key: &str) -> Option<serde_json::Value> {
    let response = harness::stack::lock_http(test_support::keys::LOCK_CLIENT_TOKEN)
        .unwrap()
        .get(format!("{url}/v1/locks/{key}"))
        .send()
        .await
        .unwrap();
    match response.status() {
        StatusCode::OK => Some(response.json().await.unwrap()),
        StatusCode::NOT_FOUND => None,
        other => panic!("L7 answered {other}"),
    }
}

async fn holder_token(url: &str, key: &str) -> Option<u64> {
    inspect(url, key).await?["fencing_token"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_hold_a_lock_for_three_ttls_and_a_frozen_heartbeat_loses_it_in_time() {
    let (server, _logs) = server().await;
    let client = client(&server.url);
    let session = client.open_session("sdk-test").await.unwrap();
    let key = LockKey::parse("payout:held").unwrap();
    let handle = session
        .acquire(&key, TTL, &AcquirePolicy::default())
        .await
        .unwrap()
        .expect("free key");
    let period = client.heartbeat_period();
    assert_eq!(
        period,
        Duration::from_nanos(233_333_333),
        "min(ttl, lease) × 0.7 / 3"
    );

    let started = Instant::now();
    let mut check = tokio::time::interval(Duration::from_millis(50));
    while started.elapsed() < TTL * 3 {
        check.tick().await;
        session
            .check_still_held(&handle)
            .expect("heartbeats keep the lock through 3× its TTL");
    }
    assert_eq!(
        holder_token(&server.url, "payout:held").await,
        Some(handle.fencing_token().0),
        "the server agrees"
    );

    client.freeze_heartbeat();
    let frozen_at = Instant::now();
    let lost_after = poll_until(
        "the local deadline to pass",
        Duration::from_secs(5),
        || async {
            session
                .check_still_held(&handle)
                .err()
                .map(|_| frozen_at.elapsed())
        },
    )
    .await;
    let bound = TTL.mul_f64(0.7) + period;
    assert!(
        lost_after <= bound + SLACK,
        "lost after {lost_after:?}, bound {bound:?}"
    );
    assert_eq!(
        holder_token(&server.url, "payout:held").await,
        Some(handle.fencing_token().0),
        "I4: the client gave up while the server still held the grant"
    );
    poll_until(
        "the server to expire the grant",
        Duration::from_secs(5),
        || async {
            holder_token(&server.url, "payout:held")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        session.release(handle).await.is_err(),
        "the lost grant reports its loss"
    );
    session.close().await;
    client.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_contend_over_http_and_the_waiter_wins_after_release() {
    let (server, _logs) = server().await;
    let client = client(&server.url);
    let (a, b) = (
        client.open_session("a").await.unwrap(),
        client.open_session("b").await.unwrap(),
    );
    let key = LockKey::parse("payout:contended").unwrap();
    let held = a
        .acquire(&key, TTL * 10, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let short = AcquirePolicy {
        budget: Duration::from_millis(300),
        ..AcquirePolicy::default()
    };
    assert!(
        b.acquire(&key, TTL, &short).await.unwrap().is_none(),
        "contended: None, not an error"
    );
    let first = held.fencing_token();
    a.release(held).await.unwrap();
    let won = b
        .acquire(&key, TTL, &short)
        .await
        .unwrap()
        .expect("free after release");
    assert!(won.fencing_token() > first);
    b.release(won).await.unwrap();
    a.close().await;
    b.close().await;
    client.close();
}

/// L7's queue length for `key` (`None` when not held).
async fn waiters(url: &str, key: &str) -> Option<u64> {
    inspect(url, key).await?["waiters"].as_u64()
}

/// The SDK waits in the server (a queue place per waiting acquire, visible in L7)
/// and waiters are granted in the order they started, not by who polls luckiest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_acquires_wait_in_the_server_and_are_granted_in_arrival_order() {
    const WAITERS: u64 = 3;
    let (server, _logs) = server().await;
    let client = client(&server.url);
    let key = LockKey::parse("payout:fifo").unwrap();
    let holder = client.open_session("holder").await.unwrap();
    let held = holder
        .acquire(&key, TTL * 10, &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..WAITERS {
        let session = client.open_session(&format!("waiter-{i}")).await.unwrap();
        let (key, order) = (key.clone(), order.clone());
        tasks.spawn(async move {
            let handle = session
                .acquire(&key, TTL * 10, &AcquirePolicy::DEFAULT)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("waiter {i} gave up"));
            order.lock().unwrap().push(i);
            session.release(handle).await.unwrap();
            session.close().await;
        });
        poll_until(
            "the waiter's queue place",
            Duration::from_secs(5),
            || async { (waiters(&server.url, "payout:fifo").await == Some(i + 1)).then_some(()) },
        )
        .await;
    }
    holder.release(held).await.unwrap();
    tasks.join_all().await;
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    holder.close().await;
    client.close();
}
