//! An acquire of a reader's share or of a permit (ADR 0007): read and judged as a lock's
//! round reads and judges its key (`round.rs`: the grant record, the shares, the fence, the
//! delay, the queue), refused outright when the key's live grants are of another kind, then
//! decided by [`decide_shared`] or [`decide_permit`] and committed in one transaction whose
//! compares pin what was read.
//!
//! A share is its own record `P/h/{lock_key}/{token}` on a lease of its own, marked live by
//! the same `gl/{lease}` marker as a grant. Keyed by token rather than by slot: a token is
//! never reused, so a share's record, once gone, never comes back (a read that found it
//! ended stays true, as for markers), renew, release and abandon find it by the token they
//! are given with one read, and the prefix lists a key's shares lowest token first. A
//! permit's slot rides in its record; two permits never share a slot because every grant of
//! the key draws its token from the key's one fence and compares the fence's revision as
//! read, so no share (nor lock) is granted between a decision's read and its commit.

use lock_api::{Claim, FencingToken, GrantScope, LockKey, SessionId};
use lock_store::claim::{HeldAs, conflict, conflict_error};
use lock_store::permits::{PermitDecision, PermitHolder, PermitView, decide_permit};
use lock_store::shared::{Mode, SharedDecision, SharedHolder, SharedView, decide_shared};
use lock_store::{AcquireOutcome, AcquireSpec, Refusal, StoreError};

use super::EtcdStore;
use super::codec::{GrantValue, grant_of};
use super::round::{Judged, KeyRead};

/// Rounds one call of a share's acquire may lose before it answers "others first": few, so
/// that a call on a hot key stays well inside what the client leaves for it after a wait
/// (with four, a 32-client benchmark saw client timeouts; docs/benchmarks.md).
const SHARE_ROUNDS_MAX: u32 = 2;
/// The first lost round's longest backoff before reading again, in microseconds.
const SHARE_BACKOFF_BASE_US: u64 = 500;
/// How many times the backoff doubles (to 4 ms).
const SHARE_BACKOFF_DOUBLINGS: u32 = 3;

/// What a decision on a share said.
enum Decided {
    /// The caller's live share again (its token).
    Again(FencingToken),
    /// A new share.
    New(FencingToken, GrantScope),
    /// None: this answer.
    Refused(Refusal),
}

impl EtcdStore {
    /// An acquire claiming a reader's share or a permit: rounds of read, decide, commit
    /// until one decides.
    pub(super) async fn acquire_share_rounds(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        spare_lease: &mut Option<i64>,
    ) -> Result<AcquireOutcome, StoreError> {
        for round in 0..SHARE_ROUNDS_MAX {
            if let Some(decided) = self.share_round(key, session, spec, spare_lease).await? {
                return Ok(decided);
            }
            if round + 1 == SHARE_ROUNDS_MAX {
                break;
            }
            // Shares of a hot key are granted side by side, so rounds race more than a
            // lock's (which a rival's grant simply answers): back off, jittered, before the
            // next read, so that contenders spread out instead of colliding again.
            let cap_us = SHARE_BACKOFF_BASE_US << round.min(SHARE_BACKOFF_DOUBLINGS);
            tokio::time::sleep(std::time::Duration::from_micros(jitter() % (cap_us + 1))).await;
        }
        // Every round lost to rivals' grants: the key is contended, not the store down.
        // Answered as others being served first (a waiter parks until a free wakes it or its
        // recheck; a try backs off), never as a 503.
        tracing::debug!(event = "share_races_lost", key = %key, rounds = SHARE_ROUNDS_MAX);
        Ok(Refusal::Queued { ahead: 1 }.into())
    }

    /// One round: read, judge, decide, commit. `None` when a write lost a race.
    async fn share_round(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        spare_lease: &mut Option<i64>,
    ) -> Result<Option<AcquireOutcome>, StoreError> {
        let read = self.read_for_acquire(key, session).await?;
        let judged = self.judge(&read, session).await?;
        if let Some(held) = judged.held_as().filter(|h| conflict(spec.claim, Some(*h))) {
            return Err(conflict_error(key, spec.claim, held));
        }
        let decided = match spec.claim {
            Claim::Shared => decide_reader(key, session, &judged)?,
            Claim::Permit { permits } => decide_slot(key, session, permits, &judged)?,
            Claim::Exclusive => unreachable!("a lock is decided by its own round"),
        };
        match decided {
            Decided::Again(token) => {
                let Some(current) = judged.shares.iter().find(|s| s.value.token == token) else {
                    unreachable!("a re-grant is decided on a live share");
                };
                let current = current.clone();
                let regranted = self.regrant(key, current, spec, read.mine.as_ref());
                Ok(regranted.await?.map(|grant| AcquireOutcome::Granted {
                    grant,
                    took_over_expired: false,
                    store_now: None,
                }))
            }
            Decided::New(token, scope) => {
                let share = (token, scope);
                self.commit_share(key, session, spec, &read, share, spare_lease)
                    .await
            }
            Decided::Refused(refusal) => {
                self.refuse(key, session, spec, (&read, &judged), refusal)
                    .await
            }
        }
    }

    /// Commits a new share `(token, scope)` with the compares a grant's commit has (the grant
    /// record, the fence, the delay record and the queue as read; the session live); an
    /// ended grant's record read is deleted. `None` when the commit lost a race (decide
    /// again: readers do not keep each other out, so a lost race is no answer).
    async fn commit_share(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        read: &KeyRead,
        (token, scope): (FencingToken, GrantScope),
        spare_lease: &mut Option<i64>,
    ) -> Result<Option<AcquireOutcome>, StoreError> {
        let lease = self.lease_for(spec.lease_ms, spare_lease).await?;
        let value = GrantValue {
            token,
            session,
            owner: read.me.owner.clone(),
            lease,
            lease_ms: spec.lease_ms,
            lock_delay_ms: spec.lock_delay_ms,
            request: spec.request.0,
            scope,
            permits: match spec.claim {
                Claim::Permit { permits } => Some(permits),
                Claim::Exclusive | Claim::Shared => None,
            },
        };
        let (compares, ops) = self.grant_parts(key, session, read, &value)?;
        let txn = etcd_client::Txn::new().when(compares).and_then(ops);
        if !self.members.txn("acquire share", txn).await?.succeeded() {
            return Ok(None);
        }
        *spare_lease = None;
        // The fence moved: a hint of this key's last lock would fail its compare.
        self.hints.forget(key);
        let ended = read.current.as_ref().map(|old| old.value.lease);
        let delay = read.ended_delay().map(|d| d.value.lease);
        for lease in ended.into_iter().chain(delay) {
            self.members.revoke_lease_later(lease);
        }
        Ok(Some(AcquireOutcome::Granted {
            grant: grant_of(key, &value, spec.lease_ms),
            took_over_expired: false,
            store_now: None,
        }))
    }
}

/// A reader's decision ([`decide_shared`]) on what `judged` saw: the key's writer (its live
/// grant) and its readers, the writers and readers queued ahead.
fn decide_reader(
    key: &LockKey,
    session: SessionId,
    judged: &Judged,
) -> Result<Decided, StoreError> {
    let view = &judged.view;
    let writer = view.holder.map(|h| SharedHolder {
        session: h.session,
        mode: Mode::Exclusive,
        token: h.token,
        free_in_ms: h.free_in_ms,
    });
    let readers = judged.shares.iter().map(|s| SharedHolder {
        session: s.value.session,
        mode: Mode::Shared,
        token: s.value.token,
        // An upper bound: etcd does not say how much of the lease is left.
        free_in_ms: s.value.lease_ms,
    });
    let holders: Vec<SharedHolder> = writer.into_iter().chain(readers).collect();
    let shared = SharedView {
        holders: &holders,
        writers_ahead: view.ahead - judged.readers_ahead,
        readers_ahead: judged.readers_ahead,
        delay_left_ms: view.delay_left_ms,
        last_token: view.last_token,
    };
    Ok(match decide_shared(&shared, session, Mode::Shared) {
        SharedDecision::Regrant { token } => Decided::Again(token),
        SharedDecision::Grant { token } => Decided::New(token, GrantScope::Shared),
        SharedDecision::ModeConflict { .. } => {
            return Err(conflict_error(key, Claim::Shared, HeldAs::Exclusive));
        }
        SharedDecision::Refuse(refusal) => Decided::Refused(refusal),
    })
}

/// A permit's decision ([`decide_permit`]) on what `judged` saw: the key's live permits (its
/// live grants are permits, or none: another kind was refused before), everyone queued
/// ahead.
fn decide_slot(
    key: &LockKey,
    session: SessionId,
    permits: u32,
    judged: &Judged,
) -> Result<Decided, StoreError> {
    let view = &judged.view;
    let holders: Vec<PermitHolder> = (judged.shares.iter())
        .map(|s| PermitHolder {
            session: s.value.session,
            slot: match s.value.scope {
                GrantScope::Permit { slot } => slot,
                GrantScope::Exclusive | GrantScope::Shared => {
                    unreachable!("a key's live shares are of one kind")
                }
            },
            token: s.value.token,
            free_in_ms: s.value.lease_ms,
        })
        .collect();
    let slots = PermitView {
        permits: judged.shares.first().and_then(|s| s.value.permits),
        holders: &holders,
        delay_left_ms: view.delay_left_ms,
        ahead: view.ahead,
        last_token: view.last_token,
    };
    Ok(match decide_permit(&slots, session, permits) {
        PermitDecision::Regrant { token, .. } => Decided::Again(token),
        PermitDecision::Grant { slot, token } => Decided::New(token, GrantScope::Permit { slot }),
        PermitDecision::CountMismatch { permits: held } => {
            let asked = Claim::Permit { permits };
            return Err(conflict_error(key, asked, HeldAs::Permits(held)));
        }
        PermitDecision::Refuse(refusal) => Decided::Refused(refusal),
    })
}

/// A random number, for a backoff's jitter (std's per-hasher random keys: no crate for it).
fn jitter() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
