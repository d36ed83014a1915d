//! The permit and shared-hold rows of `harness bench locks` (ADR 0007): every client takes
//! one hot key and releases it, in three ways in the same run: as a lock (the baseline: one
//! holder at a time), as one of `PERMITS` permits of a semaphore, and as a reader beside the
//! other readers. Cycles per second, the acquires that gave up, and the waits, with each
//! side's rate as a ratio to the lock's.

use std::time::Duration;

use lock_api::Claim;
use lock_client::{AcquirePolicy, ClientBuilder};

use crate::bench_load::claim_side;

/// A semaphore's permits in the permit rows.
pub const PERMITS: u32 = 4;

/// The three ways of taking the hot key.
const SIDES: [(Claim, &str); 3] = [
    (Claim::Exclusive, "SDK, a lock"),
    (Claim::Permit { permits: PERMITS }, "SDK, one of 4 permits"),
    (Claim::Shared, "SDK, a reader (shared)"),
];

/// The hot key of `claim`'s side (one key per side: a key is of one kind while held).
fn hot_key(claim: Claim) -> &'static str {
    match claim {
        Claim::Exclusive => "bench.hot.lock",
        Claim::Permit { .. } => "bench.hot.pool",
        Claim::Shared => "bench.hot.doc",
    }
}

/// The permits and shared-holds table: for each client count, the three sides, each rate a
/// ratio to the lock's in the same run.
pub async fn print_rows(
    config: &ClientBuilder,
    clients: &[usize],
    duration: Duration,
) -> anyhow::Result<()> {
    println!(
        "\nPermits and shared holds: every client takes one hot key and releases it.\n\n\
         | clients | side | cycles/s | gave up | wait p50 ms | wait p99 ms | ratio to a lock |\n\
         |---|---|---|---|---|---|---|"
    );
    for &n in clients {
        let mut lock_rate = None;
        for (claim, side) in SIDES {
            let key_for = move |_| hot_key(claim).to_owned();
            let figures =
                claim_side(config, n, duration, key_for, claim, AcquirePolicy::DEFAULT).await?;
            let base = *lock_rate.get_or_insert(figures.granted_per_s);
            let [p50, p99] = figures
                .wait_ms
                .map_or(["-".into(), "-".into()], |[p50, p99, _]| {
                    [format!("{p50:.1}"), format!("{p99:.1}")]
                });
            let ratio = figures.granted_per_s / base.max(f64::MIN_POSITIVE);
            println!(
                "| {n} | {side} | {:.0} | {} | {p50} | {p99} | {ratio:.2} |",
                figures.granted_per_s, figures.gave_up
            );
        }
    }
    Ok(())
}
