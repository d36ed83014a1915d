//! `EventRing`: the replica's window of etcd's history as lock events (C3 W1), filled in
//! revision order by the replica's one event watch (`events.rs`) and read by every watch
//! stream it serves. It knows how far it is whole (`seen`: every change up to that revision
//! is in) and what it no longer holds (`floor`: positions before its start or dropped).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use lock_api::LockEvent;
use lock_store::{EventPage, HeadSink};

/// Events the ring keeps; older ones are gone (a watcher after them is told of a gap).
pub(super) const EVENTS_KEPT: usize = 10_000;

/// Bits of a position below its revision: a revision's changes keep their order (a
/// revision holds at most two events per operation of one transaction, far below 2^16).
pub(super) const INDEX_BITS: u32 = 16;
/// The index that stands for "every change of the revision".
pub(super) const WHOLE_REVISION: u64 = (1 << INDEX_BITS) - 1;

/// The position of the `index`-th change of `revision`.
pub(super) fn position(revision: i64, index: usize) -> u64 {
    (u64::try_from(revision).unwrap_or(0) << INDEX_BITS) | (index as u64).min(WHOLE_REVISION - 1)
}

/// The position after every change of `revision`.
pub(super) fn through_revision(revision: i64) -> u64 {
    (u64::try_from(revision).unwrap_or(0) << INDEX_BITS) | WHOLE_REVISION
}

#[derive(Debug, Default)]
struct Window {
    events: VecDeque<LockEvent>,
    floor: u64,
    seen: i64,
}

/// The ring, whether its watch was started, and who is told its head.
#[derive(Default)]
pub(super) struct EventRing {
    window: Mutex<Window>,
    started: AtomicBool,
    sink: OnceLock<HeadSink>,
}

impl std::fmt::Debug for EventRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRing")
            .field("window", &self.window)
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

impl EventRing {
    /// Whether this call is the first to start the ring's watch.
    pub(super) fn start(&self) -> bool {
        !self.started.swap(true, Ordering::SeqCst)
    }

    /// `sink` is told the head as the ring grows (the replica's watch streams); the first
    /// one set stays.
    pub(super) fn tell(&self, sink: HeadSink) {
        let _ = self.sink.set(sink);
    }

    /// Who is told the head, if anyone.
    pub(super) fn sink(&self) -> Option<HeadSink> {
        self.sink.get().cloned()
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The revision the ring is whole through (0: nothing yet).
    pub(super) fn seen(&self) -> i64 {
        self.window().seen
    }

    /// The ring starts at `revision`: positions before it are not held (none before the
    /// first revision).
    pub(super) fn begin_at(&self, revision: i64) {
        let mut window = self.window();
        // A hole: revisions between what the ring holds and `revision` (the first start,
        // or etcd compacted past the ring's head). A restart right after `seen` is none.
        if revision > 1 && revision - 1 > window.seen {
            window.floor = window.floor.max(position(revision, 0) - 1);
        }
        window.seen = window.seen.max(revision - 1);
    }

    /// `revision`'s events, in order: the ring is whole through it. The new head position.
    pub(super) fn append(&self, revision: i64, events: Vec<LockEvent>) -> u64 {
        Self::push_into(&mut self.window(), revision, events)
    }

    fn push_into(window: &mut Window, revision: i64, events: Vec<LockEvent>) -> u64 {
        debug_assert!(revision > window.seen, "revisions come in order");
        window.events.extend(events);
        while window.events.len() > EVENTS_KEPT {
            if let Some(gone) = window.events.pop_front() {
                window.floor = window.floor.max(gone.position);
            }
        }
        window.seen = window.seen.max(revision);
        through_revision(window.seen)
    }

    /// Up to `limit` events of keys under `prefix` after `after` (before the ring has seen
    /// a revision, a page reaches no further than `after`).
    pub(super) fn page(&self, prefix: &str, after: u64, limit: usize) -> EventPage {
        let window = self.window();
        let head = match window.seen {
            0 => after,
            seen => through_revision(seen),
        };
        EventPage::of(&window.events, prefix, after, limit, (head, window.floor))
    }
}
