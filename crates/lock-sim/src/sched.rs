//! Virtual time and the event queue: a min-heap on (true time, sequence number), so events
//! at the same instant run in the order they were scheduled and every run of a seed is the
//! same run. No wall clock and no threads anywhere in a run.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Nanoseconds of true (simulated) time since the run began.
pub type Nanos = u64;

/// One millisecond in nanoseconds.
pub const MS: Nanos = 1_000_000;

/// The queue of pending events.
#[derive(Debug)]
pub struct Queue<E> {
    heap: BinaryHeap<Reverse<(Nanos, u64)>>,
    events: std::collections::HashMap<u64, E>,
    next_seq: u64,
    now: Nanos,
}

impl<E> Queue<E> {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            events: std::collections::HashMap::new(),
            next_seq: 0,
            now: 0,
        }
    }

    /// The current true time.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Schedules `event` at `at` (never before now).
    pub fn at(&mut self, at: Nanos, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse((at.max(self.now), seq)));
        self.events.insert(seq, event);
    }

    /// Schedules `event` `after` nanoseconds from now.
    pub fn after(&mut self, after: Nanos, event: E) {
        self.at(self.now.saturating_add(after), event);
    }

    /// The next event, advancing time to it.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let Reverse((at, seq)) = self.heap.pop()?;
        self.now = at;
        let event = self.events.remove(&seq)?;
        Some((at, event))
    }
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_run_in_time_then_schedule_order() {
        let mut q = Queue::new();
        q.at(5, "b");
        q.at(1, "a");
        q.at(5, "c");
        assert_eq!(q.pop(), Some((1, "a")));
        q.after(4, "d");
        assert_eq!(q.pop(), Some((5, "b")));
        assert_eq!(q.pop(), Some((5, "c")));
        assert_eq!(q.pop(), Some((5, "d")));
        assert_eq!(q.pop(), None);
    }
}
