//! Readers' and permits' acquires at the replicas (ADR 0007), served as lock-server serves
//! them: a share's acquire is a store call of its own, never in a batch (`Batched` decides
//! locks only), made a store round trip after it arrives (a crash of the replica in between
//! loses it); its answer then goes the way a lock's goes (`answered`: checked, abandoned when
//! its client went or the clock guard withheld it, parked when it may wait and was refused,
//! then driven by the same `WaitPlan`; a share's waiter is woken to ask, never handed the
//! key). A writer's acquire of the doc key is a lock's, batched. After every store call on a
//! shared key what came of it is counted, and after a permit's the store's live permits of
//! the key are checked against its count ("semaphore bound in the store").

use lock_api::{Claim, GrantScope, LockKey};
use lock_store::{AcquireOutcome, AcquireSpec, Refusal};

use super::links::Node;
use super::{Event, SharedKey, World};
use crate::service::shares::permits_broken;
use crate::service::{LockAnswer, LockCall};

impl World {
    /// Whether parked request `id` is a share's (a reader's or a permit's).
    pub(super) fn is_share(&self, id: u64) -> bool {
        self.parked
            .get(&id)
            .is_some_and(|p| p.set.is_none() && p.claim != Claim::Exclusive)
    }

    /// A share's acquire `req` reaches replica `r`, which names it: its store call is made a
    /// store round trip later, alone.
    pub(super) fn share_arrives(&mut self, r: usize, from: Node, req: u64, call: LockCall) {
        if !self.service.up[r] {
            return self.answered(r, from, req, &call, None);
        }
        let restarts = self.service.restarts[r];
        let after = self.store_call_nanos();
        self.q
            .after(after, Event::ShareCall(r, restarts, from, req, call));
    }

    /// Replica `r` (that had come back up `restarts` times when the request arrived) makes a
    /// share's store call: a try (a waiting request's queued calls follow if it is refused);
    /// answered, parked, or lost with the replica.
    pub(super) fn share_call(
        &mut self,
        r: usize,
        restarts: u64,
        from: Node,
        req: u64,
        call: LockCall,
    ) {
        let now = self.q.now();
        let LockCall::Acquire {
            key,
            session,
            lease_ms,
            request,
            claim,
            ..
        } = &call
        else {
            return;
        };
        let mut answer = None;
        if self.service.restarts[r] == restarts {
            let spec = AcquireSpec {
                request: *request,
                ..AcquireSpec::lease(*lease_ms)
            }
            .claiming(*claim);
            if let Some(result) = self.service.acquire_queued(now, r, key, *session, spec) {
                self.shared_key_called(r, key, *claim, &result, false);
                answer = Some(match result {
                    Ok(outcome) => self.service.answer_acquire(now, key, &outcome, 0),
                    Err(refusal) => refusal,
                });
            }
        }
        self.answered(r, from, req, &call, answer);
    }

    /// Replica `r`'s store call for `claim` on `key` (`parked`: a waiting request's call)
    /// came to `result`: counted when the key is a shared one; after a permit's call the
    /// store's live permits of the key must fit its count, one a slot.
    pub(super) fn shared_key_called(
        &mut self,
        r: usize,
        key: &LockKey,
        claim: Claim,
        result: &Result<AcquireOutcome, LockAnswer>,
        parked: bool,
    ) {
        let Some(which) = SharedKey::of(key) else {
            return;
        };
        match result {
            Ok(AcquireOutcome::Refused(refusal)) => {
                self.share_refused(key, claim, *refusal, parked)
            }
            Ok(AcquireOutcome::Granted { .. }) if parked && claim != Claim::Exclusive => {
                self.coverage.hit("a share granted after waiting");
            }
            Err(LockAnswer::KindConflict) => {
                self.coverage.hit("a kind conflict answered by the store");
            }
            _ => {}
        }
        if which == SharedKey::Pool {
            let now = self.q.now();
            let scopes = self.service.live_shares(now, r, key);
            if let Some(detail) = permits_broken(self.cfg.permits, &scopes) {
                let detail = format!("{key} after a store call of replica r{r}: {detail}");
                self.violate("semaphore bound in the store", &[Node::Replica(r)], detail);
            }
        }
    }

    /// What a refusal of `claim` on shared key `key` refused it for, counted.
    fn share_refused(&mut self, key: &LockKey, claim: Claim, refusal: Refusal, parked: bool) {
        let holder = match refusal {
            Refusal::Held { holder_token, .. } => self.witness.scope_granted(key, holder_token),
            Refusal::Queued { .. } => {
                self.coverage.hit(match claim {
                    Claim::Permit { .. } => "a permit refused: others queued first",
                    Claim::Shared => "a reader refused: a writer queued first",
                    Claim::Exclusive => "a writer refused: others queued first",
                });
                return;
            }
            Refusal::Delayed { .. } => {
                self.coverage.hit("a share's key found in a lock-delay");
                return;
            }
        };
        let what = match (claim, holder) {
            (Claim::Permit { .. }, _) => "a permit refused: every permit held",
            (Claim::Shared, Some(GrantScope::Exclusive)) if parked => {
                "a reader waited for a writer"
            }
            (Claim::Shared, _) => "a reader refused: a writer holds the key",
            (Claim::Exclusive, Some(GrantScope::Shared)) if parked => "a writer waited for readers",
            (Claim::Exclusive, Some(GrantScope::Shared)) => {
                "a writer refused: readers hold the key"
            }
            (Claim::Exclusive, _) => "a writer refused: a writer holds the key",
        };
        self.coverage.hit(what);
    }
}
