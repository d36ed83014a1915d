//! `harness bench locks`: the lock-server against raw PostgreSQL, in one run.
//!
//! Starts a durable throwaway PostgreSQL (or uses `DATABASE_URL`), the real lock-server
//! binary on it, then for two workloads (distinct keys, one hot key) runs N HTTP clients doing
//! acquire+release cycles for a fixed time, and `pgbench` issuing the same SQL
//! (`lock_acquire(...)`, then the compare-and-delete) with N clients for the same time.
//! Prints throughput, p50/p99 latency and the ratio ours/pgbench; then measures the
//! lock-server's resident memory with many open sessions each holding one lock.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection};
use test_support::pg::{DURABLE_SETTINGS, ThrowawayCluster, with_database};

use crate::stack::start_lock_server;

/// Options of `harness bench locks`.
#[derive(Debug, Clone, clap::Args)]
pub struct LockBenchOptions {
    /// Concurrent clients (HTTP tasks and pgbench clients alike).
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Seconds per workload and side.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Open sessions, each holding one lock, for the memory figure (0 skips it).
    #[arg(long, default_value_t = 10_000)]
    pub sessions: usize,
    /// The store: `postgres` (against pgbench) or `etcd` (against etcd's own lock API at
    /// 1, 8 and 32 clients; `--clients` and `--sessions` do not apply).
    #[arg(long, value_enum, default_value = "postgres")]
    pub backend: BenchBackend,
}

/// The store `harness bench locks` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchBackend {
    /// PostgreSQL, against pgbench running the same SQL.
    Postgres,
    /// etcd, against etcd's own lock API.
    Etcd,
}

/// Lease used by benchmark grants: long enough never to expire during a run.
pub(crate) const BENCH_LEASE_MS: u64 = 30_000;
/// Concurrency while opening the memory-figure sessions.
const SETUP_CONCURRENCY: usize = 32;

/// Throughput and latency of one side of one workload.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// Completed cycles per second.
    pub per_second: f64,
    /// Median cycle latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile cycle latency, milliseconds.
    pub p99_ms: f64,
}

pub(crate) fn figures(mut latencies_us: Vec<u64>, elapsed: Duration) -> Figures {
    latencies_us.sort_unstable();
    let pick = |q: f64| -> f64 {
        if latencies_us.is_empty() {
            return f64::NAN;
        }
        let index = ((latencies_us.len() as f64 - 1.0) * q).round() as usize;
        latencies_us[index] as f64 / 1000.0
    };
    Figures {
        per_second: latencies_us.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: pick(0.50),
        p99_ms: pick(0.99),
    }
}

/// Runs the whole benchmark and prints the report.
pub async fn run_locks(options: &LockBenchOptions) -> anyhow::Result<()> {
    if options.backend == BenchBackend::Etcd {
        return crate::bench_etcd::run(options).await;
    }
    let work = tempfile::Builder::new().prefix("lock-bench-").tempdir()?;
    let (_cluster, base_url, pgbench) = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => (None, url, "pgbench".into()),
        _ => {
            let cluster = ThrowawayCluster::start(DURABLE_SETTINGS).map_err(anyhow::Error::msg)?;
            let url = cluster.url("postgres");
            let pgbench = cluster.bin_dir().join("pgbench");
            (Some(cluster), url, pgbench)
        }
    };
    let mut admin = PgConnection::connect(&base_url)
        .await
        .context("connect to PostgreSQL")?;
    admin.execute("DROP DATABASE IF EXISTS lockbench").await?;
    admin.execute("CREATE DATABASE lockbench").await?;
    let db_url = with_database(&base_url, "lockbench");
    let sync: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut admin)
        .await?;
    println!(
        "PostgreSQL synchronous_commit = {sync}; {} clients, {} s per side",
        options.clients, options.seconds
    );

    let server = start_lock_server(
        "lock-server",
        &db_url,
        &[
            ("LOCK_DB_MAX_CONNECTIONS", options.clients.to_string()),
            ("LOCK_SESSION_TTL", "60s".into()),
            ("RUST_LOG", "warn".into()),
        ],
        work.path(),
    )
    .await?;
    let base = server.url.clone();
    let http = crate::stack::lock_http(test_support::keys::LOCK_CLIENT_TOKEN)?;

    let mut db = PgConnection::connect(&db_url).await?;
    let duration = Duration::from_secs(options.seconds);
    println!(
        "\n| workload | side | cycles/s | p50 ms | p99 ms | ratio ours/pgbench |\n|---|---|---|---|---|---|"
    );
    for hot in [false, true] {
        let workload = if hot { "hot key" } else { "distinct keys" };
        db.execute("DELETE FROM locks").await?;
        let ours = http_side(&http, &base, options.clients, duration, hot).await?;
        db.execute("DELETE FROM locks").await?;
        let theirs = pgbench_side(
            &pgbench,
            &db_url,
            &mut db,
            options.clients,
            duration,
            hot,
            work.path(),
        )
        .await?;
        let ratio = ours.per_second / theirs.per_second;
        println!(
            "| {workload} | lock-server over HTTP | {:.0} | {:.2} | {:.2} | {ratio:.2} |",
            ours.per_second, ours.p50_ms, ours.p99_ms
        );
        println!(
            "| {workload} | pgbench, same SQL | {:.0} | {:.2} | {:.2} | 1.00 |",
            theirs.per_second, theirs.p50_ms, theirs.p99_ms
        );
    }
    if options.sessions > 0 {
        memory_side(&http, &base, &server.process, options.sessions).await?;
    }
    drop(server);
    Ok(())
}

async fn http_side(
    http: &reqwest::Client,
    base: &str,
    clients: usize,
    duration: Duration,
    hot: bool,
) -> anyhow::Result<Figures> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let (http, base) = (http.clone(), base.to_owned());
        tasks.spawn(async move {
            let session = open_session(&http, &base, &format!("bench-{client}")).await?;
            let key = if hot {
                "bench.hot".to_owned()
            } else {
                format!("bench.{client}")
            };
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let begun = Instant::now();
                let response = http
                    .post(format!("{base}/v1/locks/{key}/acquire"))
                    .json(&json!({"session_id": session, "ttl_ms": BENCH_LEASE_MS}))
                    .send()
                    .await?;
                let status = response.status();
                let body: Value = response.json().await?;
                if status == StatusCode::OK {
                    let token = body["fencing_token"]
                        .as_u64()
                        .context("grant without token")?;
                    http.post(format!("{base}/v1/locks/{key}/release"))
                        .json(&json!({"session_id": session, "fencing_token": token}))
                        .send()
                        .await?
                        .error_for_status()?;
                } else if status != StatusCode::CONFLICT {
                    bail!("acquire answered {status}: {body}");
                }
                latencies.push(begun.elapsed().as_micros() as u64);
            }
            anyhow::Ok(latencies)
        });
    }
    let mut all = Vec::new();
    for result in tasks.join_all().await {
        all.extend(result?);
    }
    Ok(figures(all, started.elapsed()))
}

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

/// The SQL our lock-server issues per cycle, as a pgbench script.
fn pgbench_script(hot: bool) -> String {
    let key = if hot {
        "'bench.hot'".to_owned()
    } else {
        "'bench.' || :client_id".to_owned()
    };
    format!(
        "SELECT CASE WHEN outcome = 'GRANTED' THEN fencing_token ELSE 0 END AS tok \
         FROM lock_acquire({key}, ('00000000-0000-4000-8000-' || lpad(:client_id::text, 12, '0'))::uuid, {BENCH_LEASE_MS}) \\gset\n\
         \\if :tok > 0\n\
         DELETE FROM locks WHERE lock_key = {key} AND fencing_token = :tok;\n\
         \\endif\n"
    )
}

async fn pgbench_side(
    pgbench: &Path,
    db_url: &str,
    db: &mut PgConnection,
    clients: usize,
    duration: Duration,
    hot: bool,
    work: &Path,
) -> anyhow::Result<Figures> {
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
    let script = work.join(if hot { "hot.sql" } else { "distinct.sql" });
    std::fs::write(&script, pgbench_script(hot))?;
    let logs = work.join(if hot {
        "pgbench-hot"
    } else {
        "pgbench-distinct"
    });
    std::fs::create_dir_all(&logs)?;
    let prefix = logs.join("log");
    let mut command = std::process::Command::new(pgbench);
    command
        .args([
            "-n",
            "-M",
            "prepared",
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-T",
            &duration.as_secs().to_string(),
            "-l",
        ])
        .arg(format!("--log-prefix={}", prefix.display()))
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
    let mut latencies = Vec::new();
    for entry in std::fs::read_dir(&logs)? {
        let text = std::fs::read_to_string(entry?.path())?;
        for line in text.lines() {
            // client_id transaction_no time_us script_no time_epoch time_us_fraction
            if let Some(us) = line
                .split_whitespace()
                .nth(2)
                .and_then(|v| v.parse::<u64>().ok())
            {
                latencies.push(us);
            }
        }
    }
    Ok(figures(latencies, duration))
}

fn rss_kib(server: &crate::stack::Proc) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid()))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS in /proc status")
}

async fn memory_side(
    http: &reqwest::Client,
    base: &str,
    server: &crate::stack::Proc,
    sessions: usize,
) -> anyhow::Result<()> {
    let before = rss_kib(server)?;
    let started = Instant::now();
    let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(SETUP_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..sessions {
        let (http, base, semaphore) = (http.clone(), base.to_owned(), semaphore.clone());
        tasks.spawn(async move {
            let _permit = semaphore.acquire_owned().await?;
            let session = open_session(&http, &base, &format!("mem-{i}")).await?;
            http.post(format!("{base}/v1/locks/mem:{i}/acquire"))
                .json(&json!({"session_id": session, "ttl_ms": 60_000}))
                .send()
                .await?
                .error_for_status()?;
            anyhow::Ok(())
        });
    }
    for result in tasks.join_all().await {
        result?;
    }
    let after = rss_kib(server)?;
    println!(
        "\nlock-server resident memory: {:.1} MiB idle, {:.1} MiB with {sessions} open sessions each holding one lock (set up in {:.1} s)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Options of `harness bench pipeline`.
#[derive(Debug, Clone, clap::Args)]
pub struct PipelineBenchOptions {
    /// Payouts per run.
    #[arg(long, default_value_t = 300)]
    pub payouts: usize,
    /// Executor counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub executors: Vec<usize>,
}

/// Payouts per second through the whole pipeline with 1, 2 and 4 executors, each on a fresh
/// stack, timed from the executors' start until every payout is terminal.
pub async fn run_pipeline(options: &PipelineBenchOptions) -> anyhow::Result<()> {
    println!(
        "| executors | payouts | seconds | payouts/s | ratio to 1 executor |\n|---|---|---|---|---|"
    );
    let mut baseline = None;
    for &count in &options.executors {
        let mut stack =
            crate::stack::Stack::start(crate::stack::StackOptions::default(), None).await?;
        let ids = stack
            .create_payouts(&format!("bench-{count}"), options.payouts)
            .await?;
        let started = Instant::now();
        for i in 0..count {
            stack
                .start_executor(&format!("executor-{i}"), &[("RUST_LOG", "warn".to_owned())])
                .await?;
        }
        stack.wait_terminal(&ids, Duration::from_secs(600)).await?;
        let seconds = started.elapsed().as_secs_f64();
        let rate = options.payouts as f64 / seconds;
        let base = *baseline.get_or_insert(rate);
        println!(
            "| {count} | {} | {seconds:.2} | {rate:.1} | {:.2} |",
            options.payouts,
            rate / base
        );
    }
    Ok(())
}
