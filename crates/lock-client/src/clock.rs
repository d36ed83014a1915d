//! The `Clock` seam: a monotonic nanosecond source and sleeps, so tests and the simulation
//! drive time. Expiry decisions use nothing else: never a wall clock.
//!
//! Readings are `u64` nanoseconds that may wrap; compare them only with [`deadline_passed`]
//! and [`nanos_until`] (subtraction), never with `<` on raw values.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A boxed sleep future.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Monotonic time and sleeping.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Nanoseconds on a monotonic scale with an arbitrary origin.
    fn now_nanos(&self) -> u64;
    /// A future that completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Sleep;
}

pub use lock_core::{deadline_passed, nanos_until};

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

/// A clock that moves only when told: [`FakeClock::advance`], or, with
/// [`FakeClock::auto_advance`], by every sleep. Works on any runtime.
#[derive(Debug, Clone)]
pub struct FakeClock {
    inner: Arc<Mutex<FakeState>>,
}

#[derive(Debug)]
struct FakeState {
    now_nanos: u64,
    auto_advance: bool,
    next_id: u64,
    sleepers: BTreeMap<(u64, u64), oneshot::Sender<()>>,
}

impl FakeClock {
    /// A manual clock starting at `start_nanos` (try values near `u64::MAX` to test wrapping).
    pub fn new(start_nanos: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(FakeState {
                now_nanos: start_nanos,
                auto_advance: false,
                next_id: 0,
                sleepers: BTreeMap::new(),
            })),
        }
    }

    /// A clock where every sleep advances time by its own duration and returns at once.
    pub fn auto_advance(start_nanos: u64) -> Self {
        let clock = Self::new(start_nanos);
        clock.state().auto_advance = true;
        clock
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Moves time forward and wakes every sleeper whose time has come.
    pub fn advance(&self, by: Duration) {
        let mut state = self.state();
        state.now_nanos = state.now_nanos.wrapping_add(duration_nanos(by));
        let now = state.now_nanos;
        let due: Vec<(u64, u64)> = state
            .sleepers
            .keys()
            .copied()
            .filter(|(deadline, _)| deadline_passed(now, *deadline))
            .collect();
        for key in due {
            if let Some(waker) = state.sleepers.remove(&key) {
                let _ = waker.send(());
            }
        }
    }

    /// How many sleeps are waiting.
    pub fn sleepers(&self) -> usize {
        self.state().sleepers.len()
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Clock for FakeClock {
    fn now_nanos(&self) -> u64 {
        self.state().now_nanos
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let mut state = self.state();
        if state.auto_advance {
            state.now_nanos = state.now_nanos.wrapping_add(duration_nanos(duration));
            return Box::pin(std::future::ready(()));
        }
        let deadline = state.now_nanos.wrapping_add(duration_nanos(duration));
        if duration.is_zero() {
            return Box::pin(std::future::ready(()));
        }
        let (tx, rx) = oneshot::channel();
        let id = state.next_id;
        state.next_id += 1;
        state.sleepers.insert((deadline, id), tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

#[cfg(test)]
mod tests {
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

    #[tokio::test]
    async fn fake_sleeps_wake_when_time_is_advanced() {
        let clock = FakeClock::new(u64::MAX - 1_000);
        let sleep = clock.sleep(Duration::from_micros(5));
        assert_eq!(clock.sleepers(), 1);
        clock.advance(Duration::from_micros(4));
        assert_eq!(clock.sleepers(), 1);
        clock.advance(Duration::from_micros(1));
        assert_eq!(clock.sleepers(), 0);
        sleep.await;
    }

    #[tokio::test]
    async fn auto_advance_moves_time_by_each_sleep() {
        let clock = FakeClock::auto_advance(0);
        clock.sleep(Duration::from_millis(3)).await;
        assert_eq!(clock.now_nanos(), 3_000_000);
    }
}
