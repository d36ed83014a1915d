//! Full-jitter exponential backoff: attempt `n` sleeps uniformly in
//! `[0, min(cap, base · 2^n)]` (the AWS "full jitter" scheme).

use std::time::Duration;

/// The upper bound of the sleep after attempt `attempt` (0-based).
pub fn ceiling(base: Duration, cap: Duration, attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(cap)
}

/// A sleep drawn uniformly from `[0, ceiling(base, cap, attempt)]` using `rng`.
pub fn full_jitter(
    base: Duration,
    cap: Duration,
    attempt: u32,
    rng: &mut fastrand::Rng,
) -> Duration {
    let top = u64::try_from(ceiling(base, cap, attempt).as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.u64(0..=top))
}

/// A sleep drawn uniformly from the upper half of `[0, ceiling(base, cap, attempt)]`
/// ("equal jitter"): spread like full jitter, but never near zero, for a retry that must
/// give the other side time (a quota that frees only when someone leaves).
pub fn equal_jitter(
    base: Duration,
    cap: Duration,
    attempt: u32,
    rng: &mut fastrand::Rng,
) -> Duration {
    let top = u64::try_from(ceiling(base, cap, attempt).as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(top / 2 + rng.u64(0..=top - top / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_then_caps() {
        let (base, cap) = (Duration::from_millis(25), Duration::from_millis(500));
        let tops: Vec<u128> = (0..8).map(|n| ceiling(base, cap, n).as_millis()).collect();
        assert_eq!(tops, vec![25, 50, 100, 200, 400, 500, 500, 500]);
        assert_eq!(
            ceiling(base, cap, 200),
            cap,
            "huge attempt numbers do not overflow"
        );
    }

    #[test]
    fn draws_stay_inside_the_jitter_bounds_and_spread_over_them() {
        let (base, cap) = (Duration::from_millis(25), Duration::from_millis(500));
        let mut rng = fastrand::Rng::with_seed(7);
        for attempt in 0..10 {
            let top = ceiling(base, cap, attempt);
            let draws: Vec<Duration> = (0..2_000)
                .map(|_| full_jitter(base, cap, attempt, &mut rng))
                .collect();
            assert!(draws.iter().all(|d| *d <= top), "attempt {attempt}");
            let low = draws.iter().filter(|d| **d < top / 4).count();
            let high = draws.iter().filter(|d| **d > top * 3 / 4).count();
            assert!(
                low > 300 && high > 300,
                "attempt {attempt}: not uniform ({low} low, {high} high)"
            );
        }
    }

    #[test]
    fn equal_jitter_stays_in_the_upper_half() {
        let (base, cap) = (Duration::from_millis(100), Duration::from_millis(2_000));
        let mut rng = fastrand::Rng::with_seed(8);
        for attempt in 0..8 {
            let top = ceiling(base, cap, attempt);
            let draws: Vec<Duration> = (0..2_000)
                .map(|_| equal_jitter(base, cap, attempt, &mut rng))
                .collect();
            assert!(
                draws.iter().all(|d| *d >= top / 2 && *d <= top),
                "attempt {attempt}"
            );
            let high = draws.iter().filter(|d| **d > top * 3 / 4).count();
            assert!(high > 700 && high < 1_300, "attempt {attempt}: {high} high");
        }
    }
}
