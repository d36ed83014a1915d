//! Watching (C3 W1): a page of the store's events after a position ([`EventPage`]), the
//! sink a store tells of its head position ([`HeadSink`], [`HeadSlot`]), and the limits a
//! watch reads with.

use lock_api::LockEvent;

/// Most events one [`crate::LockStore::events_after`] call answers.
pub const EVENT_PAGE_MAX: usize = 256;

/// Events after a position, as one read of the store saw them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventPage {
    /// Events of watched keys after the position asked, lowest position first.
    pub events: Vec<LockEvent>,
    /// The read covered every position up to this one (at least the last event's): the
    /// next read starts after it.
    pub through: u64,
    /// Positions at or below this one are no longer kept: a watcher after a lower position
    /// missed events (C3 W1's gap).
    pub floor: u64,
}

impl EventPage {
    /// A page of `kept` (a log's events, lowest position first): up to `limit` of keys under
    /// `prefix` after `after`; a full page reaches its last event, a short one reaches
    /// `head`, the log's highest position given (one rule for every log a store keeps).
    pub fn of<'a>(
        kept: impl IntoIterator<Item = &'a LockEvent>,
        prefix: &str,
        after: u64,
        limit: usize,
        (head, floor): (u64, u64),
    ) -> Self {
        let events: Vec<LockEvent> = (kept.into_iter())
            .filter(|e| e.position > after && lock_api::watched(prefix, &e.lock_key))
            .take(limit)
            .cloned()
            .collect();
        let through = match events.last() {
            Some(last) if events.len() == limit => last.position,
            _ => head,
        };
        Self {
            events,
            through: through.max(after),
            floor,
        }
    }
}

/// Told the store's head position whenever events may have been added (across replicas
/// where the backend can).
pub type HeadSink = std::sync::Arc<dyn Fn(u64) + Send + Sync>;

/// A store's [`HeadSink`], once `watch_events` set it.
#[derive(Default)]
pub struct HeadSlot(std::sync::OnceLock<HeadSink>);

impl HeadSlot {
    /// Sets the sink (once; later calls are ignored).
    pub fn set(&self, sink: HeadSink) {
        let _ = self.0.set(sink);
    }

    /// Tells the sink, if any, of `head`.
    pub fn deliver(&self, head: u64) {
        if let Some(sink) = self.0.get() {
            sink(head);
        }
    }
}

impl std::fmt::Debug for HeadSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadSlot")
            .field("set", &self.0.get().is_some())
            .finish()
    }
}
