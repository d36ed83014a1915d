//! Watching at the lock service (C3 W1): a watcher's read of a page of the store's events
//! (`LockStore::events_after`) through a replica's `ClockCheckedStore`, as lock-server's
//! watch stream reads it, and the checker's own reads of the store's log, without a replica.

use lock_api::LockEvent;
use lock_store::{EVENT_PAGE_MAX, LockStore};

use super::{LockAnswer, LockService, now_or_never};
use crate::sched::{MS, Nanos};

/// How far past the run the checker's last reap looks: past every lease, session and step of
/// the store's clock.
const PAST_EVERY_LEASE: Nanos = 3_600_000 * MS;

impl LockService {
    /// Replica `replica` reads a page of events under `prefix` after `after` at `now`, as
    /// lock-server's watch stream does (at most `EVENT_PAGE_MAX`); a read, answered while the
    /// store refuses writes too; `None` when the replica is down.
    pub fn events_after(
        &mut self,
        now: Nanos,
        replica: usize,
        prefix: &str,
        after: u64,
    ) -> Option<LockAnswer> {
        if !self.up[replica] {
            return None;
        }
        self.env.set_now(now);
        let page = now_or_never(self.replicas[replica].events_after(prefix, after, EVENT_PAGE_MAX))
            .unwrap_or_else(|e| panic!("memory store failed: {e}"));
        Some(LockAnswer::Page(page))
    }

    /// The store's log after `after` as it stands: the highest position it forgot and every
    /// event it keeps after `after` (the checker's read, around the paging watchers read
    /// through).
    pub fn logged_after(&self, after: u64) -> (u64, Vec<LockEvent>) {
        self.store.logged_after(after)
    }

    /// The checker's last reap, at an instant past every lease and session after `now`:
    /// every grant still in the store then is live (one handed over by this reap).
    pub fn reap_past_every_lease(&mut self, now: Nanos) -> Nanos {
        let late = now + PAST_EVERY_LEASE;
        self.reap(late);
        late
    }
}
