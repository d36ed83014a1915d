//! `harness bench locks`: what users get from the lock service, side by side in one run.
//!
//! Starts a durable store — a throwaway PostgreSQL with fsync and synchronous commit on (or
//! `DATABASE_URL`), or with `--backend etcd` one etcd member with its data on disk — and the
//! real lock-server binary on it. Then for each client count (`--clients`, default 1, 8, 32)
//! and two workloads (distinct keys: client *i* cycles on `bench.i`; hot: everyone on
//! `bench.hot`) each side cycles acquire + release for `--seconds`, one side after the
//! other: through the SDK, over raw HTTP, `pgbench` running the lock-server's own SQL
//! (PostgreSQL only), and etcd's own lock API (whenever an `etcd` binary is installed; on
//! the same etcd with `--backend etcd`). The table counts granted locks per second, refusals
//! separately, acquires that gave up, the acquire wait (p50, p99, max) and fairness (most
//! grants of one client over fewest); load generators in `bench_load`. Last, the
//! lock-server's resident memory with many open sessions each holding a lock.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use lock_client::ClientBuilder;
use serde_json::json;
use sqlx::{Connection, Executor, PgConnection};
use test_support::etcd::EtcdCluster;
use test_support::pg::{DURABLE_SETTINGS, ThrowawayCluster, with_database};

use crate::bench_load::{self, SideFigures, open_session};
use crate::stack::{LockServer, LockStoreAt, TlsFiles, spawn_lock_server_at};

/// Options of `harness bench locks`.
#[derive(Debug, Clone, clap::Args)]
pub struct LockBenchOptions {
    /// Client counts: each side runs each count with that many concurrent clients.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub clients: Vec<usize>,
    /// Seconds per client count, workload and side.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Open sessions, each holding one lock, for the memory figure (0 skips it).
    #[arg(long, default_value_t = 10_000)]
    pub sessions: usize,
    /// The lock-server's store: `postgres` (with pgbench on the same SQL) or `etcd` (one
    /// member; etcd's own lock API on the same etcd).
    #[arg(long, value_enum, default_value = "postgres")]
    pub backend: BenchBackend,
    /// PostgreSQL: the second lock-server the SDK side also runs against, in the same run.
    #[arg(long, value_enum, default_value = "before")]
    pub baseline: Baseline,
    /// Also run the SDK side against a third lock-server on the same store serving HTTPS (a
    /// CA of the run's own): the cost of TLS, in the same run.
    #[arg(long)]
    pub tls: bool,
    /// Only the tables of the primitives beyond a lock: key sets (two keys at once, as a set
    /// and as two ordered acquires), permits and shared holds (one hot key, against a lock).
    #[arg(long)]
    pub primitives_only: bool,
}

/// The baseline lock-server of a PostgreSQL run: the same store and build, with group commit
/// or hand-over (or both) off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Baseline {
    /// Both off: each write its own commit, a freed key's head waiter woken to ask.
    Before,
    /// Each write its own commit; hand-over on.
    CommitPerWrite,
    /// Group commit on; a freed key's head waiter woken to ask.
    NoHandOver,
}

impl Baseline {
    /// `LOCK_DB_GROUP_COMMIT`, `LOCK_DB_HAND_OVER`.
    fn settings(self) -> [(&'static str, String); 2] {
        let (group_commit, hand_over) = match self {
            Self::Before => (false, false),
            Self::CommitPerWrite => (false, true),
            Self::NoHandOver => (true, false),
        };
        [
            ("LOCK_DB_GROUP_COMMIT", group_commit.to_string()),
            ("LOCK_DB_HAND_OVER", hand_over.to_string()),
        ]
    }

    /// The SDK side's name in the table.
    fn side(self) -> &'static str {
        match self {
            Self::Before => "SDK, before (a commit per write, no hand-over)",
            Self::CommitPerWrite => "SDK, a commit per write",
            Self::NoHandOver => "SDK, no hand-over",
        }
    }
}

/// The store `harness bench locks` runs the lock-server on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchBackend {
    /// PostgreSQL, next to pgbench running the same SQL.
    Postgres,
    /// etcd, next to etcd's own lock API.
    Etcd,
}

/// A benchmark measures the service, not its per-credential limits: every bench server runs
/// with them out of the way (one credential carries the whole load, 10,000 sessions).
pub(crate) fn limits_out_of_the_way(env: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let unlimited = "1000000000".to_owned();
    let mut env = env.to_vec();
    for key in [
        "LIMIT_REQUESTS_PER_SECOND",
        "LIMIT_BURST",
        "LIMIT_SESSIONS",
        "LIMIT_WAITERS",
    ] {
        env.push((key, unlimited.clone()));
    }
    env
}

/// Concurrency while opening the memory-figure sessions.
const SETUP_CONCURRENCY: usize = 32;
/// The lock-server's PostgreSQL pool: enough for the largest client count's calls.
const BENCH_DB_CONNECTIONS: usize = 32;

/// The stores a run needs, kept alive until it ends.
pub(crate) struct Stores {
    _work: tempfile::TempDir,
    _postgres: Option<ThrowawayCluster>,
    /// lockdb's URL and the pgbench binary (PostgreSQL backend).
    pgbench: Option<(String, std::path::PathBuf)>,
    /// The etcd member (whenever an `etcd` binary is installed).
    etcd_member: Option<EtcdCluster>,
    /// A client of the etcd member, for etcd's lock API.
    etcd: Option<etcd_client::Client>,
    /// Where the lock-server keeps its state.
    pub(crate) lock_store: LockStoreAt,
}

impl Stores {
    pub(crate) async fn start(backend: BenchBackend) -> anyhow::Result<Self> {
        let work = tempfile::Builder::new().prefix("lock-bench-").tempdir()?;
        let etcd = match EtcdCluster::start_on_disk(1, work.path()).await {
            Ok(cluster) => Some(cluster),
            Err(err) if backend == BenchBackend::Postgres => {
                println!("no etcd for its lock API ({err}): that column stays empty");
                None
            }
            Err(err) => anyhow::bail!("--backend etcd: {err}"),
        };
        let etcd_client = match &etcd {
            Some(cluster) => Some(
                etcd_client::Client::connect(cluster.endpoints(), None)
                    .await
                    .context("connect to etcd")?,
            ),
            None => None,
        };
        let (postgres, pgbench, lock_store) = match backend {
            BenchBackend::Etcd => {
                let endpoints = etcd
                    .as_ref()
                    .map(EtcdCluster::endpoints)
                    .unwrap_or_default();
                println!("lock-server on etcd (1 member, data on disk)");
                let store = LockStoreAt::Etcd {
                    endpoints,
                    prefix: "/lock-bench/".into(),
                };
                (None, None, store)
            }
            BenchBackend::Postgres => {
                let (cluster, base_url, pgbench) = match std::env::var("DATABASE_URL") {
                    Ok(url) if !url.is_empty() => (None, url, "pgbench".into()),
                    _ => {
                        let cluster = ThrowawayCluster::start(DURABLE_SETTINGS)
                            .map_err(anyhow::Error::msg)?;
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
                let sync: String = sqlx::query_scalar("SHOW synchronous_commit")
                    .fetch_one(&mut admin)
                    .await?;
                let fsync: String = sqlx::query_scalar("SHOW fsync")
                    .fetch_one(&mut admin)
                    .await?;
                println!(
                    "lock-server on PostgreSQL (fsync = {fsync}, synchronous_commit = {sync})"
                );
                let db_url = with_database(&base_url, "lockbench");
                let store = LockStoreAt::Postgres(db_url.clone());
                (cluster, Some((db_url, pgbench)), store)
            }
        };
        Ok(Self {
            _work: work,
            _postgres: postgres,
            pgbench,
            etcd_member: etcd,
            etcd: etcd_client,
            lock_store,
        })
    }

    /// lockdb's URL (PostgreSQL backend).
    pub(crate) fn database_url(&self) -> Option<&str> {
        self.pgbench.as_ref().map(|(url, _)| url.as_str())
    }

    /// The etcd member's client URLs, when one was started.
    pub(crate) fn etcd_endpoints(&self) -> Option<Vec<String>> {
        self.etcd_member.as_ref().map(EtcdCluster::endpoints)
    }
}

/// One row's cells: `-` for what a side cannot measure.
fn row(
    clients: usize,
    keys: &str,
    side: &str,
    f: &SideFigures,
    etcd_rate: Option<f64>,
    server_cpu_us: Option<f64>,
) -> String {
    let opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0}"));
    let [p50, p99, max] = f
        .wait_ms
        .map_or(["-".to_owned(), "-".to_owned(), "-".to_owned()], |w| {
            w.map(|ms| format!("{ms:.1}"))
        });
    let fairness = if f.fairness.is_nan() {
        "-".to_owned()
    } else if f.fairness.is_infinite() {
        "∞ (a client got none)".to_owned()
    } else {
        format!("{:.2}", f.fairness)
    };
    let ratio = etcd_rate.map_or("-".to_owned(), |r| format!("{:.2}", f.granted_per_s / r));
    // The lock-server's CPU per granted lock, refusals on the way included.
    let cpu = server_cpu_us
        .filter(|_| f.granted > 0)
        .map_or("-".to_owned(), |us| format!("{:.0}", us / f.granted as f64));
    format!(
        "| {clients} | {keys} | {side} | {:.0} | {} | {} | {p50} | {p99} | {max} | {fairness} | {ratio} | {cpu} |",
        f.granted_per_s,
        opt(f.refused_per_s),
        f.gave_up
    )
}

/// The stores of `backend` and one lock-server on them, logging to a fresh directory: what
/// the failover and watch benchmarks run on. Dropping it stops the server and the stores.
pub(crate) struct LoneServer {
    pub(crate) server: LockServer,
    /// The server's logs; the benchmark's own files go beside them.
    pub(crate) logs: tempfile::TempDir,
    _stores: Stores,
}

impl LoneServer {
    pub(crate) async fn start(backend: BenchBackend) -> anyhow::Result<Self> {
        let stores = Stores::start(backend).await?;
        let logs = tempfile::Builder::new()
            .prefix("lock-bench-logs-")
            .tempdir()?;
        let server = spawn_lock_server_at(
            "lock-server",
            &stores.lock_store,
            &bench_server_env(&[]),
            logs.path(),
            None,
        )
        .await?;
        Ok(Self {
            server,
            logs,
            _stores: stores,
        })
    }
}

/// The environment every bench lock-server gets, then `extra`, with the limits out of the way.
pub(crate) fn bench_server_env(extra: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("LOCK_DB_MAX_CONNECTIONS", BENCH_DB_CONNECTIONS.to_string()),
        ("LOCK_SESSION_TTL", "60s".into()),
        ("RUST_LOG", "warn".into()),
    ];
    env.extend_from_slice(extra);
    limits_out_of_the_way(&env)
}

/// The lock-servers one run measures, all on the same store.
struct BenchServers {
    /// The lock-server under test.
    main: LockServer,
    /// PostgreSQL: the baseline in the same run, group commit or hand-over off.
    baseline: Option<LockServer>,
    /// With `--tls`: the same server on HTTPS, for the cost of TLS, and its TLS files.
    over_tls: Option<(LockServer, TlsFiles)>,
}

impl BenchServers {
    async fn start(
        options: &LockBenchOptions,
        stores: &Stores,
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        let main = spawn_lock_server_at(
            "lock-server",
            &stores.lock_store,
            &bench_server_env(&[
                // The waiters-memory figure parks 1,000 waiting acquires, each on its own
                // connection.
                ("HTTP_CONNECTIONS_MAX", "4096".into()),
            ]),
            log_dir,
            None,
        )
        .await?;
        let baseline = match options.backend {
            BenchBackend::Postgres => Some(
                spawn_lock_server_at(
                    "lock-server-baseline",
                    &stores.lock_store,
                    &bench_server_env(&options.baseline.settings()),
                    log_dir,
                    None,
                )
                .await?,
            ),
            BenchBackend::Etcd => None,
        };
        let over_tls = match options.tls {
            true => {
                let files = crate::stack::TlsFiles::make(log_dir)?;
                let server = spawn_lock_server_at(
                    "lock-server-tls",
                    &stores.lock_store,
                    &bench_server_env(&[]),
                    log_dir,
                    Some(&files),
                )
                .await?;
                Some((server, files))
            }
            false => None,
        };
        Ok(Self {
            main,
            baseline,
            over_tls,
        })
    }
}

/// What every workload of one run measures with.
struct BenchRun<'a> {
    stores: &'a Stores,
    servers: &'a BenchServers,
    /// A client presenting the client credential, for the raw HTTP side.
    http: reqwest::Client,
    /// The SDK's configuration against the main lock-server.
    sdk_config: ClientBuilder,
    /// How long each side runs.
    duration: Duration,
    log_dir: &'a Path,
    /// The baseline's side name in the table.
    baseline_side: &'static str,
}

impl BenchRun<'_> {
    /// The SDK side with `config` against `server`: its figures and the server's CPU time
    /// spent meanwhile, in µs.
    async fn sdk_side_with_cpu_us(
        &self,
        config: &ClientBuilder,
        server: &LockServer,
        clients: usize,
        hot: bool,
    ) -> anyhow::Result<(SideFigures, f64)> {
        let cpu_before = cpu_micros(server.process.pid())?;
        let sdk = bench_load::sdk_side(config, clients, self.duration, hot).await?;
        let cpu_us = cpu_micros(server.process.pid())? - cpu_before;
        Ok((sdk, cpu_us))
    }

    /// Runs every side on one workload (`clients` clients, `hot` key or distinct keys) and
    /// prints their rows; `db` is lockdb for the pgbench side.
    async fn workload(
        &self,
        clients: usize,
        hot: bool,
        db: Option<&mut PgConnection>,
    ) -> anyhow::Result<()> {
        let keys = if hot { "hot" } else { "distinct" };
        let (servers, duration) = (self.servers, self.duration);
        let etcd = match &self.stores.etcd {
            Some(etcd) => Some(bench_load::etcd_lock_side(etcd, clients, duration, hot).await?),
            None => None,
        };
        let etcd_rate = etcd.as_ref().map(|f| f.granted_per_s);
        let (sdk, cpu_sdk) = self
            .sdk_side_with_cpu_us(&self.sdk_config, &servers.main, clients, hot)
            .await?;
        println!(
            "{}",
            row(clients, keys, "SDK", &sdk, etcd_rate, Some(cpu_sdk))
        );
        if let Some(baseline) = &servers.baseline {
            let config = self.sdk_config.clone().endpoints([baseline.url.clone()]);
            let (sdk, cpu) = self
                .sdk_side_with_cpu_us(&config, baseline, clients, hot)
                .await?;
            let side = self.baseline_side;
            println!("{}", row(clients, keys, side, &sdk, etcd_rate, Some(cpu)));
        }
        if let Some((over_tls, files)) = &servers.over_tls {
            let config = (self.sdk_config.clone())
                .endpoints([over_tls.url.clone()])
                .tls(files.client());
            let (sdk, cpu) = self
                .sdk_side_with_cpu_us(&config, over_tls, clients, hot)
                .await?;
            println!(
                "{}",
                row(clients, keys, "SDK over TLS", &sdk, etcd_rate, Some(cpu))
            );
        }
        let (base, pid) = (&servers.main.url, servers.main.process.pid());
        let cpu_before = cpu_micros(pid)?;
        let raw = bench_load::http_side(&self.http, base, clients, duration, hot).await?;
        let cpu_raw = cpu_micros(pid)? - cpu_before;
        println!(
            "{}",
            row(clients, keys, "raw HTTP", &raw, etcd_rate, Some(cpu_raw))
        );
        if let (Some((db_url, pgbench)), Some(db)) = (&self.stores.pgbench, db) {
            db.execute("DELETE FROM locks").await?;
            let sql =
                bench_load::pgbench_side(pgbench, db_url, db, clients, duration, hot, self.log_dir)
                    .await?;
            println!(
                "{}",
                row(clients, keys, "pgbench, same SQL", &sql, etcd_rate, None)
            );
        }
        if let Some(etcd) = &etcd {
            println!(
                "{}",
                row(clients, keys, "etcd lock API", etcd, etcd_rate, None)
            );
        }
        Ok(())
    }
}

/// The legend and header of the table, for `seconds` per side.
fn print_table_header(seconds: u64) {
    println!(
        "{seconds} s per side; granted/s: granted locks, each released at once; refused/s: \
         LOCK_HELD answers on the way; wait: first attempt to grant; fairness: most grants of \
         one client / fewest; ratio: granted/s / etcd's lock API"
    );
    println!(
        "\n| clients | keys | side | granted/s | refused/s | gave up | wait p50 ms | wait p99 ms | wait max ms | fairness | ratio to etcd lock | lock-server CPU µs per grant |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
}

/// Runs the whole benchmark and prints the report.
pub async fn run_locks(options: &LockBenchOptions) -> anyhow::Result<()> {
    let stores = Stores::start(options.backend).await?;
    let log_dir = tempfile::Builder::new()
        .prefix("lock-bench-logs-")
        .tempdir()?;
    let servers = BenchServers::start(options, &stores, log_dir.path()).await?;
    let base = servers.main.url.clone();
    let sdk_config =
        crate::stack::lock_client_builder([base.clone()]).session_ttl(Duration::from_secs(60));
    let run = BenchRun {
        stores: &stores,
        servers: &servers,
        http: crate::stack::lock_http(test_support::keys::LOCK_CLIENT_TOKEN)?,
        sdk_config,
        duration: Duration::from_secs(options.seconds),
        log_dir: log_dir.path(),
        baseline_side: options.baseline.side(),
    };
    let mut db = match &stores.pgbench {
        Some((db_url, _)) => Some(PgConnection::connect(db_url).await?),
        None => None,
    };
    if !options.primitives_only {
        print_table_header(options.seconds);
        for &clients in &options.clients {
            for hot in [false, true] {
                run.workload(clients, hot, db.as_mut()).await?;
            }
        }
    }
    crate::bench_sets::print_rows(&run.sdk_config, &options.clients, run.duration).await?;
    crate::bench_shares::print_rows(&run.sdk_config, &options.clients, run.duration).await?;
    let http = &run.http;
    if options.backend == BenchBackend::Postgres {
        let (batches, writes) = histogram_totals(http, &base, "lock_store_batch_writes").await?;
        println!(
            "\nGroup commit: {writes:.0} writes in {batches} batches, {:.2} writes per batch (lock_store_batch_writes).",
            writes / batches.max(1) as f64
        );
    }
    if options.sessions > 0 {
        memory_side(http, &base, &servers.main.process, options.sessions).await?;
    }
    drop(servers);
    Ok(())
}

/// A histogram's `_count` and `_sum` from a server's `/metrics` (absent: an error, never 0).
pub(crate) async fn histogram_totals(
    http: &reqwest::Client,
    base: &str,
    family: &str,
) -> anyhow::Result<(u64, f64)> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let value = |suffix: &str| {
        let name = format!("{family}_{suffix}");
        text.lines()
            .find(|l| l.starts_with(&name))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .with_context(|| format!("{name} missing from /metrics"))
    };
    Ok((value("count")? as u64, value("sum")?))
}

pub(crate) fn rss_kib(server: &crate::stack::Proc) -> anyhow::Result<u64> {
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
    let waiters = crate::bench_load::PARKED_WAITERS;
    let parked = crate::bench_load::park_waiters(http, base, "mem.waited", waiters).await?;
    let with_waiters = rss_kib(server)?;
    for result in parked.join_all().await {
        result?;
    }
    println!(
        "lock-server resident memory: {:.1} MiB with {waiters} L4s waiting on one key as well",
        with_waiters as f64 / 1024.0
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
    /// `EXECUTOR_CONCURRENCY` values to measure (payouts each executor works on at once): every
    /// executor count runs with each. 1 is the executor of one payout at a time.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub concurrency: Vec<u32>,
}

/// Payouts per second through the whole pipeline for each executor count and concurrency,
/// each on a fresh stack, timed from the executors' start until every payout is terminal.
/// Ratios are to the first row (the first executor count at the first concurrency). Attempts
/// per payout: every executor's attempts (all outcomes, read once the payouts are terminal)
/// over the payouts; above 1 is work lost to executors meeting on the same payout.
pub async fn run_pipeline(options: &PipelineBenchOptions) -> anyhow::Result<()> {
    println!(
        "| executors | concurrency | payouts | seconds | payouts/s | ratio to the first row | attempts per payout | lock-server CPU s (replica 1 / 2) |\n|---|---|---|---|---|---|---|---|"
    );
    let mut baseline = None;
    for &count in &options.executors {
        for &concurrency in &options.concurrency {
            let mut stack =
                crate::stack::Stack::start(crate::stack::StackOptions::default(), None).await?;
            let ids = stack
                .create_payouts(&format!("bench-{count}-{concurrency}"), options.payouts)
                .await?;
            let cpu_before = replica_cpu_seconds(&stack)?;
            let started = Instant::now();
            for i in 0..count {
                let env = [
                    ("RUST_LOG", "warn".to_owned()),
                    ("EXECUTOR_CONCURRENCY", concurrency.to_string()),
                ];
                stack.start_executor(&format!("executor-{i}"), &env).await?;
            }
            stack.wait_terminal(&ids, Duration::from_secs(600)).await?;
            let seconds = started.elapsed().as_secs_f64();
            let cpu: Vec<String> = replica_cpu_seconds(&stack)?
                .iter()
                .zip(&cpu_before)
                .map(|(after, before)| format!("{:.2}", after - before))
                .collect();
            let mut attempts = 0.0;
            for executor in &stack.executors {
                attempts += stack
                    .metrics(&executor.url)
                    .await?
                    .sum("payout_execute_seconds_count", &[])?;
            }
            let rate = options.payouts as f64 / seconds;
            let base = *baseline.get_or_insert(rate);
            println!(
                "| {count} | {concurrency} | {} | {seconds:.2} | {rate:.1} | {:.2} | {:.2} | {} |",
                options.payouts,
                rate / base,
                attempts / options.payouts as f64,
                cpu.join(" / ")
            );
        }
    }
    Ok(())
}

/// CPU seconds (user + system) each lock-server replica of `stack` has used so far: shows
/// whether both replicas work (sessions spread over the endpoints).
fn replica_cpu_seconds(stack: &crate::stack::Stack) -> anyhow::Result<Vec<f64>> {
    stack
        .lock_servers
        .iter()
        .map(|server| Ok(cpu_micros(server.process.pid())? / 1e6))
        .collect()
}

/// Microseconds of CPU (user + system) process `pid` has used so far (its CPU clock).
pub(crate) fn cpu_micros(pid: nix::unistd::Pid) -> anyhow::Result<f64> {
    use nix::time::{ClockId, clock_gettime};
    let clock = ClockId::pid_cpu_clock_id(pid).context("the CPU clock of a process")?;
    let spent = clock_gettime(clock).context("read a process's CPU clock")?;
    Ok(spent.tv_sec() as f64 * 1e6 + spent.tv_nsec() as f64 / 1e3)
}
