//! Key sets at the lock service (ADR 0007): a replica's store call for a whole set, through
//! its clock guard to the store's `acquire_set` (never batched: lock-server's group commit
//! sends a set alone), and the check that a set is granted all or nothing, made where that
//! rule lives: right after each call, against the store's own live grants before it.

use lock_api::{FencingToken, LockKey, SessionId};
use lock_store::{AcquireSpec, LockStore, Refusal, SetOutcome, StoreError};

use super::calls::{LockAnswer, Member};
use super::{LockService, now_or_never, refusal};
use crate::sched::Nanos;

/// A set's store call: what came of it, and how it broke all or nothing, if it did.
#[derive(Debug)]
pub struct SetCall {
    /// The store's outcome, or the lock surface's refusal (a store error, a grant the clock
    /// guard withheld, a store that takes no writes).
    pub outcome: Result<SetOutcome, LockAnswer>,
    /// What the store's live grants show of a set partly held after the call.
    pub partly: Option<String>,
    /// The set's keys the store holds for the session after the call, with their tokens,
    /// when the call newly granted one of them (so the store granted the set, whatever was
    /// answered: a grant the clock guard withheld is seen here); empty otherwise.
    pub granted: Vec<(LockKey, FencingToken)>,
}

impl LockService {
    /// Replica `replica`'s store call at `now` for the set `keys` (sorted, each once) of
    /// `session` as `spec` (its places kept for `spec.queue_ms`): `None` when the replica is
    /// down. The store's live grants of the set's keys are read before and after the call.
    pub fn acquire_set(
        &mut self,
        now: Nanos,
        replica: usize,
        keys: &[LockKey],
        session: SessionId,
        spec: AcquireSpec,
    ) -> Option<SetCall> {
        if !self.up[replica] {
            return None;
        }
        if self.not_leader {
            return Some(SetCall {
                outcome: Err(LockAnswer::NotLeader),
                partly: None,
                granted: Vec::new(),
            });
        }
        self.env.set_now(now);
        // The replica's `lock.default.lock-delay`: the SDK names none.
        let spec = AcquireSpec {
            lock_delay_ms: self.lock_delay_ms,
            ..spec
        };
        let before = self.held_by(replica, keys, session);
        let result = now_or_never(self.replicas[replica].acquire_set(keys, session, spec));
        let after = self.held_by(replica, keys, session);
        let partly = all_or_nothing(keys, &before, &after, &result);
        let newly = before
            .iter()
            .zip(&after)
            .any(|(was, is)| is.is_some() && was != is);
        let granted = keys
            .iter()
            .zip(&after)
            .filter(|_| newly)
            .filter_map(|(key, is)| Some((key.clone(), (*is)?)))
            .collect();
        match &result {
            Ok(SetOutcome::Refused {
                refusal: Refusal::Delayed { .. },
                ..
            }) => self.delayed += 1,
            Err(StoreError::Unavailable(_)) => self.withheld += 1,
            _ => {}
        }
        Some(SetCall {
            outcome: result.map_err(refusal),
            partly,
            granted,
        })
    }

    /// The token of each of `keys` the replica's store holds live for `session` now.
    fn held_by(
        &self,
        replica: usize,
        keys: &[LockKey],
        session: SessionId,
    ) -> Vec<Option<FencingToken>> {
        let live = self.stores[replica].live_grants();
        keys.iter()
            .map(|key| {
                live.iter()
                    .find(|(k, s, _)| k == key && *s == session)
                    .map(|(_, _, token)| *token)
            })
            .collect()
    }

    /// The answer to `session`'s set at `now` from its store outcome, after the request
    /// waited `waited_ms`: every member, each recorded as a grant (the witness that tokens are
    /// unique and rise per key), or a refusal.
    pub fn answer_set(
        &mut self,
        now: Nanos,
        session: SessionId,
        outcome: &SetOutcome,
        waited_ms: u64,
    ) -> LockAnswer {
        let SetOutcome::Granted { grants, .. } = outcome else {
            return LockAnswer::Held;
        };
        let members = grants
            .iter()
            .map(|grant| {
                self.grants.push((
                    now,
                    grant.lock_key.clone(),
                    grant.fencing_token,
                    grant.session_id,
                ));
                let (lease_ms, expires) = self.told(grant);
                Member {
                    key: grant.lock_key.clone(),
                    token: grant.fencing_token,
                    lease_ms,
                    expires,
                }
            })
            .collect();
        LockAnswer::SetGranted {
            members,
            session,
            waited_ms,
        }
    }
}

/// A set is granted all or nothing: what the store's live grants of the set's `keys` for
/// its session, `before` and `after` one call, show against what the call answered. A grant
/// must leave every key held with the token answered for it; a refusal must leave no key
/// newly granted; an error (a grant the clock guard withheld) must leave every key or none.
fn all_or_nothing(
    keys: &[LockKey],
    before: &[Option<FencingToken>],
    after: &[Option<FencingToken>],
    result: &Result<SetOutcome, StoreError>,
) -> Option<String> {
    let newly: Vec<&LockKey> = keys
        .iter()
        .zip(before.iter().zip(after))
        .filter(|(_, (was, is))| is.is_some() && was != is)
        .map(|(key, _)| key)
        .collect();
    let unheld: Vec<&LockKey> = keys
        .iter()
        .zip(after)
        .filter(|(_, is)| is.is_none())
        .map(|(key, _)| key)
        .collect();
    match result {
        Ok(SetOutcome::Granted { grants, .. }) => {
            let answered: Vec<&LockKey> = grants.iter().map(|g| &g.lock_key).collect();
            if !answered.iter().copied().eq(keys.iter()) {
                return Some(format!(
                    "the set {keys:?} was answered grants of {answered:?} (held now: {after:?})"
                ));
            }
            let wrong: Vec<String> = grants
                .iter()
                .zip(after)
                .filter(|(g, is)| **is != Some(g.fencing_token))
                .map(|(g, is)| {
                    let held = is.map_or_else(|| "nothing".to_owned(), |t| format!("token {t}"));
                    format!(
                        "{} answered token {} but held {held}",
                        g.lock_key, g.fencing_token
                    )
                })
                .collect();
            (!wrong.is_empty()).then(|| format!("the set {keys:?} granted, yet {wrong:?}"))
        }
        Ok(SetOutcome::Refused { key, refusal }) => (!newly.is_empty()).then(|| {
            format!(
                "the set {keys:?} was refused on {key} ({refusal:?}), yet {newly:?} were newly \
                 granted to it"
            )
        }),
        Err(err) => (!newly.is_empty() && !unheld.is_empty()).then(|| {
            format!(
                "the set {keys:?} ended in an error ({err}) with {newly:?} newly granted and \
                 {unheld:?} not held"
            )
        }),
    }
}
