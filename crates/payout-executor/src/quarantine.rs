//! Backing off: the pause between scans while a service keeps failing, and the payouts this
//! worker skips for a while after a claim of theirs was fenced while it held their lock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest pause between scans while a service keeps failing.
pub const ERROR_BACKOFF_MAX_MS: u64 = 5_000;
/// How long a payout whose claim was fenced while this worker held its lock is skipped at
/// first: such a fence was raised by a token the lock service has not issued yet (a forged
/// or foreign one), or by a worker that took over this one's expired lease and is on it.
/// Doubles per repeat, up to [`QUARANTINE_MAX_MS`].
pub const QUARANTINE_FIRST_MS: u64 = 30_000;
/// Longest quarantine.
pub const QUARANTINE_MAX_MS: u64 = 600_000;

/// The pause after `failures` consecutive failed scans: the poll interval doubled per
/// failure, capped at [`ERROR_BACKOFF_MAX_MS`], with up to a quarter of jitter so that
/// workers do not return in step.
pub fn error_backoff(poll_interval: Duration, failures: u32) -> Duration {
    let cap = Duration::from_millis(ERROR_BACKOFF_MAX_MS);
    let doubled = poll_interval.saturating_mul(1_u32 << failures.min(16).saturating_sub(1));
    let base = doubled.min(cap);
    base.mul_f64(0.75 + fastrand::f64() * 0.25)
}

/// Payouts this worker skips for a while: fenced at claim while it held their lock.
#[derive(Debug, Default)]
pub struct Quarantine {
    /// payout id -> (skipped until, times fenced in a row).
    entries: Mutex<HashMap<i64, (Instant, u32)>>,
}

impl Quarantine {
    /// Skips `payout_id` for the next period (doubling per repeat).
    pub fn add(&self, payout_id: i64, now: Instant) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let repeats = entries.get(&payout_id).map_or(0, |(_, n)| *n);
        let period_ms = QUARANTINE_FIRST_MS
            .saturating_mul(1_u64 << repeats.min(16))
            .min(QUARANTINE_MAX_MS);
        entries.insert(
            payout_id,
            (
                now + Duration::from_millis(period_ms),
                repeats.saturating_add(1),
            ),
        );
        metrics::gauge!(QUARANTINED).set(entries.len() as f64);
    }

    /// Forgets `payout_id` (its attempt got somewhere).
    pub fn clear(&self, payout_id: i64) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.remove(&payout_id).is_some() {
            metrics::gauge!(QUARANTINED).set(entries.len() as f64);
        }
    }

    /// The payouts skipped at `now`.
    pub fn skipped(&self, now: Instant) -> Vec<i64> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .iter()
            .filter(|(_, (until, _))| now < *until)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether `payout_id` is to be skipped at `now`.
    pub fn is_skipped(&self, payout_id: i64, now: Instant) -> bool {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .get(&payout_id)
            .is_some_and(|(until, _)| now < *until)
    }
}

/// `executor_quarantined_payouts`: payouts this worker currently skips.
pub const QUARANTINED: &str = "executor_quarantined_payouts";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_payout_is_skipped_for_a_doubling_period() {
        let q = Quarantine::default();
        let t0 = Instant::now();
        assert!(!q.is_skipped(7, t0));
        q.add(7, t0);
        let first = Duration::from_millis(QUARANTINE_FIRST_MS);
        assert!(q.is_skipped(7, t0 + first - Duration::from_millis(1)));
        assert!(!q.is_skipped(7, t0 + first));
        assert!(!q.is_skipped(8, t0), "other payouts are not skipped");
        q.add(7, t0 + first);
        assert!(
            q.is_skipped(7, t0 + first + first + first / 2),
            "the second period doubles"
        );
        q.clear(7);
        assert!(!q.is_skipped(7, t0 + first));
    }

    #[test]
    fn backoff_doubles_from_the_poll_interval_to_its_cap() {
        let poll = Duration::from_millis(100);
        for (failures, base_ms) in [(1, 100), (2, 200), (3, 400), (7, 5_000), (40, 5_000)] {
            let pause = error_backoff(poll, failures);
            let base = Duration::from_millis(base_ms);
            assert!(
                pause <= base && pause >= base.mul_f64(0.75),
                "{failures}: {pause:?}"
            );
        }
    }
}
