//! The lock service on a three-member etcd cluster losing its leader: 16 clients acquire and
//! release through two lock-server processes while the etcd leader is SIGKILLed and, later,
//! SIGSTOPped. Checked from the clients' own observations: no two holders of a key at once,
//! tokens strictly rising per key, and the service granting again within a stated bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use reqwest::StatusCode;
use serde_json::json;
use test_support::etcd::EtcdCluster;
use test_support::{ServiceProcess, free_port, poll_until, wait_until_ok};

use crate::support::{Api, token};

const BIN: &str = env!("CARGO_BIN_EXE_lock-server");
const CLIENTS: usize = 16;
const KEYS: [&str; 4] = ["payout:1", "payout:2", "payout:3", "payout:4"];
/// Long enough that a hold never outlives its lease: a hold lasts about `HOLD_MS`.
const LEASE_MS: u64 = 3_000;
const SESSION_TTL_MS: u64 = 30_000;
const HOLD_MS: u64 = 2;
/// The stated bound: after losing its leader, the service grants again within this.
const ANSWERS_AGAIN_WITHIN: Duration = Duration::from_secs(5);
/// Grants each phase waits for (instead of a fixed duration).
const GRANTS_PER_PHASE: usize = 150;
const PHASE_DEADLINE: Duration = Duration::from_secs(30);

/// One grant as its client saw it: from the grant's answer until the release was sent (or
/// the lease ran out, counted from when the acquire was sent).
#[derive(Debug, Clone)]
struct Hold {
    key: &'static str,
    token: u64,
    session: String,
    start: Instant,
    end: Instant,
}

#[derive(Debug, Default)]
struct Observed {
    holds: Mutex<Vec<Hold>>,
    unavailable: AtomicU64,
    unexpected: Mutex<Vec<String>>,
}

impl Observed {
    /// The longest time without a grant in `[from, to]`.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        longest_gap(&self.holds.lock().unwrap(), from, to)
    }

    fn grants_after(&self, t: Instant) -> usize {
        self.holds
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.start > t)
            .count()
    }
}

async fn client(index: usize, api: Api, observed: Arc<Observed>, stop: Arc<AtomicBool>) {
    let mut session = None;
    let mut turn = index;
    while !stop.load(Ordering::Relaxed) {
        let Some(id) = session.clone() else {
            let (status, body) = api
                .post(
                    "/v1/sessions",
                    json!({"owner_id": format!("client-{index}"), "ttl_ms": SESSION_TTL_MS}),
                )
                .await;
            match status {
                StatusCode::CREATED => session = body["session_id"].as_str().map(str::to_owned),
                StatusCode::SERVICE_UNAVAILABLE => {
                    observed.unavailable.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => observed
                    .unexpected
                    .lock()
                    .unwrap()
                    .push(format!("L1 {other}: {body}")),
            }
            continue;
        };
        turn += 1;
        let key = KEYS[turn % KEYS.len()];
        let sent = Instant::now();
        let (status, body) = api.acquire(key, &id, LEASE_MS).await;
        match status {
            StatusCode::OK => {
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(HOLD_MS)).await;
                let release_sent = Instant::now();
                let end = release_sent.min(sent + Duration::from_millis(LEASE_MS));
                observed.holds.lock().unwrap().push(Hold {
                    key,
                    token: token(&body),
                    session: id.clone(),
                    start,
                    end,
                });
                // A release the store did not take ends with the lease; the next acquire
                // of this key by this session gets the same grant back, which is fine.
                let (status, body) = api
                    .post(
                        &format!("/v1/locks/{key}/release"),
                        json!({"session_id": id, "fencing_token": token(&body)}),
                    )
                    .await;
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    observed.unavailable.fetch_add(1, Ordering::Relaxed);
                } else if status != StatusCode::OK {
                    observed
                        .unexpected
                        .lock()
                        .unwrap()
                        .push(format!("L6 {status}: {body}"));
                }
            }
            StatusCode::CONFLICT => {
                tokio::time::sleep(Duration::from_millis(1 + fastrand::u64(0..5))).await;
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                observed.unavailable.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            StatusCode::NOT_FOUND | StatusCode::GONE => session = None,
            other => observed
                .unexpected
                .lock()
                .unwrap()
                .push(format!("L4 {other}: {body}")),
        }
    }
}

/// No two holders of a key at once, and tokens rise with time, per key.
fn check_history(holds: &[Hold]) {
    let mut by_key: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for hold in holds {
        by_key.entry(hold.key).or_default().push(hold);
    }
    for (key, mut holds) in by_key {
        holds.sort_by_key(|h| h.start);
        for pair in holds.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.session == b.session && a.token == b.token {
                continue; // the same grant given back to its own session (a retried acquire)
            }
            assert!(
                a.end <= b.start,
                "{key}: two holders at once: token {} (session {}) held until {:?} after token {} (session {}) was granted",
                a.token,
                a.session,
                a.end - b.start,
                b.token,
                b.session
            );
            assert!(
                b.token > a.token,
                "{key}: token {} granted after token {}",
                b.token,
                a.token
            );
        }
    }
}

/// The longest time without a grant in `[from, to]`.
fn longest_gap(holds: &[Hold], from: Instant, to: Instant) -> Duration {
    let mut starts: Vec<Instant> = holds
        .iter()
        .map(|h| h.start)
        .filter(|s| *s >= from && *s <= to)
        .collect();
    starts.sort();
    let mut gap = Duration::ZERO;
    let mut previous = from;
    for start in starts {
        gap = gap.max(start - previous);
        previous = start;
    }
    gap.max(to - previous)
}

/// A lock-server process on `endpoints`, keys under `prefix`.
fn spawn_replica(
    name: &str,
    endpoints: &[String],
    prefix: &str,
    logs: &std::path::Path,
) -> (ServiceProcess, Api) {
    let port = free_port();
    let mut env = vec![
        ("LOCK_BACKEND", "etcd".to_owned()),
        ("LOCK_ETCD_ENDPOINTS", endpoints.join(",")),
        ("LOCK_ETCD_PREFIX", prefix.to_owned()),
        ("LOCK_SERVER_BIND", format!("127.0.0.1:{port}")),
        ("LOCK_TTL_MIN", "50ms".to_owned()),
        ("LOG_FORMAT", "json".to_owned()),
    ];
    env.extend(test_support::keys::lock_server_env());
    let process = ServiceProcess::spawn(name, BIN, &[], &env, logs);
    let api = Api::with_credential(
        format!("http://127.0.0.1:{port}"),
        Some(test_support::keys::LOCK_CLIENT_TOKEN),
    );
    (process, api)
}

/// What one fault did to the service, as the clients saw it.
#[derive(Debug)]
struct FaultFigures {
    fault: &'static str,
    longest_gap: Duration,
    grants_during: usize,
}

/// Waits for `GRANTS_PER_PHASE` grants after `since`.
async fn wait_for_grants(observed: &Observed, since: Instant, what: &str) {
    poll_until(what, PHASE_DEADLINE, || async {
        (observed.grants_after(since) >= GRANTS_PER_PHASE).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_clients_through_two_replicas_survive_etcd_leader_kill_and_pause() {
    let logs = tempfile::tempdir().unwrap();
    let mut cluster = EtcdCluster::start(3, logs.path()).await.unwrap();
    let endpoints = cluster.endpoints();
    // Both replicas share one prefix: one lock service.
    let prefix = test_support::etcd::fresh_prefix();
    let replicas: Vec<(ServiceProcess, Api)> = ["lock-server-1", "lock-server-2"]
        .iter()
        .map(|name| spawn_replica(name, &endpoints, &prefix, logs.path()))
        .collect();
    for (_, api) in &replicas {
        wait_until_ok(
            "a lock-server replica on etcd to become ready",
            &format!("{}/health/ready", api.base),
            Duration::from_secs(20),
        )
        .await;
    }

    let observed = Arc::new(Observed::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        let api = replicas[i % replicas.len()].1.clone();
        clients.spawn(client(i, api, observed.clone(), stop.clone()));
    }
    let began = Instant::now();
    wait_for_grants(&observed, began, "grants before any fault").await;

    let mut figures = Vec::new();
    // 1. SIGKILL the leader; the two survivors elect another.
    let leader = cluster.leader(Duration::from_secs(10)).await.unwrap();
    let killed_at = Instant::now();
    cluster.kill(leader).await;
    wait_for_grants(&observed, killed_at, "grants after the leader was killed").await;
    let recovered = Instant::now();
    figures.push(FaultFigures {
        fault: "SIGKILL leader",
        longest_gap: observed.longest_gap(killed_at, recovered),
        grants_during: observed.grants_after(killed_at),
    });
    cluster.restart(leader);
    cluster.wait_member_healthy(leader).await;

    // 2. SIGSTOP the (new) leader: it holds its connections open and answers nothing.
    let leader = cluster.leader(Duration::from_secs(10)).await.unwrap();
    let paused_at = Instant::now();
    cluster.signal(leader, Signal::SIGSTOP);
    wait_for_grants(&observed, paused_at, "grants while the leader is paused").await;
    let recovered = Instant::now();
    figures.push(FaultFigures {
        fault: "SIGSTOP leader",
        longest_gap: observed.longest_gap(paused_at, recovered),
        grants_during: observed.grants_after(paused_at),
    });
    cluster.signal(leader, Signal::SIGCONT);
    cluster.wait_member_healthy(leader).await;
    let resumed_at = Instant::now();
    wait_for_grants(&observed, resumed_at, "grants after the old leader resumed").await;

    stop.store(true, Ordering::Relaxed);
    clients.join_all().await;
    let holds = observed.holds.lock().unwrap().clone();
    let unexpected = observed.unexpected.lock().unwrap().clone();
    assert!(unexpected.is_empty(), "unexpected answers: {unexpected:?}");
    check_history(&holds);
    eprintln!(
        "etcd failover: {} grants in {:.1} s, {} answers 503 (retried)",
        holds.len(),
        began.elapsed().as_secs_f64(),
        observed.unavailable.load(Ordering::Relaxed)
    );
    for f in &figures {
        eprintln!(
            "  {}: longest time without a grant {} ms, {} grants until recovery was declared",
            f.fault,
            f.longest_gap.as_millis(),
            f.grants_during
        );
        assert!(
            f.longest_gap <= ANSWERS_AGAIN_WITHIN,
            "{}: no grant for {:?} (bound {ANSWERS_AGAIN_WITHIN:?})",
            f.fault,
            f.longest_gap
        );
    }
    drop(replicas);
}
