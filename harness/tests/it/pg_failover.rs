//! A PostgreSQL failover that loses no token, on real processes: a primary with a
//! synchronous standby; two lock-server processes on the multi-host `DATABASE_URL`
//! `primary,standby`; SDK clients taking and releasing their own keys and one shared key in
//! a loop. Under that load the primary is SIGKILLed and the standby promoted. The
//! lock-servers find the new primary on their own, and the clients' own records show no
//! grant lost: tokens rise strictly per key across the failover, no two clients believe they
//! hold a key at once, and every grant answered before the promotion is within the fence the
//! promoted standby had for its key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::stack::{LockServer, lock_client_builder, start_lock_server};
use lock_api::{EventKind, LockError, LockKey};
use lock_client::admin::watch::{WatchItem, Watcher};
use lock_client::{AcquirePolicy, LockClient};
use tempfile::TempDir;
use test_support::pg::ReplicatedCluster;
use test_support::{fresh_database_on, poll_until};

const CLIENTS_PER_SERVER: usize = 3;
const SHARED_KEY: &str = "fo:shared";
/// Long enough that a hold (about `HOLD`) never outlives its lease.
const LEASE: Duration = Duration::from_secs(2);
/// Long enough that a session outlives the failover without a heartbeat answered.
const SESSION_TTL: Duration = Duration::from_secs(15);
const HOLD: Duration = Duration::from_millis(2);
/// A client's pause after an error, so that a store outage is not a busy loop.
const PAUSE_AFTER_ERROR: Duration = Duration::from_millis(20);
const POLICY: AcquirePolicy = AcquirePolicy {
    budget: Duration::from_secs(1),
    base: Duration::from_millis(5),
    cap: Duration::from_millis(100),
    max_attempts: 64,
};
/// Grants each lock-server must answer in each phase.
const GRANTS_PER_PHASE: usize = 100;
const PHASE_DEADLINE: Duration = Duration::from_secs(20);

/// One answered grant as its client saw it: from the answer until the release was sent (or
/// the lease, counted from when the acquire was sent, ran out).
#[derive(Debug, Clone)]
struct Grant {
    key: String,
    token: u64,
    client: usize,
    server: usize,
    answered: Instant,
    end: Instant,
}

#[derive(Debug, Default)]
struct Record {
    grants: Mutex<Vec<Grant>>,
    errors: AtomicU64,
}

impl Record {
    fn grants(&self) -> Vec<Grant> {
        self.grants.lock().unwrap().clone()
    }

    /// Grants `server` answered after `t`.
    fn answered_after(&self, server: usize, t: Instant) -> usize {
        let grants = self.grants.lock().unwrap();
        grants
            .iter()
            .filter(|g| g.server == server && g.answered > t)
            .count()
    }
}

async fn client_loop(
    me: usize,
    server: usize,
    client: LockClient,
    record: Arc<Record>,
    stop: Arc<AtomicBool>,
) {
    let keys = [
        LockKey::parse(format!("fo:own:{me}")).unwrap(),
        LockKey::parse(SHARED_KEY.to_owned()).unwrap(),
    ];
    let mut session = None;
    let mut turn = me;
    while !stop.load(Ordering::Relaxed) {
        let Some(open) = session.as_ref() else {
            match client.open_session(&format!("client-{me}")).await {
                Ok(opened) => session = Some(opened),
                Err(_) => {
                    record.errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(PAUSE_AFTER_ERROR).await;
                }
            }
            continue;
        };
        turn += 1;
        let key = &keys[turn % keys.len()];
        let sent = Instant::now();
        match open.acquire(key, LEASE, &POLICY).await {
            Ok(Some(handle)) => {
                let answered = Instant::now();
                tokio::time::sleep(HOLD).await;
                let end = Instant::now().min(sent + LEASE);
                record.grants.lock().unwrap().push(Grant {
                    key: key.to_string(),
                    token: handle.fencing_token().0,
                    client: me,
                    server,
                    answered,
                    end,
                });
                // A release the store did not take ends with the lease.
                let _ = open.release(handle).await;
            }
            Ok(None) => {}
            Err(LockError::SessionExpired { .. } | LockError::SessionUnknown { .. }) => {
                if let Some(lost) = session.take() {
                    lost.close().await;
                }
            }
            Err(_) => {
                record.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(PAUSE_AFTER_ERROR).await;
            }
        }
    }
    if let Some(open) = session {
        open.close().await;
    }
    client.close();
}

/// Each key's high-water mark (`lock_fences.last_token`) on the server at `url`.
async fn fences(url: &str) -> HashMap<String, u64> {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let rows: Vec<(String, i64)> = sqlx::query_as("SELECT lock_key, last_token FROM lock_fences")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    rows.into_iter()
        .map(|(key, token)| (key, u64::try_from(token).unwrap()))
        .collect()
}

/// Tokens rise strictly per key in the order the grants were answered, and no two clients
/// believed they held a key at once.
fn check_history(grants: &[Grant]) {
    let mut by_key: HashMap<&str, Vec<&Grant>> = HashMap::new();
    for grant in grants {
        by_key.entry(&grant.key).or_default().push(grant);
    }
    for (key, mut grants) in by_key {
        grants.sort_by_key(|g| g.answered);
        for pair in grants.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.client == b.client && a.token == b.token {
                continue; // one grant answered again to its own session (a retried acquire)
            }
            assert!(
                b.token > a.token,
                "{key}: token {} (client {}) answered after token {} (client {})",
                b.token,
                b.client,
                a.token,
                a.client
            );
            assert!(
                a.end <= b.answered,
                "{key}: two holders at once: client {} believed it held token {} {:?} after client {} was answered token {}",
                a.client,
                a.token,
                a.end - b.answered,
                b.client,
                b.token
            );
        }
    }
}

/// Every grant in `grants` is within the fence `fences` has for its key.
fn check_within(grants: &[Grant], fences: &HashMap<String, u64>, what: &str) {
    for g in grants {
        let fence = fences.get(&g.key).copied().unwrap_or(0);
        assert!(
            g.token <= fence,
            "{}: token {} was answered (client {}, lock-server {}) but {what} has {fence}",
            g.key,
            g.token,
            g.client,
            g.server
        );
    }
}

/// Follows the watch stream until the task is aborted.
async fn follow(mut watcher: Watcher, seen: Arc<Mutex<Vec<WatchItem>>>) {
    while let Ok(item) = watcher.next().await {
        seen.lock().unwrap().push(item);
    }
}

/// Blocking work of the fixture, off the runtime's threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> T {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A primary with a synchronous standby, a database on it, and two lock-servers on the
/// multi-host URL, the durability guard on.
async fn start_stack() -> (Arc<ReplicatedCluster>, String, Vec<LockServer>, TempDir) {
    let cluster = Arc::new(blocking(|| ReplicatedCluster::start(true)).await);
    let db = fresh_database_on(&cluster.primary_url("postgres")).await;
    let logs = tempfile::tempdir().unwrap();
    let url = cluster.failover_url(&db.name);
    // The durability guard runs: a synchronous standby passes it.
    let env = [
        ("LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE", "false".to_owned()),
        ("LOCK_TTL_MIN", "50ms".to_owned()),
    ];
    let mut servers = Vec::new();
    for name in ["lock-server-1", "lock-server-2"] {
        servers.push(
            start_lock_server(name, &url, &env, logs.path())
                .await
                .unwrap(),
        );
    }
    (cluster, db.name, servers, logs)
}

/// When the failover's steps happened, and what the standby had.
struct Failover {
    killed_at: Instant,
    /// Each key's fence on the standby once it replayed all it received, before promotion.
    at_failover: HashMap<String, u64>,
    promoting: Instant,
    promoted_at: Instant,
}

/// SIGKILL to the primary and all its processes, then the standby promoted.
async fn fail_over(cluster: &Arc<ReplicatedCluster>, db: &str) -> Failover {
    let killed_at = Instant::now();
    let crashed = cluster.clone();
    blocking(move || {
        crashed.kill_primary()?;
        crashed.wait_standby_replayed()
    })
    .await;
    // What the standby has once it replayed all it received, before anyone can write to it.
    let at_failover = fences(&cluster.standby_url(db)).await;
    let promoting = Instant::now();
    let promoted = cluster.clone();
    blocking(move || promoted.promote_standby()).await;
    Failover {
        killed_at,
        at_failover,
        promoting,
        promoted_at: Instant::now(),
    }
}

/// The old primary is gone, the standby is the primary, and each lock-server moved to it
/// on its own, having passed the durability guard at its start.
async fn check_failed_over(cluster: &ReplicatedCluster, db: &str, servers: &[LockServer]) {
    // One connection, not a pool: a pool would retry a refused connection for its timeout.
    assert!(
        <sqlx::PgConnection as sqlx::Connection>::connect(&cluster.primary_url(db))
            .await
            .is_err(),
        "the old primary is gone"
    );
    let promoted = sqlx::PgPool::connect(&cluster.standby_url(db))
        .await
        .unwrap();
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&promoted)
        .await
        .unwrap();
    assert!(!in_recovery, "the standby is the primary now");
    for server in servers {
        let log = server.process.log();
        assert!(
            log.contains("\"event\":\"store_host_switched\""),
            "{} moved to the promoted standby:\n{log}",
            server.url
        );
        assert!(!log.contains("non_durable_store"), "the guard passed");
    }
}

/// Waits until each lock-server answered `GRANTS_PER_PHASE` grants after `since`.
async fn wait_for_grants(record: &Record, servers: usize, since: Instant, what: &str) {
    poll_until(what, PHASE_DEADLINE, || async {
        (0..servers)
            .all(|s| record.answered_after(s, since) >= GRANTS_PER_PHASE)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_failover_to_a_sync_standby_loses_no_token() {
    let began = Instant::now();
    let (cluster, db, servers, _logs) = start_stack().await;
    let watching = lock_client_builder([servers[1].url.as_str()])
        .build()
        .unwrap();
    let watched = Arc::new(Mutex::new(Vec::new()));
    let watch = tokio::spawn(follow(
        watching.admin().watch("fo:", None).await.unwrap(),
        watched.clone(),
    ));
    let record = Arc::new(Record::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = tokio::task::JoinSet::new();
    for me in 0..CLIENTS_PER_SERVER * servers.len() {
        let server = me % servers.len();
        let client = lock_client_builder([servers[server].url.as_str()])
            .session_ttl(SESSION_TTL)
            .build()
            .unwrap();
        clients.spawn(client_loop(
            me,
            server,
            client,
            record.clone(),
            stop.clone(),
        ));
    }
    let load_began = Instant::now();
    wait_for_grants(
        &record,
        servers.len(),
        load_began,
        "grants before the failover",
    )
    .await;

    let failover = fail_over(&cluster, &db).await;
    // Nobody restarts or tells the lock-servers: they find the new primary themselves.
    let after_promotion = "grants from both lock-servers after the promotion";
    wait_for_grants(
        &record,
        servers.len(),
        failover.promoted_at,
        after_promotion,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    clients.join_all().await;
    watch.abort();
    watching.close();
    check_failed_over(&cluster, &db, &servers).await;

    let grants = record.grants();
    check_history(&grants);
    // Nothing answered before the promotion is missing on the promoted standby.
    let before: Vec<Grant> = (grants.iter())
        .filter(|g| g.answered < failover.promoting)
        .cloned()
        .collect();
    check_within(&before, &failover.at_failover, "the standby at failover");
    let now = fences(&cluster.standby_url(&db)).await;
    check_within(&grants, &now, "the promoted standby");
    let after: Vec<&Grant> = (grants.iter())
        .filter(|g| g.answered > failover.promoted_at)
        .collect();
    check_watched(&watched.lock().unwrap(), &after);
    report(&grants, &failover, &record, began);
}

/// The run's figures, for docs/reliability.md.
fn report(grants: &[Grant], failover: &Failover, record: &Record, began: Instant) {
    let killed_at = failover.killed_at;
    // After the promotion: an answer in flight at the kill may arrive just after it.
    let resumed = |server: usize| {
        (grants.iter())
            .filter(|g| g.server == server && g.answered > failover.promoted_at)
            .map(|g| (g.answered - killed_at).as_millis())
            .min()
            .unwrap_or(0)
    };
    eprintln!(
        "postgres failover: {} grants ({} before the kill, {} after the promotion) in {:.1} s, \
         {} errors retried; after the kill: standby replayed at {} ms, promoted at {} ms, first \
         grant on the promoted standby at {} ms (lock-server-1) and {} ms (lock-server-2)",
        grants.len(),
        grants.iter().filter(|g| g.answered < killed_at).count(),
        (grants.iter())
            .filter(|g| g.answered > failover.promoted_at)
            .count(),
        began.elapsed().as_secs_f64(),
        record.errors.load(Ordering::Relaxed),
        (failover.promoting - killed_at).as_millis(),
        (failover.promoted_at - killed_at).as_millis(),
        resumed(0),
        resumed(1),
    );
}

/// The watch stream went on through the failover: positions rise, no gap, and it tells of
/// grants made on the promoted standby.
fn check_watched(items: &[WatchItem], after: &[&Grant]) {
    let mut position = 0;
    let mut granted = Vec::new();
    for item in items {
        let WatchItem::Event(event) = item else {
            panic!("a gap in the watch stream: {item:?}");
        };
        assert!(event.position > position, "positions rise: {items:?}");
        position = event.position;
        if event.kind == EventKind::Granted {
            granted.push((event.lock_key.to_string(), event.fencing_token.0));
        }
    }
    assert!(
        after
            .iter()
            .any(|g| granted.contains(&(g.key.clone(), g.token))),
        "the watch stream told of a grant made after the promotion ({} events seen)",
        items.len()
    );
}
