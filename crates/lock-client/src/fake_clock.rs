//! `FakeClock` (tests and the feature `test-util`): a [`Clock`] that moves only when told, so a
//! test decides when each deadline passes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::clock::{Clock, Sleep};
use lock_core::deadline_passed;

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
