//! No grant outlives the request that asked for it, unknown to everyone (C2 §L4): an acquire
//! that ends without telling its client of a grant (its HTTP request cancelled, a store error
//! whose outcome is unknown, a grant the clock guard withheld) gives the grant back, and the
//! key goes on to the next waiter. On the real `lock-server` binary, PostgreSQL and etcd.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use test_support::{ServiceProcess, free_port, poll_until};

use crate::process::{BIN, UNSAFE_OVERRIDE, base_env, ready};
use crate::support::{Api, CutAfterCommit, StoreAt, on_both_backends, token};

/// How soon the key must be free (or the next waiter's) once its orphan could exist.
const FREED_WITHIN: Duration = Duration::from_millis(200);
/// Longer than any case waits; far shorter than the 30 s leases an orphan would keep.
const WAIT_MS: u64 = 3_500;
const DEADLINE: Duration = Duration::from_secs(10);
const ABANDONED: &str = "lock_acquires_abandoned_total{backend=\"postgres\"}";
const ORPHANS_RELEASED: &str = "lock_orphan_grants_released_total{backend=\"postgres\"}";

fn spawn(at: &StoreAt, logs: &std::path::Path) -> (ServiceProcess, Api) {
    let port = free_port();
    let mut env = at.env();
    env.push((UNSAFE_OVERRIDE.0, UNSAFE_OVERRIDE.1.into()));
    env.extend(base_env(port));
    let process = ServiceProcess::spawn("lock-server", BIN, &[], &env, logs);
    (process, Api::new(format!("http://127.0.0.1:{port}")))
}

async fn acquire_waiting(api: &Api, key: &str, session: &str) -> (StatusCode, Value) {
    let body = json!({"session_id": session, "ttl_ms": 30_000, "wait_ms": WAIT_MS});
    api.post(&format!("/v1/locks/{key}/acquire"), body).await
}

/// L7: the live grant's owner, or `None` when the key is free.
async fn holder(api: &Api, key: &str) -> Option<String> {
    let (status, body) = api
        .call(reqwest::Method::GET, &format!("/v1/locks/{key}"), None)
        .await;
    match status {
        StatusCode::OK => Some(body["owner_id"].as_str().expect("owner_id").to_owned()),
        StatusCode::NOT_FOUND => None,
        other => panic!("GET {key}: {other} {body}"),
    }
}

async fn waiters(api: &Api, key: &str) -> u64 {
    let (_, body) = api
        .call(reqwest::Method::GET, &format!("/v1/locks/{key}"), None)
        .await;
    body["waiters"].as_u64().unwrap_or(0)
}

/// Polls, for at most [`FREED_WITHIN`], until `key` is free.
async fn freed_soon(api: &Api, key: &str, why: &str) {
    let since = Instant::now();
    while holder(api, key).await.is_some() {
        assert!(
            since.elapsed() < FREED_WITHIN,
            "{key} still held {FREED_WITHIN:?} after {why}: an orphan grant"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A parked request cancelled as its key frees: whether the key was handed over to its place
/// before the replica saw it go or not, the next waiter has the key at once.
async fn a_parked_request_cancelled_as_its_key_frees_leaves_no_orphan(at: StoreAt) {
    let logs = tempfile::tempdir().unwrap();
    let (_server, api) = spawn(&at, logs.path());
    ready(&api).await;
    let [first, gone, next] = ["holder", "gone", "next"];
    let (holding, quitter, waiter) = (
        api.session(first, 30_000).await,
        api.session(gone, 30_000).await,
        api.session(next, 30_000).await,
    );
    let (_, grant) = api.acquire("k", &holding, 30_000).await;
    let cancelled = tokio::spawn({
        let api = api.clone();
        async move { acquire_waiting(&api, "k", &quitter).await }
    });
    poll_until("the first waiter", DEADLINE, || async {
        (waiters(&api, "k").await == 1).then_some(())
    })
    .await;
    let waiting = tokio::spawn({
        let api = api.clone();
        async move { acquire_waiting(&api, "k", &waiter).await }
    });
    poll_until("the second waiter", DEADLINE, || async {
        (waiters(&api, "k").await == 2).then_some(())
    })
    .await;
    cancelled.abort();
    assert!(api.release("k", &holding, token(&grant)).await);
    let released = Instant::now();
    let (status, body) = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("the next waiter is answered")
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        released.elapsed() < FREED_WITHIN,
        "the next waiter was granted {:?} after the release",
        released.elapsed()
    );
    assert_eq!(holder(&api, "k").await.as_deref(), Some(next));
}

on_both_backends!(a_parked_request_cancelled_as_its_key_frees_leaves_no_orphan);

/// The store grants after the request was cancelled: the call was held on the key's fence row
/// (by this test) when the client went away, and commits its grant once the row is free. The
/// replica gives that grant back. (Before: the key stayed with a session nobody answered for
/// its whole lease.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_grant_committed_after_its_request_was_cancelled_is_given_back() {
    use sqlx::Connection;
    let at = StoreAt::postgres().await;
    let StoreAt::Postgres(url) = &at else {
        unreachable!()
    };
    let logs = tempfile::tempdir().unwrap();
    let (_server, api) = spawn(&at, logs.path());
    ready(&api).await;
    let session = api.session("late", 30_000).await;
    // A first grant and release give the key its fence row.
    let (_, grant) = api.acquire("fenced", &session, 30_000).await;
    assert!(api.release("fenced", &session, token(&grant)).await);
    let mut blocker = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("SELECT 1 FROM lock_fences WHERE lock_key = 'fenced' FOR UPDATE")
        .execute(&mut blocker)
        .await
        .unwrap();
    let asking = tokio::spawn({
        let api = api.clone();
        async move { api.acquire("fenced", &session, 30_000).await }
    });
    let watcher = sqlx::PgPool::connect(url).await.unwrap();
    poll_until("the acquire to wait on the fence row", DEADLINE, || {
        let watcher = watcher.clone();
        async move {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE '%lock_acquire%'",
            )
            .fetch_one(&watcher)
            .await
            .unwrap();
            (waiting > 0).then_some(())
        }
    })
    .await;
    let abandoned_before = api.metric(ABANDONED).await;
    asking.abort();
    poll_until("the replica to see the request go", DEADLINE, || async {
        (api.metric(ABANDONED).await > abandoned_before).then_some(())
    })
    .await;
    assert_eq!(holder(&api, "fenced").await, None, "nothing granted yet");
    sqlx::query("COMMIT").execute(&mut blocker).await.unwrap();
    // The grant commits now, for a request that ended: it must not stay.
    freed_soon(&api, "fenced", "the fence row was let go").await;
    poll_until("the orphan to be counted", DEADLINE, || async {
        (api.metric(ORPHANS_RELEASED).await >= 1.0).then_some(())
    })
    .await;
}

/// The store committed the grant and the connection was cut before its answer (503, outcome
/// unknown): the replica gives the grant back rather than leave it to a client that was told
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_grant_whose_answer_was_lost_is_given_back() {
    let db = test_support::fresh_database().await;
    let proxy = CutAfterCommit::start(&db.url, "lock_acquire").await;
    let at = StoreAt::Postgres(proxy.url.clone());
    let logs = tempfile::tempdir().unwrap();
    let (_server, api) = spawn(&at, logs.path());
    ready(&api).await;
    let session = api.session("cut", 30_000).await;
    proxy.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, body) = api.acquire("cut", &session, 30_000).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        proxy.cuts.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the cut happened after the commit"
    );
    freed_soon(&api, "cut", "its answer was lost").await;
}
