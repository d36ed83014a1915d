//! The heartbeat's tick grid, on the caller's monotonic clock in wrapping nanoseconds.

use std::time::Duration;

use crate::time::nanos_until;

/// The heartbeat's tick grid: ticks stay on a grid (a slow tick does not push the next one
/// back); after a stall longer than a period, a fresh grid starts from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickGrid {
    next_tick_nanos: u64,
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl TickGrid {
    /// The first tick one `period` after `now_nanos`.
    pub fn new(now_nanos: u64, period: Duration) -> Self {
        Self {
            next_tick_nanos: now_nanos.wrapping_add(duration_nanos(period)),
        }
    }

    /// When the next tick is due.
    pub fn next_tick_nanos(&self) -> u64 {
        self.next_tick_nanos
    }

    /// How long to wait at `now_nanos` before the next tick.
    pub fn wait(&self, now_nanos: u64) -> Duration {
        Duration::from_nanos(nanos_until(now_nanos, self.next_tick_nanos))
    }

    /// The period shrank (a shorter lease arrived): tick no later than one new `period`
    /// from `now_nanos`.
    pub fn tighten(&mut self, now_nanos: u64, period: Duration) {
        let sooner = now_nanos.wrapping_add(duration_nanos(period));
        if nanos_until(sooner, self.next_tick_nanos) > 0 {
            self.next_tick_nanos = sooner;
        }
    }

    /// A tick ran; `now_nanos` is after it.
    pub fn advance(&mut self, now_nanos: u64, period: Duration) {
        let period_nanos = duration_nanos(period);
        self.next_tick_nanos = self.next_tick_nanos.wrapping_add(period_nanos);
        if nanos_until(self.next_tick_nanos, now_nanos) > period_nanos {
            self.next_tick_nanos = now_nanos;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// Close to `u64::MAX`: every test crosses the wrap-around.
    const START: u64 = u64::MAX - 1_500 * MS;

    #[test]
    fn the_tick_grid_stays_on_its_grid_and_restarts_after_a_stall() {
        let period = Duration::from_millis(100);
        let mut grid = TickGrid::new(START, period);
        assert_eq!(grid.wait(START), period);
        grid.advance(START.wrapping_add(130 * MS), period);
        assert_eq!(grid.next_tick_nanos(), START.wrapping_add(200 * MS));
        grid.advance(START.wrapping_add(1_000 * MS), period);
        assert_eq!(
            grid.next_tick_nanos(),
            START.wrapping_add(1_000 * MS),
            "fresh grid"
        );
        grid.tighten(START.wrapping_add(1_000 * MS), Duration::from_millis(10));
        assert_eq!(
            grid.next_tick_nanos(),
            START.wrapping_add(1_000 * MS),
            "never later"
        );
    }
}
