//! The load generators of `harness bench locks`, one per side of the table, each counting
//! what a user gets: granted locks, the refusals on the way, the acquires that gave up, how
//! long each grant was waited for, and how evenly the grants went round the clients.
//!
//! - [`sdk_side`]: one `LockClient` and session per client, `acquire` with
//!   `AcquirePolicy::DEFAULT` (its own jittered retries within a 2 s budget), then `release`:
//!   the path users take. [`sdk_side_with`] takes another policy (`harness bench python`), [`claim_side`] another claim (`bench_shares`).
//! - [`http_side`]: raw acquire and release over HTTP, a refused acquire retried at once.
//! - [`pgbench_side`]: the lock-server's own SQL driven by `pgbench`.
//! - [`etcd_lock_side`]: etcd's lock API (`lock` with a lease, `unlock`): etcd queues waiters.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use etcd_client::{Client, LockOptions};
use lock_api::{Claim, LockKey};
use lock_client::{AcquirePolicy, ClientBuilder};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{Executor, PgConnection};

/// Lease used by benchmark grants: long enough never to expire during a run.
pub(crate) const BENCH_LEASE_MS: u64 = 30_000;
/// TTL of each etcd-lock client's lease (seconds): longer than any run.
const ETCD_LOCK_LEASE_SECONDS: i64 = 60;

/// What one client got.
#[derive(Debug, Default, Clone)]
pub struct ClientTally {
    /// Locks granted (and released).
    pub granted: u64,
    /// Acquire attempts refused with `LOCK_HELD` on the way (raw HTTP, pgbench).
    pub refused: u64,
    /// Acquires that gave up: the SDK's budget ran out under contention.
    pub gave_up: u64,
    /// Per grant: microseconds from the cycle's first attempt to the grant.
    pub waits_us: Vec<u64>,
    /// Per grant: microseconds from the cycle's first attempt to its release answered.
    pub cycles_us: Vec<u64>,
}

/// One side of one workload, summed over its clients.
#[derive(Debug, Clone)]
pub struct SideFigures {
    /// Granted locks.
    pub granted: u64,
    /// Granted locks per second.
    pub granted_per_s: f64,
    /// Refused attempts per second (`None`: the side cannot see them).
    pub refused_per_s: Option<f64>,
    /// Acquires that gave up.
    pub gave_up: u64,
    /// Acquire wait percentiles and maximum, milliseconds (`None`: not measured).
    pub wait_ms: Option<[f64; 3]>,
    /// Most grants of one client over fewest (infinite when a client got none).
    pub fairness: f64,
    /// A whole cycle (acquire and release), milliseconds: percentiles 0, 1, ..., 100
    /// (empty: not measured). `cycle_ms[50]` is the median.
    pub cycle_ms: Vec<f64>,
}

/// Percentiles a side keeps of its cycles: 0, 1, ..., 100.
const CYCLE_PERCENTILES: usize = 101;

/// The `q` quantile (0..=1) of `sorted`, in milliseconds (`sorted` in µs, not empty).
fn quantile_ms(sorted: &[u64], q: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index] as f64 / 1000.0
}

impl SideFigures {
    /// Sums `tallies` over `elapsed`.
    pub fn of(tallies: &[ClientTally], elapsed: Duration, sees_refusals: bool) -> Self {
        let seconds = elapsed.as_secs_f64();
        let granted: u64 = tallies.iter().map(|t| t.granted).sum();
        let refused: u64 = tallies.iter().map(|t| t.refused).sum();
        let mut waits: Vec<u64> = tallies.iter().flat_map(|t| t.waits_us.clone()).collect();
        waits.sort_unstable();
        let pick = |q: f64| quantile_ms(&waits, q);
        let mut cycles: Vec<u64> = tallies.iter().flat_map(|t| t.cycles_us.clone()).collect();
        cycles.sort_unstable();
        let cycle_ms = match cycles.is_empty() {
            true => Vec::new(),
            false => (0..CYCLE_PERCENTILES)
                .map(|p| quantile_ms(&cycles, p as f64 / 100.0))
                .collect(),
        };
        let most = tallies.iter().map(|t| t.granted).max().unwrap_or(0);
        let fewest = tallies.iter().map(|t| t.granted).min().unwrap_or(0);
        Self {
            granted,
            granted_per_s: granted as f64 / seconds,
            refused_per_s: sees_refusals.then(|| refused as f64 / seconds),
            gave_up: tallies.iter().map(|t| t.gave_up).sum(),
            wait_ms: (!waits.is_empty()).then(|| [pick(0.50), pick(0.99), pick(1.0)]),
            fairness: if fewest == 0 {
                f64::INFINITY
            } else {
                most as f64 / fewest as f64
            },
            cycle_ms,
        }
    }

    /// The cycle's median and 99th percentile, milliseconds, when measured.
    pub fn cycle_p50_p99_ms(&self) -> Option<[f64; 2]> {
        (!self.cycle_ms.is_empty()).then(|| [self.cycle_ms[50], self.cycle_ms[99]])
    }
}

/// The key client `client` cycles on.
pub fn key_of(hot: bool, client: usize) -> String {
    if hot {
        "bench.hot".to_owned()
    } else {
        format!("bench.{client}")
    }
}

/// Joins the clients' tasks; the elapsed time runs until the last one finished (an SDK
/// acquire begun before the deadline may run into its budget past it).
pub(crate) async fn join(
    started: Instant,
    mut tasks: tokio::task::JoinSet<anyhow::Result<ClientTally>>,
) -> anyhow::Result<(Vec<ClientTally>, Duration)> {
    let mut tallies = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        tallies.push(joined??);
    }
    Ok((tallies, started.elapsed()))
}

/// Through the SDK: one `LockClient` (one heartbeat thread) and one session per client,
/// each acquire with `AcquirePolicy::DEFAULT`.
pub async fn sdk_side(
    config: &ClientBuilder,
    clients: usize,
    duration: Duration,
    hot: bool,
) -> anyhow::Result<SideFigures> {
    sdk_side_with(config, clients, duration, hot, AcquirePolicy::DEFAULT).await
}

/// As [`sdk_side`], each acquire with `policy` (`TRY_ONCE`: what `wait=0` asks of the Python
/// SDK).
pub async fn sdk_side_with(
    config: &ClientBuilder,
    clients: usize,
    duration: Duration,
    hot: bool,
    policy: AcquirePolicy,
) -> anyhow::Result<SideFigures> {
    let key_for = move |client| key_of(hot, client);
    claim_side(config, clients, duration, key_for, Claim::Exclusive, policy).await
}

/// `clients` clients, each with its own `LockClient` and session, taking `key_for(client)`
/// as `claim` with `policy` and releasing it for `duration`: cycles per second, the acquires
/// that gave up, and the waits.
pub async fn claim_side(
    config: &ClientBuilder,
    clients: usize,
    duration: Duration,
    key_for: impl Fn(usize) -> String,
    claim: Claim,
    policy: AcquirePolicy,
) -> anyhow::Result<SideFigures> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let (config, key) = (config.clone(), LockKey::parse(key_for(client))?);
        tasks.spawn(async move {
            let lock_client = config.build()?;
            let session = lock_client.open_session(&format!("bench-{client}")).await?;
            let lease = Duration::from_millis(BENCH_LEASE_MS);
            let mut tally = ClientTally::default();
            while Instant::now() < deadline {
                let begun = Instant::now();
                match session.acquire_claim(&key, claim, lease, &policy).await? {
                    Some(handle) => {
                        tally.waits_us.push(begun.elapsed().as_micros() as u64);
                        session.release(handle).await.map_err(|lost| {
                            anyhow::anyhow!("a benchmark grant was lost: {lost:?}")
                        })?;
                        tally.cycles_us.push(begun.elapsed().as_micros() as u64);
                        tally.granted += 1;
                    }
                    None => tally.gave_up += 1,
                }
            }
            session.close().await;
            tokio::task::spawn_blocking(move || lock_client.close()).await?;
            anyhow::Ok(tally)
        });
    }
    let (tallies, elapsed) = join(started, tasks).await?;
    Ok(SideFigures::of(&tallies, elapsed, false))
}

/// Opens a session over raw HTTP.
pub(crate) async fn open_session(
    http: &reqwest::Client,
    base: &str,
    owner: &str,
) -> anyhow::Result<String> {
    let body: Value = http
        .post(format!("{base}/v1/sessions"))
        .json(&json!({"owner_id": owner, "ttl_ms": 60_000}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    body["session_id"]
        .as_str()
        .map(str::to_owned)
        .context("no session_id")
}

/// Raw HTTP: acquire, and on a 409 acquire again at once; release after each grant.
pub async fn http_side(
    http: &reqwest::Client,
    base: &str,
    clients: usize,
    duration: Duration,
    hot: bool,
) -> anyhow::Result<SideFigures> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let (http, base, key) = (http.clone(), base.to_owned(), key_of(hot, client));
        tasks.spawn(async move {
            let session = open_session(&http, &base, &format!("bench-{client}")).await?;
            let mut tally = ClientTally::default();
            let mut begun = Instant::now();
            while Instant::now() < deadline {
                let response = http
                    .post(format!("{base}/v1/locks/{key}/acquire"))
                    .json(&json!({"session_id": session, "ttl_ms": BENCH_LEASE_MS}))
                    .send()
                    .await?;
                let status = response.status();
                let body: Value = response.json().await?;
                if status == StatusCode::CONFLICT {
                    tally.refused += 1;
                    continue; // the cycle's clock keeps running
                }
                if status != StatusCode::OK {
                    bail!("acquire answered {status}: {body}");
                }
                tally.waits_us.push(begun.elapsed().as_micros() as u64);
                let token = body["fencing_token"]
                    .as_u64()
                    .context("grant without token")?;
                http.post(format!("{base}/v1/locks/{key}/release"))
                    .json(&json!({"session_id": session, "fencing_token": token}))
                    .send()
                    .await?
                    .error_for_status()?;
                tally.cycles_us.push(begun.elapsed().as_micros() as u64);
                tally.granted += 1;
                begun = Instant::now();
            }
            anyhow::Ok(tally)
        });
    }
    let (tallies, elapsed) = join(started, tasks).await?;
    Ok(SideFigures::of(&tallies, elapsed, true))
}

/// The SQL the lock-server issues per cycle, as a pgbench script.
fn pgbench_script(hot: bool) -> String {
    let key = if hot {
        "'bench.hot'".to_owned()
    } else {
        "'bench.' || :client_id".to_owned()
    };
    format!(
        "SELECT CASE WHEN outcome = 'GRANTED' THEN fencing_token ELSE 0 END AS tok \
         FROM lock_acquire({key}, ('00000000-0000-4000-8000-' || lpad(:client_id::text, 12, '0'))::uuid, {BENCH_LEASE_MS}, 0, 0, 0) \\gset\n\
         \\if :tok > 0\n\
         DELETE FROM locks WHERE lock_key = {key} AND fencing_token = :tok;\n\
         \\endif\n"
    )
}

/// Sum of the bench keys' last tokens: each grant raises its key's by one.
async fn tokens_drawn(db: &mut PgConnection) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(sum(last_token), 0)::bigint FROM lock_fences WHERE lock_key LIKE 'bench.%'",
    )
    .fetch_one(&mut *db)
    .await?)
}

/// pgbench running the same SQL with `clients` clients. Grants are counted from the
/// fences (each raises its key's last token by one), refusals are the other transactions;
/// pgbench's per-transaction log gives no wait per grant, and no client split.
pub async fn pgbench_side(
    pgbench: &Path,
    db_url: &str,
    db: &mut PgConnection,
    clients: usize,
    duration: Duration,
    hot: bool,
    work: &Path,
) -> anyhow::Result<SideFigures> {
    db.execute("DELETE FROM lock_sessions WHERE owner_id = 'pgbench'")
        .await?;
    sqlx::query(
        "INSERT INTO lock_sessions (session_id, owner_id, ttl_ms, expires_at)
         SELECT ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid, 'pgbench', 3600000, now() + interval '1 hour'
           FROM generate_series(0, $1 - 1) AS i",
    )
    .bind(clients as i64)
    .execute(&mut *db)
    .await?;
    let name = format!("pgbench-{clients}-{}", if hot { "hot" } else { "distinct" });
    let script = work.join(format!("{name}.sql"));
    std::fs::write(&script, pgbench_script(hot))?;
    let logs = work.join(&name);
    std::fs::create_dir_all(&logs)?;
    let before = tokens_drawn(db).await?;
    let mut command = std::process::Command::new(pgbench);
    command
        .args(["-n", "-M", "prepared", "-c", &clients.to_string()])
        .args(["-j", &clients.min(2).to_string()])
        .args(["-T", &duration.as_secs().to_string(), "-l"])
        .arg(format!("--log-prefix={}", logs.join("log").display()))
        .arg("-f")
        .arg(&script)
        .arg(db_url)
        .current_dir(work);
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    if !output.status.success() {
        bail!(
            "pgbench failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let granted = u64::try_from(tokens_drawn(db).await? - before)?;
    // Each log line is a transaction: `client_id transaction_no elapsed_us ...`.
    let mut cycles_us = Vec::new();
    for entry in std::fs::read_dir(&logs)? {
        for line in std::fs::read_to_string(entry?.path())?.lines() {
            let elapsed_us = line.split_whitespace().nth(2).and_then(|f| f.parse().ok());
            cycles_us.push(elapsed_us.context("a pgbench log line without its latency")?);
        }
    }
    let transactions = cycles_us.len() as u64;
    let tally = ClientTally {
        granted,
        refused: transactions.saturating_sub(granted),
        // A refused transaction is no cycle: only distinct keys (all granted) give cycles.
        cycles_us: if transactions == granted {
            cycles_us
        } else {
            Vec::new()
        },
        ..ClientTally::default()
    };
    let mut figures = SideFigures::of(&[tally], duration, true);
    figures.fairness = f64::NAN; // pgbench's log is per transaction, not per grant
    Ok(figures)
}

/// etcd's own lock API: `lock` (queued by etcd) with one lease per client, then `unlock`.
pub async fn etcd_lock_side(
    etcd: &Client,
    clients: usize,
    duration: Duration,
    hot: bool,
) -> anyhow::Result<SideFigures> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let (mut etcd, name) = (
            etcd.clone(),
            format!("/etcd-lock-bench/{}", key_of(hot, client)),
        );
        tasks.spawn(async move {
            let lease = etcd.lease_grant(ETCD_LOCK_LEASE_SECONDS, None).await?.id();
            let mut tally = ClientTally::default();
            loop {
                let begun = Instant::now();
                if begun >= deadline {
                    break;
                }
                let locked = tokio::time::timeout(
                    deadline - begun,
                    etcd.lock(name.as_str(), Some(LockOptions::new().with_lease(lease))),
                )
                .await;
                let Ok(locked) = locked else {
                    break; // still queued when the time ran out: not a grant
                };
                let key = locked?.key().to_vec();
                tally.waits_us.push(begun.elapsed().as_micros() as u64);
                etcd.unlock(key).await?;
                tally.cycles_us.push(begun.elapsed().as_micros() as u64);
                tally.granted += 1;
            }
            etcd.lease_revoke(lease).await?;
            anyhow::Ok(tally)
        });
    }
    let (tallies, elapsed) = join(started, tasks).await?;
    Ok(SideFigures::of(&tallies, elapsed, false))
}

/// Waiting acquires parked at once for the waiters-memory figure; the goal names 1,000.
pub const PARKED_WAITERS: usize = 1_000;
/// How long each parked acquire asks to wait: under the bench server's `lock.max.wait`.
const PARKED_WAIT_MS: u64 = 3_000;

/// Parks `count` waiting acquires on `key` (held by another session) and returns once the
/// lock-server's inspect shows them all queued; the tasks end when their wait does (409). The
/// caller reads the lock-server's memory meanwhile.
pub async fn park_waiters(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    count: usize,
) -> anyhow::Result<tokio::task::JoinSet<anyhow::Result<()>>> {
    let holder = open_session(http, base, "waiters-holder").await?;
    http.post(format!("{base}/v1/locks/{key}/acquire"))
        .json(&json!({"session_id": holder, "ttl_ms": 60_000}))
        .send()
        .await?
        .error_for_status()?;
    let mut sessions = Vec::with_capacity(count);
    for i in 0..count {
        sessions.push(open_session(http, base, &format!("waiter-{i}")).await?);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for session in sessions {
        let (http, url) = (http.clone(), format!("{base}/v1/locks/{key}/acquire"));
        tasks.spawn(async move {
            let status = http
                .post(url)
                .json(&json!({"session_id": session, "ttl_ms": 60_000, "wait_ms": PARKED_WAIT_MS}))
                .send()
                .await?
                .status();
            anyhow::ensure!(
                status == StatusCode::CONFLICT,
                "a parked L4 answered {status}"
            );
            Ok(())
        });
    }
    test_support::poll_until(
        "every waiter to be queued",
        Duration::from_millis(PARKED_WAIT_MS),
        || async {
            let body: Value = http
                .get(format!("{base}/v1/locks/{key}"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (body["waiters"].as_u64()? >= count as u64).then_some(())
        },
    )
    .await;
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_count_grants_refusals_waits_and_fairness() {
        let tallies = [
            ClientTally {
                granted: 3,
                refused: 5,
                gave_up: 1,
                waits_us: vec![1_000, 2_000, 3_000],
                cycles_us: vec![2_000, 4_000, 6_000],
            },
            ClientTally {
                granted: 1,
                refused: 1,
                gave_up: 0,
                waits_us: vec![10_000],
                cycles_us: vec![20_000],
            },
        ];
        let figures = SideFigures::of(&tallies, Duration::from_secs(2), true);
        assert_eq!(figures.granted_per_s, 2.0);
        assert_eq!(figures.refused_per_s, Some(3.0));
        assert_eq!(figures.gave_up, 1);
        assert_eq!(figures.wait_ms, Some([3.0, 10.0, 10.0]));
        assert_eq!(figures.fairness, 3.0);
        assert_eq!(figures.cycle_p50_p99_ms(), Some([6.0, 20.0]));
        assert_eq!(figures.cycle_ms.len(), 101);
        assert_eq!(figures.cycle_ms[0], 2.0);
        let starved = [ClientTally::default(), tallies[0].clone()];
        assert!(
            SideFigures::of(&starved, Duration::from_secs(1), false)
                .fairness
                .is_infinite()
        );
    }
}
