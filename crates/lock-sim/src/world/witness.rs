//! The checkers' own records, kept beside the model rather than read from it: the highest
//! token the resource accepted per payout, payouts ever ambiguous, every token granted per
//! key (to whom, as what), losses the SDK reported, revoked grants, abandoned requests and
//! the request each grant was made for. The only code that writes them; the checkers read
//! them.

use std::collections::{BTreeMap, BTreeSet};

use lock_api::{FencingToken, GrantScope, LockKey, SessionId};
use lock_store::RequestId;

use crate::sched::Nanos;

/// What the checkers witnessed.
#[derive(Debug)]
pub(super) struct Witness {
    /// The highest token the resource accepted per payout.
    accepted_max: Vec<i64>,
    /// Payouts that were ever `RAIL_AMBIGUOUS` (I5's witness, not the model's state).
    ambiguous: Vec<bool>,
    /// Every token granted, by key: the session it went to and what it held of its key
    /// (I3's witness, and the witness that a writer's token is above every reader's before).
    tokens: BTreeMap<(LockKey, FencingToken), (SessionId, GrantScope)>,
    /// Per key: the highest token granted, and the highest a reader was granted.
    highest: BTreeMap<LockKey, (FencingToken, Option<FencingToken>)>,
    /// Grants each client's SDK reported lost, by client and key, until that client asks
    /// for the key again (a loss is final: no answer may revive it).
    reported_lost: BTreeMap<(usize, LockKey), FencingToken>,
    /// Grants an operator revoked: their holders may believe they hold until their next
    /// renewal (revocation ends exclusion of beliefs by design; the fence still protects).
    revoked: BTreeSet<(LockKey, FencingToken)>,
    /// Requests a replica abandoned (ended without telling their client of a grant), and
    /// when: the orphan check's witness.
    abandoned: BTreeMap<RequestId, Nanos>,
    /// The request each grant was made for, by key and token, as the simulation saw it made
    /// (not as the store records it): `NONE` once another request of its session was granted
    /// it too. The orphan check's other witness.
    made_for: BTreeMap<(LockKey, FencingToken), RequestId>,
}

impl Witness {
    /// Nothing witnessed yet, for `payouts` payouts.
    pub(super) fn new(payouts: usize) -> Self {
        Self {
            accepted_max: vec![0; payouts],
            ambiguous: vec![false; payouts],
            tokens: BTreeMap::new(),
            highest: BTreeMap::new(),
            reported_lost: BTreeMap::new(),
            revoked: BTreeSet::new(),
            abandoned: BTreeMap::new(),
            made_for: BTreeMap::new(),
        }
    }

    /// The resource accepted a write of `payout` with `token`: the higher token it had
    /// accepted before, when this one is below it (a superseded write accepted).
    pub(super) fn accepted(&mut self, payout: usize, token: i64) -> Option<i64> {
        let highest = self.accepted_max[payout];
        self.accepted_max[payout] = highest.max(token);
        (token < highest).then_some(highest)
    }

    /// Whether `payout` was ever ambiguous.
    pub(super) fn was_ambiguous(&self, payout: usize) -> bool {
        self.ambiguous[payout]
    }

    /// `payout` is ambiguous now (when `now` is true): ambiguous once, ambiguous for good.
    pub(super) fn ambiguous(&mut self, payout: usize, now: bool) {
        self.ambiguous[payout] |= now;
    }

    /// Grant `token` of `key` to `session`, holding `scope` of it, was answered (or made):
    /// what it is against every grant of the key before it. Recorded whatever it is.
    pub(super) fn granted(
        &mut self,
        key: &LockKey,
        token: FencingToken,
        session: SessionId,
        scope: GrantScope,
    ) -> Granted {
        let writer = scope == GrantScope::Exclusive;
        if let Some((to, was)) = self.tokens.get(&(key.clone(), token)) {
            return match (*to == session, *was) {
                (true, _) => Granted::Again,
                (false, GrantScope::Shared) if writer => Granted::BelowReader(token),
                (false, _) => Granted::Twice(*to),
            };
        }
        self.tokens.insert((key.clone(), token), (session, scope));
        let Some((highest, reader)) = self.highest.get_mut(key) else {
            let reader = (scope == GrantScope::Shared).then_some(token);
            self.highest.insert(key.clone(), (token, reader));
            return Granted::New {
                after_readers: false,
            };
        };
        let was = (*highest, *reader);
        *highest = (*highest).max(token);
        if scope == GrantScope::Shared {
            *reader = Some(reader.map_or(token, |r| r.max(token)));
        }
        match was {
            (_, Some(reader)) if writer && token <= reader => Granted::BelowReader(reader),
            (highest, _) if token <= highest => Granted::Below(highest),
            (_, reader) => Granted::New {
                after_readers: writer && reader.is_some(),
            },
        }
    }

    /// What grant `token` of `key` held of its key, if it was granted.
    pub(super) fn scope_granted(&self, key: &LockKey, token: FencingToken) -> Option<GrantScope> {
        self.tokens
            .get(&(key.clone(), token))
            .map(|(_, scope)| *scope)
    }

    /// Client `c`'s SDK reported grant `token` of `key` lost.
    pub(super) fn lost(&mut self, c: usize, key: LockKey, token: FencingToken) {
        self.reported_lost.insert((c, key), token);
    }

    /// Client `c` asks for `key` anew: the SDK may rightly hold it again.
    pub(super) fn asks_again(&mut self, c: usize, key: &LockKey) {
        self.reported_lost.remove(&(c, key.clone()));
    }

    /// Client `c` lost its session: its reported losses end with it.
    pub(super) fn session_lost(&mut self, c: usize) {
        self.reported_lost.retain(|(lost_by, _), _| *lost_by != c);
    }

    /// Every reported loss not yet asked for again: (client, key) and token.
    pub(super) fn reported_lost(&self) -> impl Iterator<Item = (&(usize, LockKey), &FencingToken)> {
        self.reported_lost.iter()
    }

    /// An operator revoked grant `token` of `key`.
    pub(super) fn revoke(&mut self, key: LockKey, token: FencingToken) {
        self.revoked.insert((key, token));
    }

    /// Whether grant `token` of `key` was revoked.
    pub(super) fn is_revoked(&self, key: &LockKey, token: FencingToken) -> bool {
        !self.revoked.is_empty() && self.revoked.contains(&(key.clone(), token))
    }

    /// A replica abandoned `request` at `now`.
    pub(super) fn abandon(&mut self, request: RequestId, now: Nanos) {
        self.abandoned.insert(request, now);
    }

    /// When `request` was abandoned, if it was (and not forgotten).
    pub(super) fn abandoned_at(&self, request: RequestId) -> Option<Nanos> {
        self.abandoned.get(&request).copied()
    }

    /// Forgets abandons older than `horizon` before `now`; whether any remain.
    pub(super) fn keep_abandons_within(&mut self, now: Nanos, horizon: Nanos) -> bool {
        self.abandoned
            .retain(|_, at| now.saturating_sub(*at) <= horizon);
        !self.abandoned.is_empty()
    }

    /// Grant `token` of `key` was made (or made again) for `request`. Made again for another
    /// request of its session, it is no single request's.
    pub(super) fn made(&mut self, key: &LockKey, token: FencingToken, request: RequestId) {
        let made = self.made_for.entry((key.clone(), token)).or_insert(request);
        if *made != request {
            *made = RequestId::NONE;
        }
    }

    /// Grant `token` of `key`, which no answer carried, was made for `request` (unless it
    /// is already known to have been made for another).
    pub(super) fn made_unanswered(
        &mut self,
        key: LockKey,
        token: FencingToken,
        request: RequestId,
    ) {
        self.made_for.entry((key, token)).or_insert(request);
    }

    /// The request grant `token` of `key` was made for.
    pub(super) fn made_for(&self, key: &LockKey, token: FencingToken) -> Option<RequestId> {
        self.made_for.get(&(key.clone(), token)).copied()
    }
}

/// A grant against every grant of its key before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Granted {
    /// A new token, above every one before it; `after_readers` when it is a writer's (the
    /// key alone) and readers were granted the key before.
    New { after_readers: bool },
    /// The same session's token again (a re-grant).
    Again,
    /// A token granted before to this other session.
    Twice(SessionId),
    /// A writer's new token at or below this reader's token, granted before it.
    BelowReader(FencingToken),
    /// A new token at or below the key's highest before it.
    Below(FencingToken),
}
