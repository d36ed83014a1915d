//! `LockStore` in process memory, for unit tests and the simulation. Same semantics as the
//! PostgreSQL store (one conformance suite). Its clock and its session ids come from a
//! [`StoreEnv`]: this process's monotonic clock and random ids by default
//! ([`SystemEnv`]), virtual time and counted ids in the simulation (`lock-sim`).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lock_api::{
    Backend, Claim, FencingToken, GrantScope, LeaderValue, LockEvent, LockGrant, LockInfo, LockKey,
    SessionId,
};

use crate::decide::{Decision, KeyView, decide};
use crate::env::{StoreEnv, SystemEnv};
use crate::events::{EventPage, HeadSink, HeadSlot};
use crate::key_set::{SetDecision, decide_set};

mod events;
mod holds;
mod state;

use crate::{
    AcquireOutcome, AcquireSpec, ExpiredLock, LockStore, ReapReport, RequestId, Revocation,
    RevokeNote, SessionOwner, SessionRecord, SetOutcome, StoreError, Wake, WakeSink, WakeSlot,
};
use holds::Taken;
use state::{Delay, Session, State, after};

/// The in-memory lock store.
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    env: Arc<dyn StoreEnv>,
    wakes: WakeSlot,
    heads: HeadSlot,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store on this process's clock.
    pub fn new() -> Self {
        Self::with_env(Arc::new(SystemEnv::default()))
    }

    /// An empty store on `env`'s clock and ids.
    pub fn with_env(env: Arc<dyn StoreEnv>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            env,
            wakes: WakeSlot::default(),
            heads: HeadSlot::default(),
        }
    }

    /// The store keeping the last `kept` events of its watch log (at least one) instead of
    /// 10,000: a short window, so that a test or the simulation reaches a watcher's gap
    /// (`EventPage::floor`) without writing 10,000 events first.
    #[must_use]
    pub fn with_events_kept(mut self, kept: usize) -> Self {
        if let Ok(state) = self.state.get_mut() {
            state.events.keep(kept);
        }
        self
    }

    /// The watch log as it stands: the highest position it forgot, and every event it keeps
    /// after `after`, whatever the key (what the simulation's watch checker copies as its
    /// record of every event, around `events_after`'s paging; no other caller needs it).
    pub fn logged_after(&self, after: u64) -> (u64, Vec<LockEvent>) {
        self.state()
            .map(|state| state.events.kept_after(after))
            .unwrap_or_default()
    }

    /// The live grants the store holds now: key, session and token (what the simulation's
    /// orphan check reads; no other caller needs it).
    pub fn live_grants(&self) -> Vec<(LockKey, SessionId, FencingToken)> {
        let now = self.env.now_nanos();
        let Ok(state) = self.state() else {
            return Vec::new();
        };
        let locks = state.locks.keys().filter_map(|key| {
            let grant = state.live_grant(key, now)?;
            Some((key.clone(), grant.session, grant.token))
        });
        let shares = state.holds.keys().flat_map(|key| {
            let live = state.live_holds(key, now);
            live.map(|h| (key.clone(), h.grant.session, h.grant.token))
        });
        locks.chain(shares).collect()
    }

    /// Delivers `wakes` (after the state's lock is released).
    fn deliver(&self, wakes: impl IntoIterator<Item = Wake>) {
        self.wakes.deliver(wakes);
    }

    fn display(&self, nanos: u64) -> DateTime<Utc> {
        self.env.display(nanos)
    }

    /// What a client is told of a grant (no proof: the replica that answers signs it).
    fn grant_of(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        lease_ms: u64,
        expires: u64,
    ) -> LockGrant {
        LockGrant {
            lock_key: key.clone(),
            fencing_token: token,
            lease_ms,
            expires_at: self.display(expires),
            session_id: session,
            proof: None,
            waited_ms: 0,
            scope: GrantScope::Exclusive,
        }
    }

    /// What a client is told of a share.
    fn share_of(&self, key: &LockKey, session: SessionId, taken: Taken) -> LockGrant {
        LockGrant {
            scope: taken.scope,
            ..self.grant_of(key, session, taken.token, taken.lease_ms, taken.expires)
        }
    }

    fn state(&self) -> Result<Locked<'_>, StoreError> {
        let guard = (self.state.lock())
            .map_err(|_| StoreError::Internal("memory store mutex poisoned".into()))?;
        let head = guard.events.head();
        Ok(Locked {
            guard,
            store: self,
            dirty: false,
            head,
        })
    }
}

/// The state, locked. A write through it is compared with the last and its events logged
/// ([`State::note_events`]) when the lock is let go, so no write path can skip the log.
struct Locked<'a> {
    guard: std::sync::MutexGuard<'a, State>,
    store: &'a MemoryStore,
    dirty: bool,
    /// The log's head when locked: watchers are told when it moved.
    head: u64,
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.dirty = true;
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if self.dirty {
            self.guard.note_events(self.store.env.now_nanos());
        }
        let head = self.guard.events.head();
        if head > self.head {
            self.store.heads.deliver(head);
        }
    }
}

#[async_trait]
impl LockStore for MemoryStore {
    fn backend(&self) -> Backend {
        Backend::Memory
    }

    async fn open_session(
        &self,
        opener: &SessionOwner,
        ttl_ms: u64,
    ) -> Result<SessionRecord, StoreError> {
        let now = self.env.now_nanos();
        let session_id = self.env.session_id();
        let expires = after(now, ttl_ms);
        self.state()?.sessions.insert(
            session_id,
            Session {
                opener: opener.clone(),
                ttl_ms,
                expires,
            },
        );
        Ok(SessionRecord {
            session_id,
            ttl_ms,
            expires_at: self.display(expires),
        })
    }

    async fn session_owner(&self, session: SessionId) -> Result<Option<SessionOwner>, StoreError> {
        let state = self.state()?;
        Ok(state.sessions.get(&session).map(|s| s.opener.clone()))
    }

    async fn sessions_of(&self, credential: &str) -> Result<u64, StoreError> {
        let now = self.env.now_nanos();
        let state = self.state()?;
        let live = state.sessions.values();
        Ok(live
            .filter(|s| s.opener.credential == credential && s.expires > now)
            .count() as u64)
    }

    async fn heartbeat(&self, session: SessionId) -> Result<SessionRecord, StoreError> {
        let now = self.env.now_nanos();
        let mut state = self.state()?;
        state.live_session(session, now)?;
        let s = state
            .sessions
            .get_mut(&session)
            .ok_or(StoreError::SessionUnknown(session))?;
        s.expires = after(now, s.ttl_ms);
        Ok(SessionRecord {
            session_id: session,
            ttl_ms: s.ttl_ms,
            expires_at: self.display(s.expires),
        })
    }

    async fn delete_session(&self, session: SessionId) -> Result<bool, StoreError> {
        let now = self.env.now_nanos();
        let wakes = {
            let mut state = self.state()?;
            let existed = state.sessions.remove(&session).is_some();
            let mut touched = Vec::new();
            state.locks.retain(|key, grant| {
                let mine = grant.session == session;
                if mine {
                    touched.push(key.clone());
                }
                !mine
            });
            let shared: Vec<LockKey> = state.holds.keys().cloned().collect();
            for key in shared {
                if !state
                    .remove_holds(&key, |h| h.grant.session != session)
                    .is_empty()
                {
                    touched.push(key);
                }
            }
            for (key, queue) in &mut state.queues {
                if queue.iter().any(|w| w.session == session) {
                    queue.retain(|w| w.session != session);
                    touched.push(key.clone());
                }
            }
            state.queues.retain(|_, q| !q.is_empty());
            let wakes: Vec<Wake> = touched
                .iter()
                .filter_map(|k| state.hand_over(k, now, |n| self.display(n)))
                .collect();
            (existed, wakes)
        };
        self.deliver(wakes.1);
        Ok(wakes.0)
    }

    async fn acquire_with(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<AcquireOutcome, StoreError> {
        crate::claim::check_count(key, spec.claim)?;
        let now = self.env.now_nanos();
        let mut state = self.state()?;
        state.live_session(session, now)?;
        state.check_kind(key, session, spec.claim, now)?;
        // A place asked for is taken (or kept) before reading the queue; a grant gives it up.
        if spec.queue_ms > 0 {
            state.enqueue(key, session, spec, now);
        }
        if spec.claim != Claim::Exclusive {
            let taken = state.acquire_share(key, session, spec, now)?;
            let wake = taken.is_ok().then(|| state.wake_for_share(key, now));
            drop(state);
            self.deliver(wake.flatten());
            return Ok(match taken {
                Ok(taken) => AcquireOutcome::Granted {
                    grant: self.share_of(key, session, taken),
                    took_over_expired: false,
                    store_now: Some(self.display(now)),
                },
                Err(refusal) => refusal.into(),
            });
        }
        let view = state.key_view(key, session, now);
        let token = match decide(&view, session) {
            Decision::Refuse(refusal) => return Ok(refusal.into()),
            Decision::Regrant { token } | Decision::Grant { token } => token,
        };
        let (lease_ms, expires, took_over_expired) = state.take(key, session, token, spec, now);
        Ok(AcquireOutcome::Granted {
            grant: self.grant_of(key, session, token, lease_ms, expires),
            took_over_expired,
            store_now: Some(self.display(now)),
        })
    }

    async fn acquire_set(
        &self,
        keys: &[LockKey],
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<SetOutcome, StoreError> {
        let now = self.env.now_nanos();
        let mut state = self.state()?;
        state.live_session(session, now)?;
        for key in keys {
            state.check_kind(key, session, Claim::Exclusive, now)?;
        }
        if spec.queue_ms > 0 {
            state.enqueue_set(keys, session, spec, now);
        }
        let views: Vec<(LockKey, KeyView)> = keys
            .iter()
            .map(|key| (key.clone(), state.key_view(key, session, now)))
            .collect();
        let tokens = match decide_set(&views, session) {
            SetDecision::Refuse { member, refusal } => {
                let key = keys[member].clone();
                return Ok(SetOutcome::Refused { key, refusal });
            }
            SetDecision::Grant(tokens) => tokens,
        };
        let grants = keys
            .iter()
            .zip(tokens)
            .map(|(key, (token, _))| {
                let (lease_ms, expires, _) = state.take(key, session, token, spec, now);
                self.grant_of(key, session, token, lease_ms, expires)
            })
            .collect();
        Ok(SetOutcome::Granted {
            grants,
            store_now: Some(self.display(now)),
        })
    }

    async fn leave_queue(&self, key: &LockKey, session: SessionId) -> Result<(), StoreError> {
        let now = self.env.now_nanos();
        let wake = {
            let mut state = self.state()?;
            state.leave(key, session);
            state.hand_over(key, now, |n| self.display(n))
        };
        self.deliver(wake);
        Ok(())
    }

    async fn abandon(
        &self,
        key: &LockKey,
        session: SessionId,
        request: RequestId,
        leave: bool,
    ) -> Result<bool, StoreError> {
        if request == RequestId::NONE {
            return Ok(false);
        }
        let now = self.env.now_nanos();
        let (released, wake) = {
            let mut state = self.state()?;
            let placed = state.queues.get(key).is_some_and(|q| {
                q.iter()
                    .any(|w| w.session == session && w.request == request)
            });
            if leave && placed {
                state.leave(key, session);
            }
            let released = state
                .locks
                .get(key)
                .is_some_and(|g| g.session == session && g.request == request);
            if released {
                state.locks.remove(key);
            }
            let mine = |h: &state::Hold| h.grant.session == session && h.grant.request == request;
            let released = released || !state.remove_holds(key, |h| !mine(h)).is_empty();
            let changed = released || (leave && placed);
            let wake = changed
                .then(|| state.hand_over(key, now, |n| self.display(n)))
                .flatten();
            (released, wake)
        };
        self.deliver(wake);
        Ok(released)
    }

    async fn watch_wakes(&self, sink: WakeSink) -> Result<(), StoreError> {
        self.wakes.set(sink);
        Ok(())
    }

    fn hands_over(&self) -> bool {
        true
    }

    async fn renew(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<LockGrant, StoreError> {
        let now = self.env.now_nanos();
        let mut state = self.state()?;
        state.live_session(session, now)?;
        let lost = || StoreError::LockLost {
            lock_key: key.clone(),
            fencing_token: token,
        };
        let lock = state.locks.get_mut(key);
        let (grant, scope) = match lock.filter(|g| g.session == session && g.token == token) {
            Some(grant) => (grant, GrantScope::Exclusive),
            None => {
                let hold = state.hold_mut(key, session, token).ok_or_else(lost)?;
                (&mut hold.grant, hold.scope)
            }
        };
        if grant.expires <= now {
            return Err(lost());
        }
        grant.expires = after(now, grant.lease_ms);
        let (lease_ms, expires) = (grant.lease_ms, grant.expires);
        let taken = Taken {
            token,
            scope,
            lease_ms,
            expires,
        };
        Ok(self.share_of(key, session, taken))
    }

    async fn release(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<bool, StoreError> {
        let now = self.env.now_nanos();
        let wake = {
            let mut state = self.state()?;
            let mine = |g: &state::Grant| g.token == token && g.session == session;
            // Voluntary: no lock-delay.
            if state.locks.get(key).is_some_and(mine) {
                state.locks.remove(key);
            } else if state.remove_holds(key, |h| !mine(&h.grant)).is_empty() {
                return Ok(false);
            }
            state.hand_over(key, now, |n| self.display(n))
        };
        self.deliver(wake);
        Ok(true)
    }

    async fn proclaim(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        value: &LeaderValue,
    ) -> Result<(), StoreError> {
        let now = self.env.now_nanos();
        let mut state = self.state()?;
        state.live_session(session, now)?;
        let held = state
            .live_grant(key, now)
            .is_some_and(|g| g.session == session && g.token == token);
        if !held {
            return Err(StoreError::LockLost {
                lock_key: key.clone(),
                fencing_token: token,
            });
        }
        state.values.insert(key.clone(), (token, value.clone()));
        state.events.proclaimed(key, token, value);
        Ok(())
    }

    async fn get(&self, key: &LockKey) -> Result<Option<LockInfo>, StoreError> {
        let now = self.env.now_nanos();
        let state = self.state()?;
        let Some(grant) = state.live_grant(key, now) else {
            return Ok(state.shares_info(key, now, |n| self.display(n)));
        };
        let session = state
            .sessions
            .get(&grant.session)
            .ok_or(StoreError::SessionUnknown(grant.session))?;
        Ok(Some(LockInfo {
            lock_key: key.clone(),
            fencing_token: grant.token,
            owner_id: session.opener.owner.clone(),
            expires_at: self.display(grant.expires.min(session.expires)),
            waiters: state.live_waiters(key, now),
            holders: Vec::new(),
            permits: None,
            value: state.value_of(key, grant),
        }))
    }

    async fn revoke(
        &self,
        key: &LockKey,
        note: &RevokeNote,
    ) -> Result<Option<FencingToken>, StoreError> {
        let now = self.env.now_nanos();
        let (token, wake) = {
            let mut state = self.state()?;
            let Some(grant) = state.live_grant(key, now).cloned() else {
                let token = state.revoke_shares(key, note, now);
                let wake = token.and_then(|_| state.hand_over(key, now, |n| self.display(n)));
                drop(state);
                self.deliver(wake);
                return Ok(token);
            };
            state.locks.remove(key);
            let note = note.clone();
            let revocation = Revocation {
                token: grant.token,
                note,
            };
            state.revocations.insert(key.clone(), revocation);
            if grant.lock_delay_ms > 0 {
                state.delays.insert(
                    key.clone(),
                    Delay {
                        until: after(now, grant.lock_delay_ms),
                        exempt: Some(grant.session),
                    },
                );
            }
            (grant.token, state.hand_over(key, now, |n| self.display(n)))
        };
        self.deliver(wake);
        Ok(Some(token))
    }

    async fn events_after(
        &self,
        prefix: &str,
        after: u64,
        limit: usize,
    ) -> Result<EventPage, StoreError> {
        Ok(self.state()?.events.page(prefix, after, limit))
    }

    async fn watch_events(&self, sink: HeadSink) -> Result<(), StoreError> {
        self.heads.set(sink);
        Ok(())
    }

    async fn revocation(&self, key: &LockKey) -> Result<Option<Revocation>, StoreError> {
        Ok(self.state()?.revocations.get(key).cloned())
    }

    async fn reap_expired(&self) -> Result<ReapReport, StoreError> {
        let now = self.env.now_nanos();
        let mut guard = self.state()?;
        let state = &mut *guard;
        let mut report = ReapReport::default();
        let mut freed = Vec::new();
        let sessions = &state.sessions;
        let delays = &mut state.delays;
        state.locks.retain(|key, grant| {
            let session = sessions.get(&grant.session);
            let lease_expired = grant.expires <= now;
            let session_expired = session.is_none_or(|s| s.expires <= now);
            if !(lease_expired || session_expired) {
                return true;
            }
            if grant.lock_delay_ms > 0 {
                let until = after(grant.ends(session), grant.lock_delay_ms);
                let delay = delays.entry(key.clone()).or_insert(Delay {
                    until,
                    exempt: Some(grant.session),
                });
                if until >= delay.until {
                    *delay = Delay {
                        until,
                        exempt: Some(grant.session),
                    };
                }
            }
            freed.push(key.clone());
            if let Some(s) = session {
                report.locks.push(ExpiredLock {
                    lock_key: key.clone(),
                    fencing_token: grant.token,
                    session_id: grant.session,
                    owner_id: s.opener.owner.clone(),
                    reason: if lease_expired { "lease" } else { "session" },
                });
            }
            false
        });
        freed.extend(state.reap_shares(now, &mut report));
        let before = state.sessions.len();
        state.sessions.retain(|_, s| s.expires > now);
        report.sessions = (before - state.sessions.len()) as u64;
        state.delays.retain(|_, d| d.until > now);
        let sessions = &state.sessions;
        for (key, queue) in &mut state.queues {
            let before = queue.len();
            queue.retain(|w| w.expires > now && sessions.contains_key(&w.session));
            if queue.len() < before {
                freed.push(key.clone());
            }
        }
        state.queues.retain(|_, q| !q.is_empty());
        let wakes: Vec<Wake> = freed
            .iter()
            .filter_map(|key| state.hand_over(key, now, |n| self.display(n)))
            .collect();
        drop(guard);
        self.deliver(wakes);
        Ok(report)
    }

    async fn clock_now(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(Some(self.display(self.env.now_nanos())))
    }

    async fn ready(&self) -> Result<(), StoreError> {
        self.state().map(|_| ())
    }

    async fn durability_risks(&self) -> Result<Vec<String>, StoreError> {
        Ok(vec![
            "the memory backend keeps its tokens in this process: a restart hands them out again"
                .into(),
        ])
    }
}
