//! The `LockStore` trait: the single source of truth and the single clock for expiry.
//!
//! Every implementation passes the one conformance suite in `tests/it/conformance.rs`.
//! Handlers clamp TTLs before calling a store; a store never sees a TTL outside the
//! configured range.

mod etcd;
mod memory;
mod postgres;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lock_api::{Backend, FencingToken, LockGrant, LockInfo, LockKey, OwnerId, SessionId};

pub use etcd::EtcdStore;
pub use memory::{MemoryStore, StoreEnv, SystemEnv};
pub use postgres::PostgresStore;

/// A session as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session's id.
    pub session_id: SessionId,
    /// The TTL every heartbeat extends by.
    pub ttl_ms: u64,
    /// The store's expiry instant (display only for clients).
    pub expires_at: DateTime<Utc>,
}

/// The result of an acquire that reached the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// Granted: a new token, or the same token when the session already held the key.
    Granted {
        /// The grant.
        grant: LockGrant,
        /// Whether an expired grant of another session was replaced.
        took_over_expired: bool,
    },
    /// Another live session holds the key.
    Held {
        /// The holder's token.
        holder_token: FencingToken,
    },
}

/// A grant the reaper removed because its lease or its session expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredLock {
    /// The key.
    pub lock_key: LockKey,
    /// The expired grant's token.
    pub fencing_token: FencingToken,
    /// The session that held it.
    pub session_id: SessionId,
    /// That session's owner.
    pub owner_id: OwnerId,
    /// `"lease"` or `"session"`.
    pub reason: &'static str,
}

/// What one reaper pass removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Grants removed.
    pub locks: Vec<ExpiredLock>,
    /// Sessions removed.
    pub sessions: u64,
}

/// Store failures. The first three are answers about the caller's request; the rest are
/// about the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The session does not exist.
    #[error("session {0} is unknown")]
    SessionUnknown(SessionId),
    /// The session exists but has expired.
    #[error("session {0} has expired")]
    SessionExpired(SessionId),
    /// The grant presented for renewal is not live.
    #[error("lock {lock_key} with token {fencing_token} is not held by this session")]
    LockLost {
        /// The key.
        lock_key: LockKey,
        /// The token presented.
        fencing_token: FencingToken,
    },
    /// The store refuses writes (read-only database, no leader).
    #[error("store cannot take writes: {0}")]
    NotLeader(String),
    /// The store cannot be reached or timed out.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Anything else: a bug or a schema mismatch.
    #[error("store error: {0}")]
    Internal(String),
}

/// The lock store. All expiry decisions use the store's own clock.
#[async_trait]
pub trait LockStore: Send + Sync + std::fmt::Debug + 'static {
    /// Which backend this is.
    fn backend(&self) -> Backend;

    /// L1: creates a session that lives `ttl_ms` past each heartbeat.
    async fn create_session(
        &self,
        owner: &OwnerId,
        ttl_ms: u64,
    ) -> Result<SessionRecord, StoreError>;

    /// L2: extends a live session by its TTL.
    async fn heartbeat(&self, session: SessionId) -> Result<SessionRecord, StoreError>;

    /// L3: deletes a session and releases its locks. Returns whether it existed.
    async fn delete_session(&self, session: SessionId) -> Result<bool, StoreError>;

    /// L4: grants `key` to `session` for `lease_ms`, unless another live session holds it.
    async fn acquire(
        &self,
        key: &LockKey,
        session: SessionId,
        lease_ms: u64,
    ) -> Result<AcquireOutcome, StoreError>;

    /// L5: extends a live grant by its lease. Never changes the token.
    async fn renew(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<LockGrant, StoreError>;

    /// L6: compare-and-delete on (key, holding session, token). Returns whether a grant was
    /// deleted: a stale token or another session's is `false`, never an error.
    async fn release(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<bool, StoreError>;

    /// L7: the live grant of `key`, if any.
    async fn get(&self, key: &LockKey) -> Result<Option<LockInfo>, StoreError>;

    /// L8: deletes the live grant of `key`, if any, and returns its token.
    async fn revoke(&self, key: &LockKey) -> Result<Option<FencingToken>, StoreError>;

    /// Deletes expired grants and sessions.
    async fn reap_expired(&self) -> Result<ReapReport, StoreError>;

    /// Whether the store answers and takes writes.
    async fn ready(&self) -> Result<(), StoreError>;

    /// What could make this store lose a committed grant after a crash, and so hand out a
    /// token twice; empty when nothing visible can. The lock-server refuses to start on a
    /// non-empty answer unless told otherwise (`LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE`).
    async fn durability_risks(&self) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
}
