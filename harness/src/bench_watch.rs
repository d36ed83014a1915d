//! `harness bench watch`: how fast a watch tells, on real processes. One writer takes and
//! releases distinct keys as fast as one SDK session can for `--seconds`, recording when each
//! grant was answered; `--watchers` SDK watchers follow the prefix through the lock-server.
//! Delivery latency is from the grant's answer at the writer to its `granted` event at a
//! watcher (p50, p99; an event that came before the writer heard its answer counts 0);
//! events per second is what each watcher received over the run. Every watcher must see
//! every grant, or the run fails.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_api::{EventKind, LockKey};
use lock_client::admin::watch::WatchItem;
use lock_client::{AcquirePolicy, LockClient};

use crate::bench::LoneServer;
use crate::bench_stores::BenchBackend;

/// `harness bench watch`.
#[derive(Debug, Clone, clap::Args)]
pub struct WatchBenchOptions {
    /// Seconds of writing per backend.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Watchers following the prefix.
    #[arg(long, default_value_t = 4)]
    pub watchers: usize,
    /// The backends measured.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "postgres,etcd"
    )]
    pub backends: Vec<BenchBackend>,
}

/// How long watchers may take to deliver the last event after writing stops.
const DRAIN: Duration = Duration::from_secs(10);

/// When each grant was answered, by key and token.
type Answered = Arc<Mutex<HashMap<(String, u64), Instant>>>;

/// Runs the benchmark and prints a table, one row per backend.
pub async fn run_watch(options: &WatchBenchOptions) -> anyhow::Result<()> {
    let mut rows = vec![
        "| backend | watchers | grants/s written | events/s per watcher | latency p50 ms | p99 ms | max ms |".to_owned(),
        "|---|---|---|---|---|---|---|".to_owned(),
    ];
    for &backend in &options.backends {
        let lone = LoneServer::start(backend).await?;
        let client = crate::stack::lock_client_builder([lone.server.url.as_str()]).build()?;
        rows.push(measure(&client, backend, options).await?);
        client.close();
    }
    println!("{}", rows.join("\n"));
    Ok(())
}

async fn measure(
    client: &LockClient,
    backend: BenchBackend,
    options: &WatchBenchOptions,
) -> anyhow::Result<String> {
    let answered: Answered = Arc::default();
    let granted_seen = Arc::new(AtomicU64::new(0));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut watchers = tokio::task::JoinSet::new();
    for _ in 0..options.watchers {
        let mut watcher = client.admin().watch("bench:", None).await?;
        let (granted_seen, mut stopped) = (granted_seen.clone(), stopped.clone());
        watchers.spawn(async move {
            // Each grant's arrival here; matched with its answer at the writer afterwards.
            let mut arrivals = Vec::new();
            let mut received = 0_u64;
            loop {
                let item = tokio::select! {
                    item = watcher.next() => item,
                    _ = stopped.wait_for(|stop| *stop) => break,
                };
                let Ok(WatchItem::Event(event)) = item else {
                    continue;
                };
                received += 1;
                if event.kind == EventKind::Granted {
                    granted_seen.fetch_add(1, Ordering::Relaxed);
                    arrivals.push((
                        (event.lock_key.to_string(), event.fencing_token.0),
                        Instant::now(),
                    ));
                }
            }
            Ok::<_, anyhow::Error>((received, arrivals))
        });
    }
    let written = write(client, &answered, Duration::from_secs(options.seconds)).await?;
    let all = written * options.watchers as u64;
    let drained = Instant::now();
    while granted_seen.load(Ordering::Relaxed) < all && drained.elapsed() < DRAIN {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(true);
    let answered = answered
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let (mut delays, mut received, mut seen_once) = (Vec::new(), 0, true);
    while let Some(done) = watchers.join_next().await {
        let (count, arrivals) = done??;
        received += count;
        let distinct: std::collections::HashSet<_> = arrivals.iter().map(|(key, _)| key).collect();
        seen_once &= distinct.len() == arrivals.len();
        for (key, at) in arrivals {
            if let Some(answer) = answered.get(&key) {
                delays.push(at.saturating_duration_since(*answer));
            }
        }
    }
    anyhow::ensure!(
        delays.len() as u64 == all && seen_once,
        "watchers saw {} of {all} grants within {DRAIN:?} (each once: {seen_once})",
        delays.len()
    );
    delays.sort();
    let at = |q: f64| delays[((delays.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3;
    let seconds = options.seconds as f64;
    Ok(format!(
        "| {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} |",
        match backend {
            BenchBackend::Postgres => "PostgreSQL",
            BenchBackend::Etcd => "etcd",
        },
        options.watchers,
        written as f64 / seconds,
        received as f64 / options.watchers as f64 / seconds,
        at(0.5),
        at(0.99),
        at(1.0)
    ))
}

/// Takes and releases distinct keys for `run`; the grants written.
async fn write(client: &LockClient, answered: &Answered, run: Duration) -> anyhow::Result<u64> {
    let session = client.open_session("bench-writer").await?;
    let began = Instant::now();
    let mut written = 0_u64;
    while began.elapsed() < run {
        let key = LockKey::parse(format!("bench:{written}"))?;
        let Some(held) = session
            .acquire(&key, Duration::from_secs(10), &AcquirePolicy::TRY_ONCE)
            .await?
        else {
            continue;
        };
        answered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((key.to_string(), held.fencing_token().0), Instant::now());
        session.release(held).await?;
        written += 1;
    }
    session.close().await;
    Ok(written)
}
