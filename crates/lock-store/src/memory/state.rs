//! The memory store's state: sessions, grants, fences, lock-delays and queues, and the
//! decisions a write makes on them (grant, enqueue, leave, hand over). `MemoryStore` locks it
//! and calls these; nothing else touches it.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use lock_api::{Claim, FencingToken, GrantScope, LeaderValue, LockGrant, LockKey, SessionId};

use super::events::{EventLog, Seen};
use crate::decide::{FreedView, HandOver, HeadView, HolderView, KeyView, hand_over};
use crate::{AcquireSpec, RequestId, Revocation, SessionOwner, StoreError, Wake};

#[derive(Debug)]
pub(super) struct Session {
    pub(super) opener: SessionOwner,
    pub(super) ttl_ms: u64,
    pub(super) expires: u64,
}

#[derive(Debug, Clone)]
pub(super) struct Grant {
    pub(super) token: FencingToken,
    pub(super) session: SessionId,
    pub(super) lease_ms: u64,
    pub(super) expires: u64,
    pub(super) lock_delay_ms: u64,
    /// The request it was last granted to ([`LockStore::abandon`]).
    pub(super) request: RequestId,
}

impl Grant {
    /// When this grant ended or ends: its lease's or its session's expiry, the earlier.
    pub(super) fn ends(&self, session: Option<&Session>) -> u64 {
        session.map_or(self.expires, |s| s.expires.min(self.expires))
    }
}

/// A live or ended grant of a share of a key: a reader's, or a permit (ADR 0007).
#[derive(Debug, Clone)]
pub(super) struct Hold {
    pub(super) grant: Grant,
    /// `Shared`, or `Permit` with its slot.
    pub(super) scope: GrantScope,
    /// A permit's key count (`None` for a reader).
    pub(super) permits: Option<u32>,
}

/// A lock-delay in force: no session but `exempt` is granted the key before `until`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Delay {
    pub(super) until: u64,
    pub(super) exempt: Option<SessionId>,
}

/// A place in a key's queue.
#[derive(Debug, Clone)]
pub(super) struct Waiter {
    pub(super) session: SessionId,
    pub(super) seq: u64,
    pub(super) expires: u64,
    /// The lease its parked acquire asked for, for a hand-over; `None` for a set's place,
    /// which is woken to ask for its whole set, never handed one key.
    pub(super) lease_ms: Option<u64>,
    pub(super) lock_delay_ms: u64,
    /// When its waiter's last call touched it.
    pub(super) touched: u64,
    /// The request whose call touched it last: a hand-over is granted to that request.
    pub(super) request: RequestId,
    /// What its acquire claims; a set's place claims the key alone.
    pub(super) claim: Claim,
}

/// Every map keyed by lock key is ordered: the store hands freed keys over and reports them
/// in key order, so a run on virtual time (the simulation) replays the same on every process.
/// Sessions are only looked up, counted and pruned, never visited in an order that shows.
#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) sessions: HashMap<SessionId, Session>,
    pub(super) locks: BTreeMap<LockKey, Grant>,
    /// Each key's readers' or permits' grants (ADR 0007), live or ended and not yet reaped.
    pub(super) holds: BTreeMap<LockKey, Vec<Hold>>,
    /// Last token per key; never removed, so tokens are never reused.
    pub(super) fences: BTreeMap<LockKey, FencingToken>,
    /// Lock-delays of grants that ended involuntarily and were removed (revoke, reaper).
    pub(super) delays: BTreeMap<LockKey, Delay>,
    /// Each key's queue; its order is its places' `seq` (arrival, or a set's ticket).
    pub(super) queues: BTreeMap<LockKey, Vec<Waiter>>,
    /// Each key's last revocation (one per key, as its fence).
    pub(super) revocations: BTreeMap<LockKey, Revocation>,
    /// Each key's last announced value with the token of the grant that announced it: a
    /// grant's value while that token holds the key.
    pub(super) values: BTreeMap<LockKey, (FencingToken, LeaderValue)>,
    /// The watch log, and what its last comparison saw.
    pub(super) events: EventLog,
    pub(super) next_seq: u64,
}

impl State {
    pub(super) fn live_session(&self, id: SessionId, now: u64) -> Result<&Session, StoreError> {
        match self.sessions.get(&id) {
            None => Err(StoreError::SessionUnknown(id)),
            Some(s) if s.expires <= now => Err(StoreError::SessionExpired(id)),
            Some(s) => Ok(s),
        }
    }

    pub(super) fn live_grant(&self, key: &LockKey, now: u64) -> Option<&Grant> {
        let grant = self.locks.get(key)?;
        let session = self.sessions.get(&grant.session)?;
        (grant.expires > now && session.expires > now).then_some(grant)
    }

    /// What the live grant `grant` of `key` announces: never an earlier grant's value.
    pub(super) fn value_of(&self, key: &LockKey, grant: &Grant) -> Option<LeaderValue> {
        let (token, value) = self.values.get(key)?;
        (*token == grant.token).then(|| value.clone())
    }

    pub(super) fn waiter_live(&self, waiter: &Waiter, now: u64) -> bool {
        waiter.expires > now
            && self
                .sessions
                .get(&waiter.session)
                .is_some_and(|s| s.expires > now)
    }

    /// Nanoseconds of lock-delay left on free `key` for `session` (0: none).
    pub(super) fn delay_left(&self, key: &LockKey, session: SessionId, now: u64) -> u64 {
        let mut until = 0;
        // A grant that expired but is not yet reaped: its delay runs from its end.
        if let Some(dead) = self.locks.get(key) {
            if dead.session != session {
                let ends = dead.ends(self.sessions.get(&dead.session));
                until = after(ends, dead.lock_delay_ms);
            }
        }
        // So does a reader's or a permit's that ended (a live one holds its share, no key).
        for hold in self.holds.get(key).into_iter().flatten() {
            let ends = hold.grant.ends(self.sessions.get(&hold.grant.session));
            if hold.grant.session != session && ends <= now {
                until = until.max(after(ends, hold.grant.lock_delay_ms));
            }
        }
        if let Some(delay) = self.delays.get(key) {
            if delay.exempt != Some(session) {
                until = until.max(delay.until);
            }
        }
        until.saturating_sub(now)
    }

    /// Puts `session` in `key`'s queue, or renews its place (with the grant it now asks for).
    pub(super) fn enqueue(
        &mut self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        now: u64,
    ) {
        self.next_seq += 1;
        let ticket = self.next_seq;
        // Only a lock's place is handed the key; a share's waiter is woken to ask.
        let lease_ms = (spec.claim == Claim::Exclusive).then_some(spec.lease_ms);
        self.place(key, session, spec, lease_ms, ticket, now);
    }

    /// Puts `session` in the queue of every key of a set, or renews its places, all with one
    /// ticket: the earliest its places already have, else a new one. So a set is ahead of,
    /// or behind, another waiter on every key they share, and no two sets can each wait
    /// behind the other.
    pub(super) fn enqueue_set(
        &mut self,
        keys: &[LockKey],
        session: SessionId,
        spec: AcquireSpec,
        now: u64,
    ) {
        let held = keys.iter().filter_map(|key| {
            let queue = self.queues.get(key)?;
            queue.iter().find(|w| w.session == session).map(|w| w.seq)
        });
        let ticket = held.min().unwrap_or_else(|| {
            self.next_seq += 1;
            self.next_seq
        });
        for key in keys {
            self.place(key, session, spec, None, ticket, now);
        }
    }

    /// Takes or renews `session`'s place in `key`'s queue; a new place gets `ticket`, as
    /// does a set's place (`lease_ms` `None`).
    fn place(
        &mut self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        lease_ms: Option<u64>,
        ticket: u64,
        now: u64,
    ) {
        let expires = after(now, spec.queue_ms);
        let queue = self.queues.entry(key.clone()).or_default();
        if let Some(place) = queue.iter_mut().find(|w| w.session == session) {
            place.expires = place.expires.max(expires);
            place.lease_ms = lease_ms;
            place.lock_delay_ms = spec.lock_delay_ms;
            place.touched = now;
            place.request = spec.request;
            place.claim = spec.claim;
            // A set's place takes its set's ticket; every other place keeps its turn.
            if lease_ms.is_none() && spec.claim == Claim::Exclusive {
                place.seq = ticket;
            }
            return;
        }
        queue.push(Waiter {
            session,
            seq: ticket,
            expires,
            lease_ms,
            lock_delay_ms: spec.lock_delay_ms,
            touched: now,
            request: spec.request,
            claim: spec.claim,
        });
    }

    /// Live waiters of other sessions ahead of `session` (all of them if it has no place).
    pub(super) fn ahead_of(&self, key: &LockKey, session: SessionId, now: u64) -> u64 {
        let Some(queue) = self.queues.get(key) else {
            return 0;
        };
        let mine = queue
            .iter()
            .find(|w| w.session == session)
            .map_or(u64::MAX, |w| w.seq);
        queue
            .iter()
            .filter(|w| w.session != session && w.seq < mine && self.waiter_live(w, now))
            .count() as u64
    }

    pub(super) fn live_waiters(&self, key: &LockKey, now: u64) -> u64 {
        self.queues.get(key).map_or(0, |q| {
            q.iter().filter(|w| self.waiter_live(w, now)).count() as u64
        })
    }

    pub(super) fn leave(&mut self, key: &LockKey, session: SessionId) {
        if let Some(queue) = self.queues.get_mut(key) {
            queue.retain(|w| w.session != session);
            if queue.is_empty() {
                self.queues.remove(key);
            }
        }
    }

    /// What an acquire of `key` by `session` decides on ([`crate::decide::decide`]).
    /// Readers holding the key keep a writer out as a holder does: the one that ends last
    /// is named (its session is never the caller's: a reader asking to write is refused
    /// before).
    pub(super) fn key_view(&self, key: &LockKey, session: SessionId, now: u64) -> KeyView {
        let free_in_ms = |g: &Grant| {
            g.ends(self.sessions.get(&g.session))
                .saturating_sub(now)
                .div_ceil(1_000_000)
        };
        let reader = self
            .live_holds(key, now)
            .max_by_key(|h| free_in_ms(&h.grant));
        let holder = self
            .live_grant(key, now)
            .or(reader.map(|h| &h.grant))
            .map(|g| HolderView {
                session: g.session,
                token: g.token,
                free_in_ms: free_in_ms(g),
            });
        KeyView {
            holder,
            delay_left_ms: self.delay_left(key, session, now).div_ceil(1_000_000),
            ahead: self.ahead_of(key, session, now),
            last_token: self.fences.get(key).map_or(0, |t| t.0),
        }
    }

    /// Carries out a decided grant of `key` with `token` to `session`: the same grant again
    /// when the session holds it (lease and expiry only grow, so the client's deadline never
    /// lies after the store's expiry), else a new one. The session's place goes. The grant's
    /// lease and expiry, and whether it replaced an ended grant.
    pub(super) fn take(
        &mut self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        spec: AcquireSpec,
        now: u64,
    ) -> (u64, u64, bool) {
        let held = self.live_grant(key, now).cloned();
        let taken = match held {
            Some(current) => {
                assert!(current.session == session && current.token == token);
                let lease_ms = current.lease_ms.max(spec.lease_ms);
                let expires = current.expires.max(after(now, lease_ms));
                let regrant = Grant {
                    lease_ms,
                    expires,
                    request: current.request.after_regrant(spec.request),
                    ..current
                };
                self.locks.insert(key.clone(), regrant);
                (lease_ms, expires, false)
            }
            None => {
                let (expires, replaced) = self.grant(key, session, token, spec, now);
                (spec.lease_ms, expires, replaced)
            }
        };
        self.leave(key, session);
        taken
    }

    /// Grants `key` to `session` with the new `token` (an acquire's, or a hand-over's): the
    /// key's lock-delay ends, its fence moves, the grant replaces any ended one. The grant's
    /// expiry, and whether it replaced an ended grant.
    pub(super) fn grant(
        &mut self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        spec: AcquireSpec,
        now: u64,
    ) -> (u64, bool) {
        let AcquireSpec {
            lease_ms,
            lock_delay_ms,
            request,
            ..
        } = spec;
        // Tokens only rise per key: the new one is above every token the key was granted.
        debug_assert!(
            self.fences.get(key).is_none_or(|last| token > *last),
            "{key}: token {token} granted at or below the key's last token"
        );
        let expires = after(now, lease_ms);
        self.delays.remove(key);
        self.fences.insert(key.clone(), token);
        let grant = Grant {
            token,
            session,
            lease_ms,
            expires,
            lock_delay_ms,
            request,
        };
        (expires, self.locks.insert(key.clone(), grant).is_some())
    }

    /// After `key` was freed or its head waiter left: the head is granted the key in this
    /// same write when [`hand_over`] says so, else woken to ask; the wake-up to deliver.
    pub(super) fn hand_over(
        &mut self,
        key: &LockKey,
        now: u64,
        display: impl Fn(u64) -> DateTime<Utc>,
    ) -> Option<Wake> {
        if self.live_holds(key, now).next().is_some() {
            return self.wake_for_share(key, now);
        }
        let head = self
            .queues
            .get(key)?
            .iter()
            .filter(|w| self.waiter_live(w, now))
            .min_by_key(|w| w.seq)
            .cloned();
        let view = FreedView {
            held: self.live_grant(key, now).is_some(),
            ended_grant: self.locks.contains_key(key) || self.holds.contains_key(key),
            head: head.as_ref().map(|w| HeadView {
                session: w.session,
                lease_ms: w.lease_ms,
                delay_left_ms: self.delay_left(key, w.session, now).div_ceil(1_000_000),
            }),
            last_token: self.fences.get(key).map_or(0, |t| t.0),
        };
        match hand_over(&view) {
            HandOver::Nobody => None,
            HandOver::Wake(session) => Some(Wake::Head {
                key: key.clone(),
                session,
            }),
            HandOver::Grant {
                session,
                token,
                lease_ms,
            } => {
                let head = head.expect("a hand-over is decided on a head waiter");
                let spec = AcquireSpec {
                    lease_ms,
                    queue_ms: 0,
                    lock_delay_ms: head.lock_delay_ms,
                    request: head.request,
                    claim: Claim::Exclusive,
                };
                let (expires, _) = self.grant(key, session, token, spec, now);
                self.leave(key, session);
                Some(Wake::HandedOver {
                    grant: LockGrant {
                        lock_key: key.clone(),
                        fencing_token: token,
                        lease_ms,
                        expires_at: display(expires),
                        session_id: session,
                        proof: None,
                        waited_ms: 0,
                        scope: GrantScope::Exclusive,
                    },
                    place_age_ms: now.saturating_sub(head.touched) / 1_000_000,
                })
            }
        }
    }
}

/// `now` plus `ms`, in nanoseconds.
pub(super) fn after(now: u64, ms: u64) -> u64 {
    now.saturating_add(ms.saturating_mul(1_000_000))
}

impl State {
    /// Logs what the last write changed, as of `now` ([`EventLog::note`]).
    pub(super) fn note_events(&mut self, now: u64) {
        let grants = self.grants_now();
        let revoked = (self.revocations.iter())
            .map(|(key, r)| (key.clone(), r.token))
            .collect();
        self.events.note(now, grants, revoked)
    }

    /// Every grant the state holds now (live, or ended and not yet removed).
    fn grants_now(&self) -> BTreeMap<(LockKey, FencingToken), Seen> {
        let seen = |grant: &Grant, scope| {
            let session = self.sessions.get(&grant.session);
            Seen {
                owner: session.map(|s| s.opener.owner.clone()),
                scope,
                ends: grant.ends(session),
            }
        };
        let locks = (self.locks.iter())
            .map(|(key, g)| ((key.clone(), g.token), seen(g, GrantScope::Exclusive)));
        let holds = self.holds.iter().flat_map(|(key, holds)| {
            holds
                .iter()
                .map(move |h| ((key.clone(), h.grant.token), seen(&h.grant, h.scope)))
        });
        locks.chain(holds).collect()
    }
}
