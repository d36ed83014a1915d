//! An election at the lock service (C2 §2.4c): a leader's proclaim (L9) and an observer's
//! read of the leader (L7), each a store call of its own through the replica's
//! `ClockCheckedStore` (lock-server's `Batched` passes both through), and the store's live
//! holder of a key as a checker reads it.

use lock_api::{FencingToken, LeaderValue, LockKey, SessionId};
use lock_store::LockStore;

use super::{LockAnswer, LockService, now_or_never, refusal};
use crate::observe::LeaderRead;
use crate::sched::Nanos;

impl LockService {
    /// Replica `replica` makes the store call of a proclaim at `now`: `Proclaimed`, the
    /// store's refusal (`LOCK_LOST` when the grant is not live), `NOT_LEADER` while the
    /// store refuses writes, or `None` when the replica is down.
    pub fn proclaim(
        &mut self,
        now: Nanos,
        replica: usize,
        (key, session, token): (&LockKey, SessionId, FencingToken),
        value: &LeaderValue,
    ) -> Option<LockAnswer> {
        if !self.up[replica] {
            return None;
        }
        if self.not_leader {
            return Some(LockAnswer::NotLeader);
        }
        self.env.set_now(now);
        let result = now_or_never(self.replicas[replica].proclaim(key, session, token, value));
        Some(result.map_or_else(refusal, |()| LockAnswer::Proclaimed))
    }

    /// Replica `replica` reads `key`'s leader at `now` (a read: answered while the store
    /// refuses writes too); `None` when the replica is down.
    pub fn inspect(&mut self, now: Nanos, replica: usize, key: &LockKey) -> Option<LockAnswer> {
        if !self.up[replica] {
            return None;
        }
        self.env.set_now(now);
        let info = now_or_never(self.replicas[replica].get(key))
            .unwrap_or_else(|e| panic!("memory store failed: {e}"));
        // A key held by readers or permits has no leader (the SDK's `Leader::of`).
        let leader = info.filter(|i| i.holders.is_empty()).map(|i| LeaderRead {
            term: i.fencing_token,
            value: i.value,
        });
        Some(LockAnswer::Leader(leader))
    }

    /// The live grant of `key` (its session and token) in the store replica `replica`
    /// serves from, at `now`: a checker's read, leaving the store's clock where it was.
    pub fn live_holder(
        &self,
        now: Nanos,
        replica: usize,
        key: &LockKey,
    ) -> Option<(SessionId, FencingToken)> {
        let before = self.env.true_now();
        self.env.set_now(now);
        let holder = self.stores[replica]
            .live_grants()
            .into_iter()
            .find(|(k, ..)| k == key)
            .map(|(_, session, token)| (session, token));
        self.env.set_now(before);
        holder
    }
}
