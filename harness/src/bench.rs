//! `harness bench locks`: what users get from the lock service, side by side in one run.
//!
//! Starts durable stores in the shape asked (`bench_stores`: one PostgreSQL server with fsync
//! and synchronous commit on, or `DATABASE_URL`, or a primary with a synchronous standby; one
//! etcd member or three, data on disk) and the real lock-server binary on the backend's. Then
//! for each client count (`--clients`, default 1, 8, 32) and two workloads (distinct keys:
//! client *i* cycles on `bench.i`; hot: everyone on `bench.hot`) each side cycles acquire +
//! release for `--seconds`, one side after the other: through the SDK, over raw HTTP,
//! `pgbench` running the lock-server's own SQL (PostgreSQL only), and etcd's own lock API
//! (whenever an `etcd` binary is installed; on the same etcd with `--backend etcd`). The table
//! counts granted locks per second, refusals separately, acquires that gave up, the acquire
//! wait and the whole cycle's time, fairness, the CPU each part spent per grant
//! (`bench_cpu`), the lock-server's own time per request, and for sides on etcd what they
//! cost etcd (`bench_etcd`); load generators in `bench_load`, pictures in `bench_plot`. Last,
//! the lock-server's resident memory with many open sessions each holding a lock.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use lock_client::ClientBuilder;
use serde_json::json;
use sqlx::{Connection, Executor, PgConnection};

use crate::bench_cpu::{CpuParts, CpuPerGrant};
use crate::bench_load::{self, SideFigures, open_session};
use crate::bench_plot::PlotPoint;
use crate::bench_stores::{BenchBackend, Shape, Stores};
use crate::stack::{LockServer, TlsFiles, spawn_lock_server_at};

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
    /// The lock-server's store: `postgres` (with pgbench on the same SQL) or `etcd` (etcd's
    /// own lock API on the same members).
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
    /// The stores' shape: `single` (one PostgreSQL, one etcd member) or `replicated` (the
    /// deployment shape: a PostgreSQL primary with a synchronous standby, three etcd members).
    #[arg(long, value_enum, default_value = "single")]
    pub shape: Shape,
    /// Also draw the results as SVG pictures into this directory.
    #[arg(long)]
    pub plots: Option<std::path::PathBuf>,
}

/// The lock-server's histogram of its own time per request.
const HTTP_REQUEST_SECONDS: &str = "lock_http_request_duration_seconds";

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

/// One workload of the table: `clients` clients on distinct keys or the hot key, and etcd
/// lock API's rate in it (the ratio's denominator).
struct Workload {
    clients: usize,
    hot: bool,
    etcd_rate: Option<f64>,
}

/// What a side measured besides its figures: CPU per grant by part, and the lock-server's
/// mean time per request from its own histogram (sides through a lock-server over HTTP).
struct SideCost {
    cpu: CpuPerGrant,
    server_ms_per_request: Option<f64>,
    /// On etcd: its calls and proposals per grant, as the etcd table's cells.
    etcd_per_grant: Option<String>,
}

/// The store a side's load lands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SideStore {
    /// The lock-server's store.
    LockStore,
    /// etcd, for its own lock API.
    EtcdLockApi,
}

/// One row's cells: `-` for what a side cannot measure.
fn row(w: &Workload, side: &str, f: &SideFigures, cost: &SideCost) -> String {
    let opt =
        |v: Option<f64>, decimals: usize| v.map_or("-".to_owned(), |v| format!("{v:.decimals$}"));
    let [p50, p99, max] = f
        .wait_ms
        .map_or(["-".to_owned(), "-".to_owned(), "-".to_owned()], |w| {
            w.map(|ms| format!("{ms:.1}"))
        });
    let cycle = f.cycle_p50_p99_ms();
    let fairness = if f.fairness.is_nan() {
        "-".to_owned()
    } else if f.fairness.is_infinite() {
        "∞ (a client got none)".to_owned()
    } else {
        format!("{:.2}", f.fairness)
    };
    let ratio = opt(w.etcd_rate.map(|r| f.granted_per_s / r), 2);
    let cpu = match f.granted {
        0 => "-".to_owned(),
        _ => format!(
            "{} / {} / {:.0}",
            opt(cost.cpu.server_us, 0),
            opt(cost.cpu.store_us, 0),
            cost.cpu.client_us
        ),
    };
    format!(
        "| {} | {} | {side} | {:.0} | {} | {} | {p50} | {p99} | {max} | {} | {} | {fairness} | {ratio} | {cpu} | {} |",
        w.clients,
        if w.hot { "hot" } else { "distinct" },
        f.granted_per_s,
        opt(f.refused_per_s, 0),
        f.gave_up,
        opt(cycle.map(|c| c[0]), 2),
        opt(cycle.map(|c| c[1]), 2),
        opt(cost.server_ms_per_request, 3),
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
    /// Every row so far, for the pictures.
    points: std::sync::Mutex<Vec<PlotPoint>>,
    /// The rows of the etcd table (what each side on etcd cost etcd), printed after the main one.
    etcd_rows: std::sync::Mutex<Vec<String>>,
}

impl BenchRun<'_> {
    /// Runs `side` and measures it: its figures, and what it cost `server` (when the side
    /// goes through a lock-server) and the store at `store`.
    async fn measured(
        &self,
        server: Option<&LockServer>,
        on: SideStore,
        side: impl Future<Output = anyhow::Result<SideFigures>>,
    ) -> anyhow::Result<(SideFigures, SideCost)> {
        let (store, on_etcd) = match on {
            SideStore::LockStore => (
                self.stores.lock_store_pids(),
                self.stores.lock_store_on_etcd(),
            ),
            SideStore::EtcdLockApi => (self.stores.etcd_pids(), true),
        };
        let etcd_endpoints = self.stores.etcd_endpoints().filter(|_| on_etcd);
        let plain = reqwest::Client::new();
        let etcd_before = match &etcd_endpoints {
            Some(endpoints) => Some(crate::bench_etcd::read(&plain, endpoints).await?),
            None => None,
        };
        let has_store = !store.is_empty();
        let parts = CpuParts {
            server: server.map(|s| s.process.pid().as_raw()),
            store,
        };
        let over_http = server.filter(|s| s.url.starts_with("http:"));
        let requests_before = match over_http {
            Some(s) => Some(histogram_totals(&self.http, &s.url, HTTP_REQUEST_SECONDS).await?),
            None => None,
        };
        let cpu_before = parts.read()?;
        let figures = side.await?;
        let cpu = cpu_before.per_grant(&parts.read()?, figures.granted, has_store);
        let server_ms_per_request = match (over_http, requests_before) {
            (Some(s), Some((count, sum))) => {
                let (count_after, sum_after) =
                    histogram_totals(&self.http, &s.url, HTTP_REQUEST_SECONDS).await?;
                let requests = count_after.saturating_sub(count).max(1);
                Some((sum_after - sum) * 1000.0 / requests as f64)
            }
            _ => None,
        };
        let etcd_per_grant = match (&etcd_endpoints, etcd_before) {
            (Some(endpoints), Some(before)) => {
                let after = crate::bench_etcd::read(&plain, endpoints).await?;
                Some(before.per_grant_cells(&after, figures.granted))
            }
            _ => None,
        };
        let cost = SideCost {
            cpu,
            server_ms_per_request,
            etcd_per_grant,
        };
        Ok((figures, cost))
    }

    /// Prints a side's row and keeps its figures for the pictures.
    fn report(&self, w: &Workload, side: &str, figures: &SideFigures, cost: &SideCost) {
        println!("{}", row(w, side, figures, cost));
        if let Some(cells) = &cost.etcd_per_grant {
            let keys = if w.hot { "hot" } else { "distinct" };
            let line = format!("| {} | {keys} | {side} | {cells} |", w.clients);
            self.etcd_rows.lock().expect("etcd rows").push(line);
        }
        let point = PlotPoint {
            clients: w.clients,
            hot: w.hot,
            side: side.to_owned(),
            granted_per_s: figures.granted_per_s,
            cycle_ms: figures.cycle_ms.clone(),
        };
        self.points.lock().expect("points").push(point);
    }

    /// The SDK side with `config` against `server`, measured and reported as `side`.
    async fn sdk_side(
        &self,
        w: &Workload,
        side: &str,
        config: &ClientBuilder,
        server: &LockServer,
    ) -> anyhow::Result<()> {
        let load = bench_load::sdk_side(config, w.clients, self.duration, w.hot);
        let (sdk, cost) = self
            .measured(Some(server), SideStore::LockStore, load)
            .await?;
        self.report(w, side, &sdk, &cost);
        Ok(())
    }

    /// Runs every side on one workload (`clients` clients, `hot` key or distinct keys) and
    /// prints their rows; `db` is lockdb for the pgbench side.
    async fn workload(
        &self,
        clients: usize,
        hot: bool,
        db: Option<&mut PgConnection>,
    ) -> anyhow::Result<()> {
        let (servers, duration) = (self.servers, self.duration);
        let etcd = match &self.stores.etcd {
            Some(etcd) => {
                let load = bench_load::etcd_lock_side(etcd, clients, duration, hot);
                Some(self.measured(None, SideStore::EtcdLockApi, load).await?)
            }
            None => None,
        };
        let w = Workload {
            clients,
            hot,
            etcd_rate: etcd.as_ref().map(|(f, _)| f.granted_per_s),
        };
        self.sdk_side(&w, "SDK", &self.sdk_config, &servers.main)
            .await?;
        if let Some(baseline) = &servers.baseline {
            let config = self.sdk_config.clone().endpoints([baseline.url.clone()]);
            self.sdk_side(&w, self.baseline_side, &config, baseline)
                .await?;
        }
        if let Some((over_tls, files)) = &servers.over_tls {
            let config = (self.sdk_config.clone())
                .endpoints([over_tls.url.clone()])
                .tls(files.client());
            self.sdk_side(&w, "SDK over TLS", &config, over_tls).await?;
        }
        let load = bench_load::http_side(&self.http, &servers.main.url, clients, duration, hot);
        let (raw, cost) = self
            .measured(Some(&servers.main), SideStore::LockStore, load)
            .await?;
        self.report(&w, "raw HTTP", &raw, &cost);
        if let (Some((db_url, pgbench)), Some(db)) = (&self.stores.pgbench, db) {
            db.execute("DELETE FROM locks").await?;
            let load =
                bench_load::pgbench_side(pgbench, db_url, db, clients, duration, hot, self.log_dir);
            let (sql, cost) = self.measured(None, SideStore::LockStore, load).await?;
            self.report(&w, "pgbench, same SQL", &sql, &cost);
        }
        if let Some((etcd, cost)) = &etcd {
            self.report(&w, "etcd lock API", etcd, cost);
        }
        Ok(())
    }
}

/// The legend and header of the table, for `seconds` per side.
fn print_table_header(seconds: u64) {
    println!(
        "{seconds} s per side; granted/s: granted locks, each released at once; refused/s: \
         LOCK_HELD answers on the way; wait: first attempt to grant; cycle: first attempt to \
         release answered; fairness: most grants of one client / fewest; ratio: granted/s / \
         etcd's lock API; CPU per grant: the lock-server, the store's processes, the load \
         generator; server ms per request: the lock-server's own mean time per request"
    );
    println!(
        "\n| clients | keys | side | granted/s | refused/s | gave up | wait p50 ms | wait p99 ms | wait max ms | cycle p50 ms | cycle p99 ms | fairness | ratio to etcd lock | CPU µs per grant: lock-server / store / client | server ms per request |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
}

/// Runs the whole benchmark and prints the report.
pub async fn run_locks(options: &LockBenchOptions) -> anyhow::Result<()> {
    let stores = Stores::start_shaped(options.backend, options.shape).await?;
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
        points: std::sync::Mutex::default(),
        etcd_rows: std::sync::Mutex::default(),
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
    let etcd_rows = run.etcd_rows.lock().expect("etcd rows").clone();
    if !etcd_rows.is_empty() {
        println!(
            "\nWhat each side on etcd cost etcd, per granted lock (its members' counters: raft proposals committed, requests by gRPC method, events sent to watchers):\n\n{}",
            crate::bench_etcd::header()
        );
        println!("{}", etcd_rows.join("\n"));
    }
    if let Some(dir) = &options.plots {
        let title = format!("{:?} ({:?})", options.backend, options.shape).to_lowercase();
        let points = run.points.lock().expect("points").clone();
        crate::bench_plot::write_all(dir, &title, &points)?;
        println!("\npictures: {}", dir.display());
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

/// A histogram's `_count` and `_sum` from a server's `/metrics`, over all its label sets
/// (absent: an error, never 0).
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
    // Summed over every label set; a family with none is missing, never 0.
    let value = |suffix: &str| {
        let name = format!("{family}_{suffix}");
        let values: Vec<f64> = (text.lines())
            .filter(|l| {
                l.strip_prefix(&name)
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .collect();
        anyhow::ensure!(!values.is_empty(), "{name} missing from /metrics");
        Ok(values.iter().sum::<f64>())
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
