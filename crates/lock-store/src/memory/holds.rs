//! The memory store's readers and permits (ADR 0007): the shares of a key beside its
//! exclusive grant, how an acquire of one is decided ([`decide_shared`], [`decide_permit`])
//! and carried out, and which waiter a changed share wakes. A share's waiter is never handed
//! a grant in the write that freed it: it is woken to ask.

use chrono::{DateTime, Utc};
use lock_api::{Claim, FencingToken, GrantScope, HolderInfo, LockInfo, LockKey, SessionId};

use super::state::{Delay, Grant, Hold, State, after};
use crate::claim::{HeldAs, conflict, conflict_error};
use crate::permits::{PermitDecision, PermitHolder, PermitView, decide_permit};
use crate::shared::{Mode, SharedDecision, SharedHolder, SharedView, decide_shared};
use crate::{
    AcquireSpec, ExpiredLock, ReapReport, Refusal, Revocation, RevokeNote, StoreError, Wake,
};

/// A share granted: what the client is told of it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Taken {
    pub(super) token: FencingToken,
    pub(super) scope: GrantScope,
    pub(super) lease_ms: u64,
    pub(super) expires: u64,
}

/// What a decision on a share said, before it is carried out.
enum Decided {
    New(FencingToken, GrantScope),
    Again(FencingToken),
}

impl State {
    /// The live shares of `key`.
    pub(super) fn live_holds<'a>(
        &'a self,
        key: &LockKey,
        now: u64,
    ) -> impl Iterator<Item = &'a Hold> + 'a {
        let holds = self.holds.get(key).map_or(&[][..], Vec::as_slice);
        holds.iter().filter(move |h| self.ends(&h.grant) > now)
    }

    fn ends(&self, grant: &Grant) -> u64 {
        grant.ends(self.sessions.get(&grant.session))
    }

    fn free_in_ms(&self, grant: &Grant, now: u64) -> u64 {
        self.ends(grant).saturating_sub(now).div_ceil(1_000_000)
    }

    /// What `key`'s live grants are (`None`: none is live).
    pub(super) fn held_as(&self, key: &LockKey, now: u64) -> Option<HeldAs> {
        if self.live_grant(key, now).is_some() {
            return Some(HeldAs::Exclusive);
        }
        let hold = self.live_holds(key, now).next()?;
        Some(hold.permits.map_or(HeldAs::Shared, HeldAs::Permits))
    }

    /// Refuses `claim` by `session` on a key of another kind, or a writer's claim by a
    /// session that reads the key.
    pub(super) fn check_kind(
        &self,
        key: &LockKey,
        session: SessionId,
        claim: Claim,
        now: u64,
    ) -> Result<(), StoreError> {
        let held = self.held_as(key, now);
        if let Some(held) = held.filter(|_| conflict(claim, held)) {
            return Err(conflict_error(key, claim, held));
        }
        // A session holds a key in one mode: checked before any place is taken.
        let reads = self
            .live_holds(key, now)
            .any(|h| h.grant.session == session);
        if claim == Claim::Exclusive && reads {
            return Err(conflict_error(key, claim, HeldAs::Shared));
        }
        let writes = self
            .live_grant(key, now)
            .is_some_and(|g| g.session == session);
        if claim == Claim::Shared && writes {
            return Err(conflict_error(key, claim, HeldAs::Exclusive));
        }
        Ok(())
    }

    /// Decides and carries out a reader's or a permit's acquire of `key` (the kind already
    /// checked, the caller's place already taken): the share, or why not.
    pub(super) fn acquire_share(
        &mut self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        now: u64,
    ) -> Result<Result<Taken, Refusal>, StoreError> {
        let decided = match spec.claim {
            Claim::Shared => self.decide_reader(key, session, now)?,
            Claim::Permit { permits } => self.decide_permit(key, session, permits, now)?,
            Claim::Exclusive => unreachable!("a lock is decided by `decide`"),
        };
        let taken = match decided {
            Ok(Decided::Again(token)) => self.regrant_share(key, token, spec, now),
            Ok(Decided::New(token, scope)) => {
                self.grant_share(key, session, token, scope, spec, now)
            }
            Err(refusal) => return Ok(Err(refusal)),
        };
        self.leave(key, session);
        Ok(Ok(taken))
    }

    fn decide_reader(
        &self,
        key: &LockKey,
        session: SessionId,
        now: u64,
    ) -> Result<Result<Decided, Refusal>, StoreError> {
        let writer = self.live_grant(key, now).map(|g| (g, Mode::Exclusive));
        let readers = self.live_holds(key, now).map(|h| (&h.grant, Mode::Shared));
        let holders: Vec<SharedHolder> = writer
            .into_iter()
            .chain(readers)
            .map(|(g, mode)| SharedHolder {
                session: g.session,
                mode,
                token: g.token,
                free_in_ms: self.free_in_ms(g, now),
            })
            .collect();
        let (writers_ahead, readers_ahead) = self.modes_ahead(key, session, now);
        let view = SharedView {
            holders: &holders,
            writers_ahead,
            readers_ahead,
            delay_left_ms: self.delay_left(key, session, now).div_ceil(1_000_000),
            last_token: self.last_token(key),
        };
        Ok(match decide_shared(&view, session, Mode::Shared) {
            SharedDecision::Regrant { token } => Ok(Decided::Again(token)),
            SharedDecision::Grant { token } => Ok(Decided::New(token, GrantScope::Shared)),
            SharedDecision::ModeConflict { .. } => {
                return Err(conflict_error(key, Claim::Shared, HeldAs::Exclusive));
            }
            SharedDecision::Refuse(refusal) => Err(refusal),
        })
    }

    fn decide_permit(
        &self,
        key: &LockKey,
        session: SessionId,
        permits: u32,
        now: u64,
    ) -> Result<Result<Decided, Refusal>, StoreError> {
        let holders: Vec<PermitHolder> = self
            .live_holds(key, now)
            .map(|h| PermitHolder {
                session: h.grant.session,
                slot: slot_of(h.scope),
                token: h.grant.token,
                free_in_ms: self.free_in_ms(&h.grant, now),
            })
            .collect();
        let live = self.live_holds(key, now).next().and_then(|h| h.permits);
        let view = PermitView {
            permits: live,
            holders: &holders,
            delay_left_ms: self.delay_left(key, session, now).div_ceil(1_000_000),
            ahead: self.ahead_of(key, session, now),
            last_token: self.last_token(key),
        };
        Ok(match decide_permit(&view, session, permits) {
            PermitDecision::Regrant { token, .. } => Ok(Decided::Again(token)),
            PermitDecision::Grant { slot, token } => {
                Ok(Decided::New(token, GrantScope::Permit { slot }))
            }
            PermitDecision::CountMismatch { permits: held } => {
                let asked = Claim::Permit { permits };
                return Err(conflict_error(key, asked, HeldAs::Permits(held)));
            }
            PermitDecision::Refuse(refusal) => Err(refusal),
        })
    }

    /// Live places of other sessions ahead of `session`'s: (writers, readers).
    fn modes_ahead(&self, key: &LockKey, session: SessionId, now: u64) -> (u64, u64) {
        let Some(queue) = self.queues.get(key) else {
            return (0, 0);
        };
        let mine = queue
            .iter()
            .find(|w| w.session == session)
            .map_or(u64::MAX, |w| w.seq);
        let ahead = queue
            .iter()
            .filter(|w| w.session != session && w.seq < mine && self.waiter_live(w, now));
        let readers = ahead.clone().filter(|w| w.claim == Claim::Shared).count() as u64;
        (ahead.count() as u64 - readers, readers)
    }

    fn last_token(&self, key: &LockKey) -> u64 {
        self.fences.get(key).map_or(0, |t| t.0)
    }

    /// The caller's live share again: its lease and expiry only grow.
    fn regrant_share(
        &mut self,
        key: &LockKey,
        token: FencingToken,
        spec: AcquireSpec,
        now: u64,
    ) -> Taken {
        let hold = self
            .holds
            .get_mut(key)
            .and_then(|holds| holds.iter_mut().find(|h| h.grant.token == token))
            .expect("a re-grant is decided on a live share");
        let grant = &mut hold.grant;
        grant.lease_ms = grant.lease_ms.max(spec.lease_ms);
        grant.expires = grant.expires.max(after(now, grant.lease_ms));
        grant.request = grant.request.after_regrant(spec.request);
        Taken {
            token,
            scope: hold.scope,
            lease_ms: grant.lease_ms,
            expires: grant.expires,
        }
    }

    /// A new share: the key's fence moves and its lock-delay ends; an ended share of the
    /// same session or slot is replaced.
    fn grant_share(
        &mut self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        scope: GrantScope,
        spec: AcquireSpec,
        now: u64,
    ) -> Taken {
        assert!(token.0 > self.last_token(key), "tokens only rise");
        let expires = after(now, spec.lease_ms);
        self.delays.remove(key);
        self.fences.insert(key.clone(), token);
        let permits = match spec.claim {
            Claim::Permit { permits } => Some(permits),
            _ => None,
        };
        let hold = Hold {
            grant: Grant {
                token,
                session,
                lease_ms: spec.lease_ms,
                expires,
                lock_delay_ms: spec.lock_delay_ms,
                request: spec.request,
            },
            scope,
            permits,
        };
        let holds = self.holds.entry(key.clone()).or_default();
        holds.retain(|h| h.grant.session != session && (h.permits.is_none() || h.scope != scope));
        holds.push(hold);
        Taken {
            token,
            scope,
            lease_ms: spec.lease_ms,
            expires,
        }
    }

    /// After `key`'s shares changed while some are live: its head waiter, woken to ask when
    /// its claim could now be granted (a reader with no writer holding; a permit with a
    /// slot free). A writer at the head waits for the last share to end.
    pub(super) fn wake_for_share(&self, key: &LockKey, now: u64) -> Option<Wake> {
        let head = self
            .queues
            .get(key)?
            .iter()
            .filter(|w| self.waiter_live(w, now))
            .min_by_key(|w| w.seq)?;
        let live = self.live_holds(key, now).count();
        let room = match head.claim {
            Claim::Shared => self.live_grant(key, now).is_none(),
            Claim::Permit { permits } => live < permits as usize,
            Claim::Exclusive => false,
        };
        room.then(|| Wake::Head {
            key: key.clone(),
            session: head.session,
        })
    }

    /// `session`'s share of `key` with `token`, live or not.
    pub(super) fn hold_mut(
        &mut self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Option<&mut Hold> {
        let holds = self.holds.get_mut(key)?;
        holds
            .iter_mut()
            .find(|h| h.grant.session == session && h.grant.token == token)
    }

    /// Removes the shares of `key` that `keep` refuses; the removed ones.
    pub(super) fn remove_holds(
        &mut self,
        key: &LockKey,
        mut keep: impl FnMut(&Hold) -> bool,
    ) -> Vec<Hold> {
        let Some(holds) = self.holds.get_mut(key) else {
            return Vec::new();
        };
        let (kept, removed) = std::mem::take(holds).into_iter().partition(|h| keep(h));
        *holds = kept;
        if holds.is_empty() {
            self.holds.remove(key);
        }
        removed
    }
}

fn slot_of(scope: GrantScope) -> u32 {
    match scope {
        GrantScope::Permit { slot } => slot,
        GrantScope::Exclusive | GrantScope::Shared => unreachable!("a permit has a slot"),
    }
}

/// Inspecting, revoking and reaping shares.
impl State {
    /// L7 of a key held by shares: every live one, the newest named first-hand.
    pub(super) fn shares_info(
        &self,
        key: &LockKey,
        now: u64,
        display: impl Fn(u64) -> DateTime<Utc>,
    ) -> Option<LockInfo> {
        let mut live: Vec<&Hold> = self.live_holds(key, now).collect();
        live.sort_by_key(|h| h.grant.token);
        let holders: Vec<HolderInfo> = live
            .iter()
            .filter_map(|h| {
                let session = self.sessions.get(&h.grant.session)?;
                Some(HolderInfo {
                    fencing_token: h.grant.token,
                    owner_id: session.opener.owner.clone(),
                    expires_at: display(self.ends(&h.grant)),
                    scope: h.scope,
                })
            })
            .collect();
        let newest = holders.last()?.clone();
        Some(LockInfo {
            lock_key: key.clone(),
            fencing_token: newest.fencing_token,
            owner_id: newest.owner_id,
            expires_at: newest.expires_at,
            waiters: self.live_waiters(key, now),
            holders,
            permits: live[0].permits,
            value: None,
        })
    }

    /// L8 of a key held by shares: every live one ends (involuntarily: the longest lock-delay
    /// among them starts), the key's revocation names the newest. Its token, if any was live.
    pub(super) fn revoke_shares(
        &mut self,
        key: &LockKey,
        note: &RevokeNote,
        now: u64,
    ) -> Option<FencingToken> {
        let live: Vec<FencingToken> = self.live_holds(key, now).map(|h| h.grant.token).collect();
        let revoked = self.remove_holds(key, |h| !live.contains(&h.grant.token));
        let newest = revoked.iter().map(|h| h.grant.token).max()?;
        let delay_ms = revoked.iter().map(|h| h.grant.lock_delay_ms).max();
        if let Some(delay_ms) = delay_ms.filter(|ms| *ms > 0) {
            let delay = Delay {
                until: after(now, delay_ms),
                exempt: None,
            };
            self.delays.insert(key.clone(), delay);
        }
        let note = note.clone();
        let revocation = Revocation {
            token: newest,
            note,
        };
        self.revocations.insert(key.clone(), revocation);
        Some(newest)
    }

    /// Removes every ended share, each reported and starting its lock-delay from its end;
    /// the keys that changed.
    pub(super) fn reap_shares(&mut self, now: u64, report: &mut ReapReport) -> Vec<LockKey> {
        let keys: Vec<LockKey> = self.holds.keys().cloned().collect();
        let mut freed = Vec::new();
        for key in keys {
            let ended: Vec<(u64, Hold)> = self.holds[&key]
                .iter()
                .map(|h| (self.ends(&h.grant), h.clone()))
                .filter(|(ends, _)| *ends <= now)
                .collect();
            if ended.is_empty() {
                continue;
            }
            let gone: Vec<FencingToken> = ended.iter().map(|(_, h)| h.grant.token).collect();
            self.remove_holds(&key, |h| !gone.contains(&h.grant.token));
            for (ends, hold) in ended {
                self.report_ended(&key, ends, &hold, now, report);
            }
            freed.push(key);
        }
        freed
    }

    fn report_ended(
        &mut self,
        key: &LockKey,
        ends: u64,
        hold: &Hold,
        now: u64,
        report: &mut ReapReport,
    ) {
        let grant = &hold.grant;
        let until = after(ends, grant.lock_delay_ms);
        if grant.lock_delay_ms > 0 && until > now {
            let delay = self.delays.entry(key.clone()).or_insert(Delay {
                until,
                exempt: None,
            });
            delay.until = delay.until.max(until);
            delay.exempt = None;
        }
        if let Some(session) = self.sessions.get(&grant.session) {
            let lease_expired = grant.expires <= now;
            report.locks.push(ExpiredLock {
                lock_key: key.clone(),
                fencing_token: grant.token,
                session_id: grant.session,
                owner_id: session.opener.owner.clone(),
                reason: if lease_expired { "lease" } else { "session" },
            });
        }
    }
}
