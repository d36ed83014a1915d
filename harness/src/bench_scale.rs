//! `harness bench scale`: how the lock service's cost grows with what it holds. The real
//! lock-server binary on a durable PostgreSQL of its own, holding `--sessions` sessions and
//! `--keys` granted keys (seeded in SQL: the API would take minutes to open a million grants,
//! and the server keeps no state of its own for them). Then, in turn: the server's resident
//! memory; the reaper's passes at rest (it scans for expired grants every second); `--clients`
//! concurrent clients cycling acquire + release on fresh keys (raw HTTP, one connection each);
//! and the same load while a tenth of the held grants expire at once and the reaper deletes
//! them.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::{Connection, Executor, PgConnection};
use test_support::poll_until;

use crate::bench_load::{self, SideFigures};
use crate::bench_stores::{BenchBackend, Stores};
use crate::stack::{LockServer, LockStoreAt, spawn_lock_server_at};

/// Options of `harness bench scale`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScaleBenchOptions {
    /// Open sessions held by the store.
    #[arg(long, default_value_t = 100_000)]
    pub sessions: u64,
    /// Granted keys held by the store, spread over the sessions.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Concurrent clients of the load, each with its own session and connection.
    #[arg(long, default_value_t = 1_000)]
    pub clients: usize,
    /// Seconds of each load run.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
}

/// The share of held grants that expire at once for the reaper run.
const EXPIRE_DIVISOR: u64 = 10;
/// How long the reaper may take to delete the expired grants before the run fails.
const REAP_DEADLINE: Duration = Duration::from_secs(300);

/// The real lock-server on `stores`' PostgreSQL, with room for `clients` connections.
async fn start_scale_server(
    stores: &Stores,
    clients: usize,
    log_dir: &Path,
) -> anyhow::Result<LockServer> {
    spawn_lock_server_at(
        "lock-server",
        &stores.lock_store,
        &crate::bench::limits_out_of_the_way(&[
            ("LOCK_DB_MAX_CONNECTIONS", "32".into()),
            ("LOCK_SESSION_TTL", "60s".into()),
            ("RUST_LOG", "warn".into()),
            // One connection per client, and room to spare.
            ("HTTP_CONNECTIONS_MAX", (clients * 4).max(4_096).to_string()),
        ]),
        log_dir,
        None,
    )
    .await
}

/// Makes the first `expiring` seeded grants expire at once.
async fn expire_grants(db: &mut PgConnection, expiring: u64) -> anyhow::Result<()> {
    db.execute(
        sqlx::query(
            "UPDATE locks SET expires_at = now() - interval '1 second'
              WHERE lock_key IN (SELECT 'scale:' || g FROM generate_series(1, $1) g)",
        )
        .bind(i64::try_from(expiring)?),
    )
    .await?;
    Ok(())
}

/// Waits until lockdb at `db_url` holds no expired grant: the time since `reap_started`.
async fn wait_reaped(db_url: &str, reap_started: Instant) -> Duration {
    poll_until(
        "the reaper to delete the expired grants",
        REAP_DEADLINE,
        || {
            let url = db_url.to_owned();
            async move {
                let mut db = PgConnection::connect(&url).await.ok()?;
                let left: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM locks WHERE expires_at <= now()")
                        .fetch_one(&mut db)
                        .await
                        .ok()?;
                (left == 0).then_some(reap_started.elapsed())
            }
        },
    )
    .await
}

/// What one scale run measured.
struct ScaleFigures {
    /// The server's resident memory on an empty store.
    idle_kib: u64,
    /// Its resident memory with the seeded sessions and keys, at rest.
    held_kib: u64,
    /// Its resident memory after the load.
    loaded_kib: u64,
    /// Its resident memory after the load while the expired grants were reaped.
    reaped_kib: u64,
    /// The reaper's passes at rest.
    passes_at_rest: Passes,
    /// The reaper's passes while it deleted the expired grants.
    passes_reaping: Passes,
    /// The load.
    load: SideFigures,
    /// The load while the reaper deleted the expired grants.
    under_reap: SideFigures,
    /// How many grants expired at once.
    expiring: u64,
    /// How long the reaper took to delete them.
    reaped: Duration,
}

/// Prints the figures' table.
fn print_figures(options: &ScaleBenchOptions, f: &ScaleFigures) {
    println!(
        "\n| phase | lock-server RSS MiB | reaper passes | reaper pass mean ms | granted/s | wait p50 ms | wait p99 ms | wait max ms |\n|---|---|---|---|---|---|---|---|"
    );
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "| idle, empty store | {:.1} | - | - | - | - | - | - |",
        mib(f.idle_kib)
    );
    println!(
        "| {} sessions, {} keys held, at rest (5 s) | {:.1} | {} | {:.1} | - | - | - | - |",
        options.sessions,
        options.keys,
        mib(f.held_kib),
        f.passes_at_rest.count,
        f.passes_at_rest.mean_ms()
    );
    println!(
        "{}",
        load_row(
            &format!("{} clients", options.clients),
            mib(f.loaded_kib),
            &f.load
        )
    );
    println!(
        "{}",
        load_row(
            &format!(
                "{} clients while {} grants expire and are reaped ({:.1} s; {} passes, mean {:.1} ms)",
                options.clients,
                f.expiring,
                f.reaped.as_secs_f64(),
                f.passes_reaping.count,
                f.passes_reaping.mean_ms()
            ),
            mib(f.reaped_kib),
            &f.under_reap
        )
    );
}

/// Runs the scale benchmark and prints its figures.
pub async fn run_scale(options: &ScaleBenchOptions) -> anyhow::Result<()> {
    let stores = Stores::start(BenchBackend::Postgres).await?;
    let LockStoreAt::Postgres(db_url) = &stores.lock_store else {
        anyhow::bail!("the scale bench runs on PostgreSQL");
    };
    let log_dir = tempfile::Builder::new()
        .prefix("lock-bench-scale-")
        .tempdir()?;
    let server = start_scale_server(&stores, options.clients, log_dir.path()).await?;
    let base = server.url.clone();
    let http = crate::stack::lock_http(test_support::keys::LOCK_CLIENT_TOKEN)?;
    let mut db = PgConnection::connect(db_url)
        .await
        .context("connect to lockdb")?;
    let idle_kib = crate::bench::rss_kib(&server.process)?;

    let seeding = Instant::now();
    seed(&mut db, options.sessions, options.keys).await?;
    println!(
        "seeded {} sessions and {} granted keys in {:.1} s",
        options.sessions,
        options.keys,
        seeding.elapsed().as_secs_f64()
    );
    let passes_before = reaper_passes(&http, &base).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let passes_at_rest = reaper_passes(&http, &base).await?.since(&passes_before);
    let held_kib = crate::bench::rss_kib(&server.process)?;

    let duration = Duration::from_secs(options.seconds);
    let load = bench_load::http_side(&http, &base, options.clients, duration, false).await?;
    let loaded_kib = crate::bench::rss_kib(&server.process)?;

    let expiring = options.keys / EXPIRE_DIVISOR;
    expire_grants(&mut db, expiring).await?;
    let reap_started = Instant::now();
    let passes_before = reaper_passes(&http, &base).await?;
    let (under_reap, reaped) = tokio::join!(
        bench_load::http_side(&http, &base, options.clients, duration, false),
        wait_reaped(db_url, reap_started)
    );
    let under_reap = under_reap?;
    let passes_reaping = reaper_passes(&http, &base).await?.since(&passes_before);
    let reaped_kib = crate::bench::rss_kib(&server.process)?;

    let figures = ScaleFigures {
        idle_kib,
        held_kib,
        loaded_kib,
        reaped_kib,
        passes_at_rest,
        passes_reaping,
        load,
        under_reap,
        expiring,
        reaped,
    };
    print_figures(options, &figures);
    drop(server);
    drop(stores);
    Ok(())
}

/// `sessions` sessions and `keys` granted keys (key *g* held by session *g* mod `sessions`),
/// all live for an hour, with their fences.
async fn seed(db: &mut PgConnection, sessions: u64, keys: u64) -> anyhow::Result<()> {
    anyhow::ensure!(
        sessions > 0 && keys > 0,
        "--sessions and --keys must be positive"
    );
    let session_id = "('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid";
    db.execute(
        sqlx::query(&format!(
            "INSERT INTO lock_sessions (session_id, owner_id, ttl_ms, expires_at)
             SELECT {session_id}, 'scale-' || g, 3600000, now() + interval '1 hour'
               FROM generate_series(1, $1) g"
        ))
        .bind(i64::try_from(sessions)?),
    )
    .await?;
    db.execute(
        sqlx::query(&format!(
            "INSERT INTO locks (lock_key, fencing_token, session_id, lease_ms, expires_at)
             SELECT 'scale:' || g, 1, {}, 3600000, now() + interval '1 hour'
               FROM generate_series(1, $1) g",
            session_id.replace("to_hex(g)", "to_hex(g % $2 + 1)")
        ))
        .bind(i64::try_from(keys)?)
        .bind(i64::try_from(sessions)?),
    )
    .await?;
    db.execute(
        sqlx::query(
            "INSERT INTO lock_fences (lock_key, last_token)
             SELECT 'scale:' || g, 1 FROM generate_series(1, $1) g",
        )
        .bind(i64::try_from(keys)?),
    )
    .await?;
    db.execute("ANALYZE").await?;
    Ok(())
}

/// The reaper's passes so far: how many, and their total seconds.
#[derive(Debug, Clone, Copy)]
struct Passes {
    count: u64,
    seconds: f64,
}

impl Passes {
    fn since(&self, earlier: &Self) -> Self {
        Self {
            count: self.count - earlier.count,
            seconds: self.seconds - earlier.seconds,
        }
    }

    fn mean_ms(&self) -> f64 {
        if self.count == 0 {
            f64::NAN
        } else {
            self.seconds * 1_000.0 / self.count as f64
        }
    }
}

/// `lock_reaper_pass_seconds` from the server's `/metrics` (absent: an error).
async fn reaper_passes(http: &reqwest::Client, base: &str) -> anyhow::Result<Passes> {
    let (count, seconds) =
        crate::bench::histogram_totals(http, base, "lock_reaper_pass_seconds").await?;
    Ok(Passes { count, seconds })
}

fn load_row(phase: &str, rss_mib: f64, figures: &SideFigures) -> String {
    let [p50, p99, max] = figures.wait_ms.unwrap_or([f64::NAN; 3]);
    format!(
        "| {phase} | {rss_mib:.1} | - | - | {:.0} | {p50:.1} | {p99:.1} | {max:.1} |",
        figures.granted_per_s
    )
}
