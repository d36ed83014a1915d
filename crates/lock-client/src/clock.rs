//! The `Clock` seam: a monotonic nanosecond source and sleeps, so tests and the simulation
//! drive time. Expiry decisions use nothing else: never a wall clock.
//!
//! Readings are `u64` nanoseconds that may wrap; compare them only with `deadline_passed` and
//! `nanos_until` of `lock_core` (subtraction), never with `<` on raw values.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

/// A boxed sleep future.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Monotonic time and sleeping.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Nanoseconds on a monotonic scale with an arbitrary origin.
    fn now_nanos(&self) -> u64;
    /// A future that completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Sleep;
}

/// The production clock: Linux `CLOCK_BOOTTIME` (monotonic, and it keeps counting while the
/// host is suspended, so a frozen machine wakes up past its deadlines rather than before
/// them), falling back to `std::time::Instant` elsewhere; sleeps on tokio's timer.
#[derive(Debug, Clone)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    #[cfg(target_os = "linux")]
    fn boottime_nanos() -> Option<u64> {
        let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
        let secs = u64::try_from(now.tv_sec()).ok()?;
        let nanos = u64::try_from(now.tv_nsec()).ok()?;
        Some(secs.wrapping_mul(1_000_000_000).wrapping_add(nanos))
    }

    #[cfg(not(target_os = "linux"))]
    fn boottime_nanos() -> Option<u64> {
        None
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_nanos(&self) -> u64 {
        Self::boottime_nanos()
            .unwrap_or_else(|| u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }
}

#[cfg(test)]
mod tests {
    use lock_core::deadline_passed;

    use super::*;

    #[test]
    fn the_system_clock_never_goes_back() {
        let clock = SystemClock::new();
        let mut last = clock.now_nanos();
        for _ in 0..1_000 {
            let now = clock.now_nanos();
            assert!(
                !deadline_passed(last, now) || now == last,
                "time went back: {last} -> {now}"
            );
            last = now;
        }
    }
}
