//! The key-set rows of `harness bench locks` (ADR 0007): each client takes two keys of a
//! small pool of accounts at once, as a payout between two accounts does, and releases them.
//! Two ways in the same run: as a set (`acquire_set`: one request, all or nothing, nothing
//! held while waiting) and, the baseline, as two acquires in sorted key order (the usual way
//! to take two locks without deadlock, which holds the first while it waits for the second).

use std::time::{Duration, Instant};

use lock_api::LockKey;
use lock_client::{AcquirePolicy, ClientBuilder, LockClientSession};

use crate::bench_load::{BENCH_LEASE_MS, ClientTally, SideFigures, join};

/// The accounts the clients' pairs are drawn from: few, so pairs overlap under load.
pub const ACCOUNTS: usize = 4;

/// How a client takes its two keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeTwo {
    /// One `acquire_set` of both.
    AsSet,
    /// Two `acquire`s, in sorted key order.
    Ordered,
}

impl TakeTwo {
    fn side(self) -> &'static str {
        match self {
            Self::AsSet => "SDK, a key set",
            Self::Ordered => "SDK, two acquires in key order",
        }
    }
}

/// The two accounts client `client` takes on its `cycle`-th pair: distinct, sorted, varying.
fn pair(client: usize, cycle: usize) -> anyhow::Result<[LockKey; 2]> {
    let first = (client + cycle) % ACCOUNTS;
    let second = (first + 1 + (client * 7 + cycle * 3) % (ACCOUNTS - 1)) % ACCOUNTS;
    let (low, high) = (first.min(second), first.max(second));
    Ok([
        LockKey::parse(format!("bench.acct.{low}"))?,
        LockKey::parse(format!("bench.acct.{high}"))?,
    ])
}

/// One pair taken `how` and released: whether it was taken within the policy's budget.
async fn take_two(
    session: &LockClientSession,
    keys: &[LockKey; 2],
    how: TakeTwo,
) -> anyhow::Result<bool> {
    let (lease, policy) = (
        Duration::from_millis(BENCH_LEASE_MS),
        AcquirePolicy::DEFAULT,
    );
    let lost = |lost| anyhow::anyhow!("a benchmark grant was lost: {lost:?}");
    match how {
        TakeTwo::AsSet => {
            let Some(set) = session.acquire_set(keys, lease, &policy).await? else {
                return Ok(false);
            };
            session.release_set(set).await.map_err(lost)?;
        }
        TakeTwo::Ordered => {
            let Some(first) = session.acquire(&keys[0], lease, &policy).await? else {
                return Ok(false);
            };
            let second = session.acquire(&keys[1], lease, &policy).await?;
            session.release(first).await.map_err(lost)?;
            let Some(second) = second else {
                return Ok(false);
            };
            session.release(second).await.map_err(lost)?;
        }
    }
    Ok(true)
}

/// `clients` clients, each with its own `LockClient` and session, taking pairs `how` for
/// `duration`: pairs taken per second, the acquires that gave up, and the waits.
pub async fn pairs_side(
    config: &ClientBuilder,
    clients: usize,
    duration: Duration,
    how: TakeTwo,
) -> anyhow::Result<SideFigures> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let config = config.clone();
        tasks.spawn(async move {
            let lock_client = config.build()?;
            let session = lock_client.open_session(&format!("bench-{client}")).await?;
            let mut tally = ClientTally::default();
            let mut cycle = 0;
            while Instant::now() < deadline {
                let begun = Instant::now();
                if take_two(&session, &pair(client, cycle)?, how).await? {
                    tally.waits_us.push(begun.elapsed().as_micros() as u64);
                    tally.granted += 1;
                } else {
                    tally.gave_up += 1;
                }
                cycle += 1;
            }
            session.close().await;
            tokio::task::spawn_blocking(move || lock_client.close()).await?;
            anyhow::Ok(tally)
        });
    }
    let (tallies, elapsed) = join(started, tasks).await?;
    Ok(SideFigures::of(&tallies, elapsed, false))
}

/// The key-set table: for each client count, both ways of taking two keys, the set's rate as
/// a ratio to the ordered acquires' in the same run.
pub async fn print_rows(
    config: &ClientBuilder,
    clients: &[usize],
    duration: Duration,
) -> anyhow::Result<()> {
    println!(
        "\nKey sets: each client takes two of {ACCOUNTS} accounts and releases them.\n\n\
         | clients | side | pairs/s | gave up | wait p50 ms | wait p99 ms | ratio to two acquires |\n\
         |---|---|---|---|---|---|---|"
    );
    for &n in clients {
        let ordered = pairs_side(config, n, duration, TakeTwo::Ordered).await?;
        let set = pairs_side(config, n, duration, TakeTwo::AsSet).await?;
        for (how, figures) in [(TakeTwo::Ordered, &ordered), (TakeTwo::AsSet, &set)] {
            let [p50, p99] = figures
                .wait_ms
                .map_or(["-".into(), "-".into()], |[p50, p99, _]| {
                    [format!("{p50:.1}"), format!("{p99:.1}")]
                });
            let ratio = figures.granted_per_s / ordered.granted_per_s.max(f64::MIN_POSITIVE);
            println!(
                "| {n} | {} | {:.0} | {} | {p50} | {p99} | {ratio:.2} |",
                how.side(),
                figures.granted_per_s,
                figures.gave_up
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_is_two_distinct_sorted_accounts() {
        for client in 0..8 {
            for cycle in 0..16 {
                let [a, b] = pair(client, cycle).unwrap();
                assert!(a < b, "{a} < {b}");
            }
        }
    }
}
