//! `harness bench locks --backend etcd`: our lock-server on etcd against etcd's own lock API
//! on the same etcd, in one run.
//!
//! Starts one etcd member with its data on disk, the real lock-server binary on it, then for
//! 1, 8 and 32 clients and two workloads (distinct keys, one hot key) runs acquire+release
//! cycles for a fixed time on each side: HTTP clients of the lock-server (a refused acquire
//! is retried at once and not counted), and `etcd-client`'s lock/unlock with one lease per
//! client (etcd queues waiters itself). Reports granted locks per second and p50/p99 of a
//! granted cycle, and the ratio ours/etcd.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use etcd_client::{Client, LockOptions};
use reqwest::StatusCode;
use serde_json::{Value, json};
use test_support::etcd::EtcdCluster;

use crate::bench::{BENCH_LEASE_MS, Figures, LockBenchOptions, figures, open_session};
use crate::stack::{LockStoreAt, spawn_lock_server_at};

/// Client counts of the table.
const CLIENT_COUNTS: [usize; 3] = [1, 8, 32];
/// TTL of each etcd-lock client's lease (seconds): longer than any run.
const ETCD_LOCK_LEASE_SECONDS: i64 = 60;

/// Runs the etcd comparison and prints its table.
pub async fn run(options: &LockBenchOptions) -> anyhow::Result<()> {
    let work = tempfile::Builder::new()
        .prefix("lock-bench-etcd-")
        .tempdir()?;
    let cluster = EtcdCluster::start_on_disk(1, work.path())
        .await
        .map_err(anyhow::Error::msg)?;
    let endpoints = cluster.endpoints();
    let store = LockStoreAt::Etcd {
        endpoints: endpoints.clone(),
        prefix: "/lock-bench/".into(),
    };
    let server = spawn_lock_server_at(
        "lock-server",
        &store,
        &[
            ("LOCK_SESSION_TTL", "60s".into()),
            ("RUST_LOG", "warn".into()),
        ],
        work.path(),
    )
    .await?;
    let http = crate::stack::lock_http(test_support::keys::LOCK_CLIENT_TOKEN)?;
    let etcd = Client::connect(&endpoints, None)
        .await
        .context("connect to etcd")?;
    let duration = Duration::from_secs(options.seconds);
    println!(
        "etcd 1 member (data on disk), {} s per side; a cycle is acquire + release of a granted lock",
        options.seconds
    );
    println!(
        "\n| clients | keys | lock-server on etcd granted/s | p50 ms | p99 ms | etcd lock API granted/s | p50 ms | p99 ms | ratio ours/etcd |\n|---|---|---|---|---|---|---|---|---|"
    );
    for clients in CLIENT_COUNTS {
        for hot in [false, true] {
            let ours = ours_side(&http, &server.url, clients, duration, hot).await?;
            let theirs = etcd_side(&etcd, clients, duration, hot).await?;
            println!(
                "| {clients} | {} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {:.2} |",
                if hot { "hot" } else { "distinct" },
                ours.per_second,
                ours.p50_ms,
                ours.p99_ms,
                theirs.per_second,
                theirs.p50_ms,
                theirs.p99_ms,
                ours.per_second / theirs.per_second
            );
        }
    }
    drop(server);
    drop(cluster);
    Ok(())
}

fn key_of(hot: bool, client: usize) -> String {
    if hot {
        "bench.hot".to_owned()
    } else {
        format!("bench.{client}")
    }
}

/// HTTP clients of the lock-server; only granted cycles count.
async fn ours_side(
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
        let (http, base, key) = (http.clone(), base.to_owned(), key_of(hot, client));
        tasks.spawn(async move {
            let session = open_session(&http, &base, &format!("bench-{client}")).await?;
            let mut latencies = Vec::new();
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
                    continue; // refused: retried at once, the cycle's clock keeps running
                }
                if status != StatusCode::OK {
                    bail!("acquire answered {status}: {body}");
                }
                let token = body["fencing_token"]
                    .as_u64()
                    .context("grant without token")?;
                http.post(format!("{base}/v1/locks/{key}/release"))
                    .json(&json!({"session_id": session, "fencing_token": token}))
                    .send()
                    .await?
                    .error_for_status()?;
                latencies.push(begun.elapsed().as_micros() as u64);
                begun = Instant::now();
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

/// etcd's own lock API: lock (waits in etcd's queue) and unlock, one lease per client.
async fn etcd_side(
    etcd: &Client,
    clients: usize,
    duration: Duration,
    hot: bool,
) -> anyhow::Result<Figures> {
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
            let mut latencies = Vec::new();
            loop {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                let begun = now;
                let locked = tokio::time::timeout(
                    deadline - now,
                    etcd.lock(name.as_str(), Some(LockOptions::new().with_lease(lease))),
                )
                .await;
                let Ok(locked) = locked else {
                    break; // still queued when the time ran out: not a granted cycle
                };
                let key = locked?.key().to_vec();
                etcd.unlock(key).await?;
                latencies.push(begun.elapsed().as_micros() as u64);
            }
            etcd.lease_revoke(lease).await?;
            anyhow::Ok(latencies)
        });
    }
    let mut all = Vec::new();
    for result in tasks.join_all().await {
        all.extend(result?);
    }
    Ok(figures(all, started.elapsed()))
}
