//! Payouts stuck non-terminal: a gauge an alert can page on (`deploy/prometheus/alerts.yml`).
//! A payout no executor can finish (poisoned fence, rail never answering, a bug) must be
//! seen by an operator, who repairs it (re-fence) or investigates; the pipeline itself skips
//! it and carries on.

use std::time::Duration;

use crate::store::PayStore;

/// `payouts_stuck`: non-terminal payouts not updated for longer than `PAYMENT_STUCK_AFTER`.
pub const STUCK: &str = "payouts_stuck";
/// `payouts_open_oldest_age_seconds`: age of the oldest non-terminal payout (0 when none).
pub const OLDEST_OPEN_AGE: &str = "payouts_open_oldest_age_seconds";
/// How often the gauges are refreshed: well under any sensible `for:` of an alert.
const SCAN_INTERVAL_MS: u64 = 10_000;

/// Refreshes the gauges forever (a failed scan keeps the last values and is logged).
pub async fn watch(store: PayStore, stuck_after: Duration) {
    metrics::gauge!(STUCK).set(0.0);
    metrics::gauge!(OLDEST_OPEN_AGE).set(0.0);
    let mut tick = tokio::time::interval(Duration::from_millis(SCAN_INTERVAL_MS));
    loop {
        tick.tick().await;
        match store.open_payout_ages(stuck_after).await {
            Ok((stuck, oldest_seconds)) => {
                metrics::gauge!(STUCK).set(stuck as f64);
                metrics::gauge!(OLDEST_OPEN_AGE).set(oldest_seconds);
            }
            Err(err) => tracing::warn!(event = "stuck_scan_failed", error = %err),
        }
    }
}
