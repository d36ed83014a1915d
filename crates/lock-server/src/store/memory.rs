//! `LockStore` in process memory, for unit tests and the simulation. Same semantics as the
//! PostgreSQL store (one conformance suite). Its clock and its session ids come from a
//! [`StoreEnv`]: this process's monotonic clock and random ids by default
//! ([`SystemEnv`]), virtual time and counted ids in the simulation (`lock-sim`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lock_api::{Backend, FencingToken, LockGrant, LockInfo, LockKey, OwnerId, SessionId};

use super::{AcquireOutcome, ExpiredLock, LockStore, ReapReport, SessionRecord, StoreError};

/// Where a memory store gets its time and its session ids.
pub trait StoreEnv: Send + Sync + std::fmt::Debug + 'static {
    /// Monotonic nanoseconds (the store's only clock; never wraps within a run).
    fn now_nanos(&self) -> u64;
    /// A new session id.
    fn session_id(&self) -> SessionId;
    /// A store instant as the wire's `expires_at` (display only).
    fn display(&self, nanos: u64) -> DateTime<Utc>;
}

/// The production environment: this process's monotonic clock, random session ids.
#[derive(Debug)]
pub struct SystemEnv {
    origin: Instant,
    origin_wall: DateTime<Utc>,
}

impl Default for SystemEnv {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            origin_wall: Utc::now(),
        }
    }
}

impl StoreEnv for SystemEnv {
    fn now_nanos(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn session_id(&self) -> SessionId {
        SessionId::random()
    }

    fn display(&self, nanos: u64) -> DateTime<Utc> {
        self.origin_wall + chrono::Duration::nanoseconds(i64::try_from(nanos).unwrap_or(i64::MAX))
    }
}

#[derive(Debug)]
struct Session {
    owner: OwnerId,
    ttl_ms: u64,
    expires: u64,
}

#[derive(Debug, Clone)]
struct Grant {
    token: FencingToken,
    session: SessionId,
    lease_ms: u64,
    expires: u64,
}

#[derive(Debug, Default)]
struct State {
    sessions: HashMap<SessionId, Session>,
    locks: HashMap<LockKey, Grant>,
    /// Last token per key; never removed, so tokens are never reused.
    fences: HashMap<LockKey, FencingToken>,
}

impl State {
    fn live_session(&self, id: SessionId, now: u64) -> Result<&Session, StoreError> {
        match self.sessions.get(&id) {
            None => Err(StoreError::SessionUnknown(id)),
            Some(s) if s.expires <= now => Err(StoreError::SessionExpired(id)),
            Some(s) => Ok(s),
        }
    }

    fn live_grant(&self, key: &LockKey, now: u64) -> Option<&Grant> {
        let grant = self.locks.get(key)?;
        let session = self.sessions.get(&grant.session)?;
        (grant.expires > now && session.expires > now).then_some(grant)
    }
}

/// The in-memory lock store.
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    env: Arc<dyn StoreEnv>,
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
        }
    }

    fn display(&self, nanos: u64) -> DateTime<Utc> {
        self.env.display(nanos)
    }

    fn state(&self) -> Result<std::sync::MutexGuard<'_, State>, StoreError> {
        self.state
            .lock()
            .map_err(|_| StoreError::Internal("memory store mutex poisoned".into()))
    }
}

/// `now` plus `ms`, in nanoseconds.
fn after(now: u64, ms: u64) -> u64 {
    now.saturating_add(ms.saturating_mul(1_000_000))
}

#[async_trait]
impl LockStore for MemoryStore {
    fn backend(&self) -> Backend {
        Backend::Memory
    }

    async fn create_session(
        &self,
        owner: &OwnerId,
        ttl_ms: u64,
    ) -> Result<SessionRecord, StoreError> {
        let now = self.env.now_nanos();
        let session_id = self.env.session_id();
        let expires = after(now, ttl_ms);
        self.state()?.sessions.insert(
            session_id,
            Session {
                owner: owner.clone(),
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
        let mut state = self.state()?;
        let existed = state.sessions.remove(&session).is_some();
        state.locks.retain(|_, grant| grant.session != session);
        Ok(existed)
    }

    async fn acquire(
        &self,
        key: &LockKey,
        session: SessionId,
        lease_ms: u64,
    ) -> Result<AcquireOutcome, StoreError> {
        let now = self.env.now_nanos();
        let mut state = self.state()?;
        state.live_session(session, now)?;
        if let Some(current) = state.live_grant(key, now).cloned() {
            if current.session != session {
                return Ok(AcquireOutcome::Held {
                    holder_token: current.token,
                });
            }
            // Lease and expiry only grow (invariant I4 for every answer).
            let lease_ms = current.lease_ms.max(lease_ms);
            let expires = current.expires.max(after(now, lease_ms));
            state.locks.insert(
                key.clone(),
                Grant {
                    lease_ms,
                    expires,
                    ..current.clone()
                },
            );
            return Ok(AcquireOutcome::Granted {
                grant: LockGrant {
                    lock_key: key.clone(),
                    fencing_token: current.token,
                    lease_ms,
                    expires_at: self.display(expires),
                    session_id: session,
                    proof: None,
                },
                took_over_expired: false,
            });
        }
        let next = FencingToken(state.fences.get(key).map_or(1, |t| t.0 + 1));
        state.fences.insert(key.clone(), next);
        let expires = after(now, lease_ms);
        let replaced = state
            .locks
            .insert(
                key.clone(),
                Grant {
                    token: next,
                    session,
                    lease_ms,
                    expires,
                },
            )
            .is_some();
        Ok(AcquireOutcome::Granted {
            grant: LockGrant {
                lock_key: key.clone(),
                fencing_token: next,
                lease_ms,
                expires_at: self.display(expires),
                session_id: session,
                proof: None,
            },
            took_over_expired: replaced,
        })
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
        let grant = state.locks.get_mut(key).ok_or_else(lost)?;
        if grant.session != session || grant.token != token || grant.expires <= now {
            return Err(lost());
        }
        grant.expires = after(now, grant.lease_ms);
        Ok(LockGrant {
            lock_key: key.clone(),
            fencing_token: token,
            lease_ms: grant.lease_ms,
            expires_at: self.display(grant.expires),
            session_id: session,
            proof: None,
        })
    }

    async fn release(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<bool, StoreError> {
        let mut state = self.state()?;
        if state
            .locks
            .get(key)
            .is_some_and(|g| g.token == token && g.session == session)
        {
            state.locks.remove(key);
            return Ok(true);
        }
        Ok(false)
    }

    async fn get(&self, key: &LockKey) -> Result<Option<LockInfo>, StoreError> {
        let now = self.env.now_nanos();
        let state = self.state()?;
        let Some(grant) = state.live_grant(key, now) else {
            return Ok(None);
        };
        let session = state
            .sessions
            .get(&grant.session)
            .ok_or(StoreError::SessionUnknown(grant.session))?;
        Ok(Some(LockInfo {
            lock_key: key.clone(),
            fencing_token: grant.token,
            owner_id: session.owner.clone(),
            expires_at: self.display(grant.expires.min(session.expires)),
        }))
    }

    async fn revoke(&self, key: &LockKey) -> Result<Option<FencingToken>, StoreError> {
        let now = self.env.now_nanos();
        let mut state = self.state()?;
        let Some(token) = state.live_grant(key, now).map(|g| g.token) else {
            return Ok(None);
        };
        state.locks.remove(key);
        Ok(Some(token))
    }

    async fn reap_expired(&self) -> Result<ReapReport, StoreError> {
        let now = self.env.now_nanos();
        let mut guard = self.state()?;
        let state = &mut *guard;
        let mut report = ReapReport::default();
        let sessions = &state.sessions;
        state.locks.retain(|key, grant| {
            let session = sessions.get(&grant.session);
            let lease_expired = grant.expires <= now;
            let session_expired = session.is_none_or(|s| s.expires <= now);
            if !(lease_expired || session_expired) {
                return true;
            }
            if let Some(s) = session {
                report.locks.push(ExpiredLock {
                    lock_key: key.clone(),
                    fencing_token: grant.token,
                    session_id: grant.session,
                    owner_id: s.owner.clone(),
                    reason: if lease_expired { "lease" } else { "session" },
                });
            }
            false
        });
        let before = state.sessions.len();
        state.sessions.retain(|_, s| s.expires > now);
        report.sessions = (before - state.sessions.len()) as u64;
        Ok(report)
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
