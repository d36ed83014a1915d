//! The memory store's watch log (C3 W1). Each write's events are derived from what it left
//! in the state, against what the write before it left: a grant that appeared was granted;
//! one that vanished ended, revoked when the key's revocation note moved, expired when its
//! lease or session had ended, else released. One comparison after every write, so no write
//! path can forget to tell; a proclaim is logged as it is made. The log keeps the last
//! [`EVENTS_KEPT`] events (fewer when the store was built to keep fewer:
//! `MemoryStore::with_events_kept`).

use std::collections::{BTreeMap, VecDeque};

use lock_api::{EventKind, FencingToken, GrantScope, LeaderValue, LockEvent, LockKey, OwnerId};

use crate::events::EventPage;

/// Events the log keeps; older ones are gone (a watcher after them is told of a gap).
pub(super) const EVENTS_KEPT: usize = 10_000;

/// A grant as a comparison sees it.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) owner: Option<OwnerId>,
    pub(super) scope: GrantScope,
    /// When its lease or its session ended or ends, the earlier.
    pub(super) ends: u64,
}

/// The log and what the last comparison saw.
#[derive(Debug)]
pub(super) struct EventLog {
    events: VecDeque<LockEvent>,
    /// How many events it keeps.
    kept: usize,
    floor: u64,
    head: u64,
    seen: BTreeMap<(LockKey, FencingToken), Seen>,
    revoked: BTreeMap<LockKey, FencingToken>,
}

impl Default for EventLog {
    fn default() -> Self {
        Self {
            events: VecDeque::new(),
            kept: EVENTS_KEPT,
            floor: 0,
            head: 0,
            seen: BTreeMap::new(),
            revoked: BTreeMap::new(),
        }
    }
}

impl EventLog {
    /// Keeps the last `kept` events (at least one) instead of [`EVENTS_KEPT`].
    pub(super) fn keep(&mut self, kept: usize) {
        self.kept = kept.max(1);
    }

    /// The oldest position forgotten, and every event kept after `after`, whatever its key.
    pub(super) fn kept_after(&self, after: u64) -> (u64, Vec<LockEvent>) {
        let from = self.events.partition_point(|e| e.position <= after);
        (self.floor, self.events.range(from..).cloned().collect())
    }

    /// The highest position given out.
    pub(super) fn head(&self) -> u64 {
        self.head
    }

    /// Up to `limit` events of keys under `prefix` after `after`.
    pub(super) fn page(&self, prefix: &str, after: u64, limit: usize) -> EventPage {
        EventPage::of(&self.events, prefix, after, limit, (self.head, self.floor))
    }

    fn push(&mut self, mut event: LockEvent) {
        self.head += 1;
        event.position = self.head;
        self.events.push_back(event);
        if self.events.len() > self.kept
            && let Some(gone) = self.events.pop_front()
        {
            self.floor = gone.position;
        }
    }
}

impl EventLog {
    /// Logs a proclaim: each one is an event, even of the value announced already (no
    /// comparison of the state could tell it).
    pub(super) fn proclaimed(&mut self, key: &LockKey, token: FencingToken, value: &LeaderValue) {
        let mut event = LockEvent::new(key.clone(), EventKind::Proclaimed, token);
        event.value = Some(value.clone());
        self.push(event);
    }

    /// Logs what changed since the last note, as of `now`: `grants` is every grant the
    /// state holds now, `revoked` each key's last revocation's token (a proclaim is logged
    /// when made).
    pub(super) fn note(
        &mut self,
        now: u64,
        grants: BTreeMap<(LockKey, FencingToken), Seen>,
        revoked: BTreeMap<LockKey, FencingToken>,
    ) {
        let before = std::mem::take(&mut self.seen);
        for ((key, token), was) in &before {
            if grants.contains_key(&(key.clone(), *token)) {
                continue;
            }
            let kind = if revoked.get(key) != self.revoked.get(key) {
                EventKind::Revoked
            } else if was.ends <= now {
                EventKind::Expired
            } else {
                EventKind::Released
            };
            self.push(LockEvent::new(key.clone(), kind, *token));
        }
        for ((key, token), seen) in &grants {
            if !before.contains_key(&(key.clone(), *token)) {
                let mut event = LockEvent::new(key.clone(), EventKind::Granted, *token);
                event.owner_id.clone_from(&seen.owner);
                event.scope = seen.scope;
                self.push(event);
            }
        }
        self.seen = grants;
        self.revoked = revoked;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(key: &str) -> LockEvent {
        let key = LockKey::parse(key).unwrap_or_else(|e| panic!("{e}"));
        LockEvent::new(key, EventKind::Granted, FencingToken(1))
    }

    #[test]
    fn a_short_window_forgets_the_oldest_and_raises_the_floor() {
        let mut log = EventLog::default();
        log.keep(2);
        for key in ["a", "b", "c"] {
            log.push(event(key));
        }
        let (floor, kept) = log.kept_after(0);
        assert_eq!(floor, 1, "position 1 is forgotten");
        let positions: Vec<u64> = kept.iter().map(|e| e.position).collect();
        assert_eq!(positions, [2, 3]);
        assert_eq!(log.kept_after(2).1.len(), 1);
        let page = log.page("", 0, 10);
        assert_eq!(
            (page.floor, page.through),
            (1, 3),
            "a watcher after 0 is behind the floor"
        );
    }
}
