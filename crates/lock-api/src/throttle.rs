//! A log throttle: at most one line per interval for a repeated warning, saying how many
//! were suppressed since the last one. A failing dependency then costs a line every few
//! seconds, not thousands per second.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lets one event through per `interval` and counts the others.
#[derive(Debug)]
pub struct Throttle {
    interval: Duration,
    state: Mutex<ThrottleState>,
}

#[derive(Debug, Default)]
struct ThrottleState {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    /// A throttle letting one event through per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            state: Mutex::new(ThrottleState::default()),
        }
    }

    /// `Some(n)` when this event may be logged, `n` being how many were suppressed since
    /// the last one logged; `None` when it is to be suppressed.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    /// [`Throttle::allow`] at a given instant (for tests).
    pub fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match state.last {
            Some(last) if now.saturating_duration_since(last) < self.interval => {
                state.suppressed += 1;
                None
            }
            _ => {
                state.last = Some(now);
                Some(std::mem::take(&mut state.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_interval_and_the_suppressed_are_counted() {
        let throttle = Throttle::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(throttle.allow_at(t0), Some(0));
        for ms in [1, 100, 4_999] {
            assert_eq!(throttle.allow_at(t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(throttle.allow_at(t0 + Duration::from_secs(5)), Some(3));
        assert_eq!(throttle.allow_at(t0 + Duration::from_secs(6)), None);
        assert_eq!(throttle.allow_at(t0 + Duration::from_secs(11)), Some(1));
    }
}
