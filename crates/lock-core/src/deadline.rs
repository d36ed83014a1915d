//! The deadline arithmetic, pure: the usable part of a lease (the safety margin rounded up,
//! so a deadline errs early), the heartbeat's period and the guarantee it gives right after
//! a tick, and the longest grace a supervisor may give a process it tells to stop.

use std::time::Duration;

/// Heartbeat divisor (the seed's assumption): three periods fit in the usable lease, so two
/// consecutive lost heartbeats are tolerated before the local deadline passes.
pub const HEARTBEAT_DIVISOR: u32 = 3;
/// A grant is renewed on the tick that finds less than this many periods left.
pub const RENEW_BELOW_PERIODS: u32 = 2;
/// Shortest heartbeat period, whatever the leases: bounds the tick rate.
pub const MIN_HEARTBEAT_PERIOD_MS: u64 = 10;

/// The usable part of a lease in nanoseconds: `lease × (1 − margin)`, the margin rounded up
/// so a deadline errs early.
pub fn usable_nanos(safety_margin: f64, lease_ms: u64) -> u64 {
    debug_assert!(
        (0.0..1.0).contains(&safety_margin),
        "a safety margin lies in [0, 1): {safety_margin}"
    );
    let lease_nanos = lease_ms.saturating_mul(1_000_000);
    let margin_nanos = (lease_nanos as f64 * safety_margin).ceil() as u64;
    let usable = lease_nanos.saturating_sub(margin_nanos);
    // The usable part is the lease less at least the whole margin (to the nanosecond).
    debug_assert!(
        usable as f64 <= lease_nanos as f64 * (1.0 - safety_margin) + 1.0,
        "usable {usable} ns of a {lease_ms} ms lease keeps less than the margin {safety_margin}"
    );
    usable
}

/// The longest a supervisor may give a process between telling it to stop (at the grant's
/// conservative deadline) and killing it: half of the margin, `(lease − usable) / 2`. The
/// server keeps the lease at least `lease × margin` past that deadline on a true clock; the
/// other half is left for clock-rate drift and for delivering the loss.
pub fn stop_grace_limit(safety_margin: f64, lease_ms: u64) -> Duration {
    let lease_nanos = lease_ms.saturating_mul(1_000_000);
    Duration::from_nanos(lease_nanos.saturating_sub(usable_nanos(safety_margin, lease_ms)) / 2)
}

/// The heartbeat period for a basis (the session TTL, or a shorter live lease):
/// usable basis / [`HEARTBEAT_DIVISOR`], at least [`MIN_HEARTBEAT_PERIOD_MS`].
pub fn heartbeat_period(safety_margin: f64, basis_ms: u64) -> Duration {
    let period_nanos = usable_nanos(safety_margin, basis_ms) / u64::from(HEARTBEAT_DIVISOR);
    Duration::from_nanos(period_nanos).max(Duration::from_millis(MIN_HEARTBEAT_PERIOD_MS))
}

/// The guarantee the heartbeat gives a caller: right after a tick, every live grant whose
/// lease is at least `basis_ms` has at least this much time before its conservative deadline
/// (a tick renews anything under [`RENEW_BELOW_PERIODS`] periods; a renewal restores the
/// whole usable lease). A worst-case write that needs more can never be guarded.
pub fn remaining_after_tick(safety_margin: f64, basis_ms: u64) -> Duration {
    let usable = usable_nanos(safety_margin, basis_ms);
    Duration::from_nanos(usable / u64::from(HEARTBEAT_DIVISOR) * u64::from(RENEW_BELOW_PERIODS))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_margin_rounds_up_so_deadlines_err_early() {
        assert_eq!(usable_nanos(0.3, 1), 700_000);
        assert_eq!(usable_nanos(0.333_333_333, 1), 666_666);
        let huge = usable_nanos(0.3, u64::MAX);
        assert!(
            huge > u64::MAX / 2 && huge < u64::MAX,
            "saturates, never wraps: {huge}"
        );
    }

    #[test]
    fn a_stop_grace_fits_in_half_the_margin() {
        assert_eq!(stop_grace_limit(0.3, 10_000), Duration::from_millis(1_500));
        assert_eq!(stop_grace_limit(0.25, 1_000), Duration::from_millis(125));
        assert_eq!(stop_grace_limit(0.3, 0), Duration::ZERO);
    }

    #[test]
    fn the_guarantee_after_a_tick_is_two_periods_of_the_usable_lease() {
        assert_eq!(
            remaining_after_tick(0.3, 10_000),
            Duration::from_nanos(7_000 * MS / 3 * 2)
        );
        assert_eq!(
            heartbeat_period(0.3, 1),
            Duration::from_millis(MIN_HEARTBEAT_PERIOD_MS)
        );
    }
}
