//! `harness bench python`: the Python SDK (`fencedlock`) against what Python users pick
//! today, in one run on the same machine.
//!
//! Starts what `harness bench locks` starts on PostgreSQL ([`Stores`]: a throwaway
//! PostgreSQL with fsync and synchronous commit on, one etcd member with its data on disk)
//! and the release lock-server on it, plus a `redis-server` on a free loopback port with its
//! default configuration (no AOF: not durable). Then for each client count (`--clients`,
//! default 1 and 8; client *i* cycles on a key of its own) it counts **lock cycles per
//! second** — acquire + release of one free lock, never waiting — of: the Rust SDK
//! (`lock-client`, `bench_load`'s SDK side), and through `harness/bench/python_locks.py` run
//! by `--python`: fencedlock, tooz on the same PostgreSQL (`postgresql://`, advisory locks),
//! tooz on the same etcd (`etcd3+http://`, the HTTP gateway) and python-redis-lock on the
//! Redis. Python clients are processes (one interpreter and GIL each, as Python services
//! scale); at more than one client fencedlock also runs as threads of one process, which
//! shows whether its calls let go of the GIL.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use lock_client::AcquirePolicy;
use serde::Deserialize;
use test_support::ServiceProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::bench::bench_server_env;
use crate::bench_load;
use crate::bench_stores::{BenchBackend, Stores};
use crate::stack::spawn_lock_server_at;

/// The interpreter `--python` names unless told: the venv `script/bench-python-venv` makes.
pub const DEFAULT_PYTHON: &str = "target/bench-python-venv/bin/python";
/// The goal the report judges: the Python SDK's cycles over the Rust SDK's, at each count.
pub const GOAL_RATIO: f64 = 0.8;
/// How long `redis-server` may take to answer `PING`.
const REDIS_READY_DEADLINE: Duration = Duration::from_secs(10);
/// Pause between readiness probes of `redis-server`.
const REDIS_PROBE_INTERVAL: Duration = Duration::from_millis(50);

/// Options of `harness bench python`.
#[derive(Debug, Clone, clap::Args)]
pub struct PythonBenchOptions {
    /// Client counts: each side runs each count with that many concurrent clients.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    pub clients: Vec<usize>,
    /// Seconds per side and client count.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// The Python interpreter (a venv's `bin/python`) with fencedlock, tooz, psycopg2,
    /// etcd3gw and python-redis-lock installed (`script/bench-python-venv` makes one).
    #[arg(long, env = "BENCH_PYTHON", default_value = DEFAULT_PYTHON)]
    pub python: PathBuf,
}

/// How a side's clients run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Tasks of the harness, one `LockClient` (and heartbeat thread) each.
    Tasks,
    /// Python processes, one interpreter each.
    Processes,
    /// Python threads of one process, one fencedlock `Client` each.
    Threads,
}

impl Concurrency {
    /// `--concurrency` of the script.
    fn arg(self) -> &'static str {
        match self {
            Self::Tasks => "tasks",
            Self::Processes => "processes",
            Self::Threads => "threads",
        }
    }
}

/// One side of the table: a library on a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `lock-client` on the lock-server (PostgreSQL).
    RustSdk,
    /// `fencedlock` on the same lock-server.
    Fencedlock,
    /// tooz's PostgreSQL driver on the same PostgreSQL.
    ToozPostgres,
    /// tooz's etcd3gw driver on the same etcd.
    ToozEtcd,
    /// python-redis-lock on the local Redis.
    RedisLock,
}

/// The Python sides, in the table's order.
pub const PYTHON_SIDES: [Side; 4] = [
    Side::Fencedlock,
    Side::ToozPostgres,
    Side::ToozEtcd,
    Side::RedisLock,
];

impl Side {
    /// The side's name in the table.
    pub fn label(self) -> &'static str {
        match self {
            Self::RustSdk => "Rust SDK (lock-client)",
            Self::Fencedlock => "fencedlock (Python SDK)",
            Self::ToozPostgres => "tooz, PostgreSQL driver",
            Self::ToozEtcd => "tooz, etcd3gw driver",
            Self::RedisLock => "python-redis-lock",
        }
    }

    /// `--side` of the script (`None`: not a Python side).
    pub fn script_name(self) -> Option<&'static str> {
        match self {
            Self::RustSdk => None,
            Self::Fencedlock => Some("fencedlock"),
            Self::ToozPostgres => Some("tooz-postgresql"),
            Self::ToozEtcd => Some("tooz-etcd"),
            Self::RedisLock => Some("redis-lock"),
        }
    }

    /// Whether a grant carries a fencing token a resource can check.
    pub fn fencing(self) -> &'static str {
        match self {
            Self::RustSdk | Self::Fencedlock => "yes (token + signed proof)",
            Self::ToozPostgres | Self::ToozEtcd | Self::RedisLock => "no",
        }
    }

    /// Whether a grant survives the store's crash, and what holds it.
    pub fn durability(self) -> &'static str {
        match self {
            Self::RustSdk | Self::Fencedlock => {
                "yes: PostgreSQL rows, fsync + synchronous_commit on; 30 s lease, heartbeated session"
            }
            Self::ToozPostgres => {
                "no: an advisory lock in PostgreSQL's memory (no WAL), held while its connection \
                 lives; tooz connects per acquire"
            }
            Self::ToozEtcd => {
                "yes: etcd's raft log, fsynced; a new 30 s lease per acquire, never heartbeated"
            }
            Self::RedisLock => "no: Redis defaults (no AOF, RDB snapshots), one node; 30 s expiry",
        }
    }
}

/// One measured row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What ran.
    pub side: Side,
    /// How its clients ran.
    pub concurrency: Concurrency,
    /// Concurrent clients.
    pub clients: usize,
    /// Lock cycles per second over all clients.
    pub cycles_per_s: f64,
    /// The clients' CPU time per cycle, µs (every thread of their processes).
    pub client_cpu_us_per_cycle: f64,
}

/// `rate` over `rust_rate` to two places; `-` without a Rust figure to compare with.
pub fn ratio_cell(rate: f64, rust_rate: Option<f64>) -> String {
    match rust_rate {
        Some(rust) if rust > 0.0 => format!("{:.2}", rate / rust),
        _ => "-".to_owned(),
    }
}

/// The table's header.
pub fn table_header() -> String {
    "| side | clients | run as | cycles/s | ratio to Rust SDK | client CPU µs/cycle | fencing token | durable store |\n\
     |---|---|---|---|---|---|---|---|"
        .to_owned()
}

impl Row {
    /// The row's cells; `rust_rate` is the Rust SDK's at the same client count.
    pub fn cells(&self, rust_rate: Option<f64>) -> String {
        let run_as = match (self.concurrency, self.clients) {
            (Concurrency::Tasks, 1) => "1 task".to_owned(),
            (Concurrency::Tasks, n) => format!("{n} tasks of one process"),
            (Concurrency::Processes, 1) => "1 process".to_owned(),
            (Concurrency::Processes, n) => format!("{n} processes"),
            (Concurrency::Threads, n) => format!("{n} threads of one process"),
        };
        format!(
            "| {} | {} | {run_as} | {:.0} | {} | {:.0} | {} | {} |",
            self.side.label(),
            self.clients,
            self.cycles_per_s,
            ratio_cell(self.cycles_per_s, rust_rate),
            self.client_cpu_us_per_cycle,
            self.side.fencing(),
            self.side.durability()
        )
    }
}

/// What the script prints for one side at one client count.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ScriptReport {
    /// Cycles over all clients.
    pub cycles: u64,
    /// From the clients' barrier to the last one's end.
    pub seconds: f64,
    /// Cycles per client, by index.
    pub per_client: Vec<u64>,
    /// The clients' CPU time over the run (every thread of their processes).
    pub cpu_seconds: f64,
}

impl ScriptReport {
    /// The report on the last line of the script's `stdout`.
    pub fn parse(stdout: &str) -> anyhow::Result<Self> {
        let line = stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .context("the script printed nothing")?;
        serde_json::from_str(line).with_context(|| format!("the script's report: {line}"))
    }

    /// Cycles per second.
    pub fn rate(&self) -> f64 {
        self.cycles as f64 / self.seconds
    }

    /// The clients' CPU µs per cycle.
    pub fn cpu_us_per_cycle(&self) -> f64 {
        self.cpu_seconds * 1e6 / self.cycles.max(1) as f64
    }
}

/// The Python script the harness runs, kept next to its sources.
fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/python_locks.py")
}

/// Checks that `python` can run every Python side: the packages' versions as the script
/// reports them, or an error naming the pip line of each missing one.
async fn check_python(python: &Path) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(python)
        .arg(script_path())
        .args(["check", "--sides"])
        .arg(
            PYTHON_SIDES
                .iter()
                .filter_map(|s| s.script_name())
                .collect::<Vec<_>>()
                .join(","),
        )
        .output()
        .await
        .with_context(|| {
            format!(
                "run {} (--python; script/bench-python-venv makes the default venv)",
                python.display()
            )
        })?;
    if !output.status.success() {
        bail!(
            "--python {} cannot run the benchmark:\n{}",
            python.display(),
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// A `redis-server` on a free loopback port with its default configuration, its dump file
/// in `dir`; killed when dropped.
struct RedisServer {
    _process: ServiceProcess,
    url: String,
}

impl RedisServer {
    async fn start(dir: &Path) -> anyhow::Result<Self> {
        let version = tokio::process::Command::new("redis-server")
            .arg("--version")
            .output()
            .await
            .context("harness bench python needs `redis-server` on PATH")?;
        println!("{}", String::from_utf8_lossy(&version.stdout).trim());
        let port = test_support::free_port();
        let (port_arg, dir_arg) = (port.to_string(), dir.display().to_string());
        let args = [
            "--port",
            &port_arg,
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir_arg,
        ];
        let process = ServiceProcess::spawn("redis-server", "redis-server", &args, &[], dir);
        let started = Instant::now();
        while !redis_answers(port).await {
            if started.elapsed() > REDIS_READY_DEADLINE {
                bail!(
                    "redis-server did not answer PING within {REDIS_READY_DEADLINE:?}: {}",
                    process.log()
                );
            }
            tokio::time::sleep(REDIS_PROBE_INTERVAL).await;
        }
        Ok(Self {
            _process: process,
            url: format!("redis://127.0.0.1:{port}/0"),
        })
    }
}

/// Whether Redis on `port` answers `PING` with `+PONG`.
async fn redis_answers(port: u16) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let mut answer = [0u8; 7];
    stream.write_all(b"PING\r\n").await.is_ok()
        && stream.read_exact(&mut answer).await.is_ok()
        && &answer == b"+PONG\r\n"
}

/// Where each Python side connects.
struct Targets {
    lock_server: String,
    postgres: String,
    etcd: String,
    redis: String,
}

impl Targets {
    fn of(&self, side: Side) -> &str {
        match side {
            Side::RustSdk | Side::Fencedlock => &self.lock_server,
            Side::ToozPostgres => &self.postgres,
            Side::ToozEtcd => &self.etcd,
            Side::RedisLock => &self.redis,
        }
    }
}

/// Runs the script for `side` at `clients` clients.
async fn python_side(
    python: &Path,
    targets: &Targets,
    side: Side,
    clients: usize,
    seconds: u64,
    concurrency: Concurrency,
) -> anyhow::Result<ScriptReport> {
    let name = side.script_name().context("not a Python side")?;
    let output = tokio::process::Command::new(python)
        .arg(script_path())
        .args(["run", "--side", name, "--target", targets.of(side)])
        .args(["--clients", &clients.to_string()])
        .args(["--seconds", &seconds.to_string()])
        .args(["--concurrency", concurrency.arg()])
        .env("LOCK_CLIENT_TOKEN", test_support::keys::LOCK_CLIENT_TOKEN)
        .output()
        .await?;
    if !output.status.success() {
        bail!(
            "{name} at {clients} clients failed:\n{}",
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    ScriptReport::parse(&String::from_utf8_lossy(&output.stdout))
}

/// The 1-, 5- and 15-minute load averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The goal's verdict: the Python SDK's ratio at each client count.
fn verdict(rows: &[Row]) -> String {
    let mut parts = Vec::new();
    for row in rows.iter().filter(|r| r.side == Side::Fencedlock) {
        let rust = rows
            .iter()
            .find(|r| r.side == Side::RustSdk && r.clients == row.clients)
            .map(|r| r.cycles_per_s);
        let ratio = ratio_cell(row.cycles_per_s, rust);
        let met = rust.is_some_and(|r| row.cycles_per_s >= GOAL_RATIO * r);
        let as_threads = if row.concurrency == Concurrency::Threads {
            " (threads)"
        } else {
            ""
        };
        parts.push(format!(
            "{} client(s){as_threads}: {ratio}× ({})",
            row.clients,
            if met { "met" } else { "NOT met" }
        ));
    }
    format!(
        "Python SDK ÷ Rust SDK, goal ≥ {GOAL_RATIO}×: {}",
        parts.join("; ")
    )
}

/// What every client count of one run measures with.
struct PythonRun<'a> {
    options: &'a PythonBenchOptions,
    targets: Targets,
    /// The Rust SDK's configuration against the lock-server.
    sdk_config: lock_client::ClientBuilder,
}

impl PythonRun<'_> {
    /// Every side at `clients` clients, the Rust SDK first; prints each row as it comes.
    async fn client_count(&self, clients: usize) -> anyhow::Result<Vec<Row>> {
        let seconds = self.options.seconds;
        let policy = AcquirePolicy::TRY_ONCE; // what `wait=0` asks of the Python SDK
        let duration = Duration::from_secs(seconds);
        // The harness's own CPU: its runtime runs the Rust side's clients and nothing else.
        let harness = nix::unistd::Pid::this();
        let cpu_before_us = crate::bench_cpu::cpu_micros(harness)?;
        let rust =
            bench_load::sdk_side_with(&self.sdk_config, clients, duration, false, policy).await?;
        let cpu_us = crate::bench_cpu::cpu_micros(harness)? - cpu_before_us;
        anyhow::ensure!(rust.gave_up == 0, "a Rust SDK acquire of a free key failed");
        let rust_row = Row {
            side: Side::RustSdk,
            concurrency: Concurrency::Tasks,
            clients,
            cycles_per_s: rust.granted_per_s,
            client_cpu_us_per_cycle: cpu_us / rust.granted.max(1) as f64,
        };
        let rust_rate = Some(rust_row.cycles_per_s);
        println!("{}", rust_row.cells(rust_rate));
        let mut rows = vec![rust_row];
        let mut runs: Vec<(Side, Concurrency)> = PYTHON_SIDES
            .iter()
            .map(|&s| (s, Concurrency::Processes))
            .collect();
        if clients > 1 {
            runs.insert(1, (Side::Fencedlock, Concurrency::Threads));
        }
        for (side, concurrency) in runs {
            let python = &self.options.python;
            let report =
                python_side(python, &self.targets, side, clients, seconds, concurrency).await?;
            let row = Row {
                side,
                concurrency,
                clients,
                cycles_per_s: report.rate(),
                client_cpu_us_per_cycle: report.cpu_us_per_cycle(),
            };
            println!("{}", row.cells(rust_rate));
            rows.push(row);
        }
        Ok(rows)
    }
}

/// Runs the whole benchmark and prints the report.
pub async fn run_python(options: &PythonBenchOptions) -> anyhow::Result<()> {
    let versions = check_python(&options.python).await?;
    let stores = Stores::start(BenchBackend::Postgres).await?;
    let postgres = stores.database_url().context("no PostgreSQL")?;
    let etcd = stores
        .etcd_endpoints()
        .context("harness bench python needs an etcd binary for tooz's etcd side")?;
    let log_dir = tempfile::Builder::new()
        .prefix("python-bench-logs-")
        .tempdir()?;
    let server = spawn_lock_server_at(
        "lock-server",
        &stores.lock_store,
        &bench_server_env(&[]),
        log_dir.path(),
        None,
    )
    .await?;
    let redis = RedisServer::start(log_dir.path()).await?;
    let targets = Targets {
        lock_server: server.url.clone(),
        postgres: postgres.replacen("postgres://", "postgresql://", 1),
        etcd: etcd[0].replacen("http://", "etcd3+http://", 1),
        redis: redis.url.clone(),
    };
    let sdk_config = crate::stack::lock_client_builder([server.url.clone()])
        .session_ttl(Duration::from_secs(60));
    let run = PythonRun {
        options,
        targets,
        sdk_config,
    };
    println!("Python and packages: {versions}");
    println!(
        "{} s per side and client count; a cycle: acquire + release of a free key (client i on \
         its own key), never waiting; load average (1, 5, 15 min) at the start: {}",
        options.seconds,
        load_average()
    );
    println!("\n{}", table_header());
    let (mut rows, mut loads) = (Vec::new(), Vec::new());
    for &clients in &options.clients {
        rows.extend(run.client_count(clients).await?);
        loads.push(format!("{} after {clients} client(s)", load_average()));
    }
    println!("\nLoad average (1, 5, 15 min): {}.", loads.join("; "));
    println!("{}", verdict(&rows));
    drop((redis, server, stores));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        options: PythonBenchOptions,
    }

    #[test]
    fn options_default_to_one_and_eight_clients_and_take_a_python() {
        let defaults = Cli::try_parse_from(["bench"]).unwrap().options;
        assert_eq!(defaults.clients, vec![1, 8]);
        assert_eq!(defaults.seconds, 5);
        let given = Cli::try_parse_from([
            "bench",
            "--clients",
            "1,2,4",
            "--seconds",
            "3",
            "--python",
            "/opt/venv/bin/python",
        ])
        .unwrap()
        .options;
        assert_eq!(given.clients, vec![1, 2, 4]);
        assert_eq!(given.seconds, 3);
        assert_eq!(given.python, PathBuf::from("/opt/venv/bin/python"));
        assert!(Cli::try_parse_from(["bench", "--clients", "one"]).is_err());
    }

    #[test]
    fn ratios_are_to_the_rust_sdk_at_the_same_count() {
        assert_eq!(ratio_cell(800.0, Some(1_000.0)), "0.80");
        assert_eq!(ratio_cell(2_633.0, Some(966.0)), "2.73");
        assert_eq!(ratio_cell(5.0, None), "-");
        assert_eq!(ratio_cell(5.0, Some(0.0)), "-");
        let rows = [
            Row {
                side: Side::RustSdk,
                concurrency: Concurrency::Tasks,
                clients: 8,
                cycles_per_s: 2_000.0,
                client_cpu_us_per_cycle: 100.0,
            },
            Row {
                side: Side::Fencedlock,
                concurrency: Concurrency::Processes,
                clients: 8,
                cycles_per_s: 1_500.0,
                client_cpu_us_per_cycle: 250.0,
            },
        ];
        assert!(
            rows[1]
                .cells(Some(2_000.0))
                .contains("| 8 processes | 1500 | 0.75 | 250 |")
        );
        let verdict = verdict(&rows);
        assert!(
            verdict.contains("8 client(s): 0.75× (NOT met)"),
            "{verdict}"
        );
    }

    #[test]
    fn every_side_says_what_it_guarantees() {
        for side in PYTHON_SIDES {
            assert!(side.script_name().is_some());
            assert!(!side.durability().is_empty());
        }
        assert_eq!(Side::RedisLock.fencing(), "no");
        assert!(Side::Fencedlock.fencing().starts_with("yes"));
        assert!(Side::RedisLock.durability().starts_with("no"));
    }

    #[test]
    fn the_script_report_is_its_last_line() {
        let out = "warming up\n{\"side\": \"tooz-etcd\", \"clients\": 2, \"concurrency\": \
                   \"processes\", \"cycles\": 600, \"seconds\": 2.0, \"per_client\": [300, 300], \
                   \"cpu_seconds\": 0.12}\n";
        let report = ScriptReport::parse(out).unwrap();
        assert_eq!(report.per_client, vec![300, 300]);
        assert_eq!(report.rate(), 300.0);
        assert!((report.cpu_us_per_cycle() - 200.0).abs() < 1e-9);
        assert!(ScriptReport::parse("").is_err());
        assert!(ScriptReport::parse("not json").is_err());
    }
}
