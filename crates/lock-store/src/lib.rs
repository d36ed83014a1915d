//! The lock store's contract and what lives beside it, free of any I/O backend:
//!
//! - the `LockStore` trait: the single source of truth and the single clock for expiry, with
//!   its types (`AcquireSpec`, `AcquireOutcome`, `Wake`, `StoreError`, ...);
//! - [`MemoryStore`], the in-memory implementation (tests, demos, the simulation) on a
//!   [`StoreEnv`] clock seam;
//! - [`decide`]: the grant decision (held, delayed, queued, granted), pure, which a store
//!   reads for, calls, and writes after; and the same for the primitives beyond a mutex
//!   (ADR 0007): [`permits`] (a semaphore's slots), [`shared`] (readers and a writer) and
//!   [`key_set`] (several keys, all or nothing);
//! - [`batch`]: group commit's policy (which writes go together, whose answer is whose);
//! - the pure decisions a replica makes around a store: [`wait_plan`] (a waiting acquire) and
//!   [`ClockGuard`] (steps of the store's clock), with [`ClockCheckedStore`], the wrapper every
//!   replica serves through.
//!
//! lock-server implements PostgreSQL and etcd on this trait; lock-sim runs this crate and
//! nothing of lock-server. Every implementation passes the one conformance suite in
//! lock-server's `tests/it/conformance.rs`. Handlers clamp TTLs before calling a store; a
//! store never sees a TTL outside the configured range.
//!
//! Architecture Invariant: no networking, no database driver, no HTTP here; the store's
//! clock is read only through `StoreEnv` or `LockStore::clock_now`.

pub mod batch;
mod checked;
pub mod claim;
mod clock_guard;
pub mod decide;
mod env;
pub mod events;
pub mod key_set;
mod memory;
pub mod permits;
pub mod shared;
pub mod wait_plan;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lock_api::{
    Backend, Claim, FencingToken, LeaderValue, LockGrant, LockInfo, LockKey, OwnerId, RevokeReason,
    SessionId,
};

#[cfg(feature = "sampler")]
pub use checked::watch_clock;
pub use checked::{
    CLOCK_SAMPLE_INTERVAL, ClockCheckedStore, GRANTS_WITHHELD_TOTAL, ReplicaClock,
    STORE_CLOCK_STEPS_TOTAL, SystemClock,
};
pub use clock_guard::{ClockGuard, ClockReading, Verdict};
pub use env::{StoreEnv, SystemEnv};
pub use events::{EVENT_PAGE_MAX, EventPage, HeadSink};
pub use memory::MemoryStore;

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

/// Who a session belongs to: the owner it acts as and the credential that opened it. Fixed
/// for the session's life, so a replica may keep it once read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOwner {
    /// The owner id L1 named.
    pub owner: OwnerId,
    /// The name of the credential that opened the session: the only one its routes answer.
    /// Empty for a session opened without one (the stores' own tests and the simulation);
    /// no credential's name is empty, so such a session answers no HTTP caller.
    pub credential: String,
}

impl SessionOwner {
    /// An owner without a credential (tests and the simulation).
    pub fn anonymous(owner: &OwnerId) -> Self {
        Self {
            owner: owner.clone(),
            credential: String::new(),
        }
    }
}

/// Names one acquire request to the store, so that a grant the store made for it can be taken
/// back when the request ends without telling its client ([`LockStore::abandon`]).
/// [`RequestId::NONE`] names no request: a grant made for it is never abandoned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

impl RequestId {
    /// No request (tests and callers that never abandon).
    pub const NONE: Self = Self(0);

    /// What a live grant recording this request records once `asking` is granted it again:
    /// the same request, or, asked by another, none (either may have told its client, so
    /// neither may abandon it).
    pub fn after_regrant(self, asking: Self) -> Self {
        if self == asking { self } else { Self::NONE }
    }
}

impl SetOutcome {
    /// The outcome as an acquire's reads to the wait plan (`wait_plan::WaitPlan::after`):
    /// a grant (its first member's), or the refusal.
    pub fn as_acquire(&self) -> AcquireOutcome {
        match self {
            Self::Granted { grants, store_now } => AcquireOutcome::Granted {
                grant: grants[0].clone(),
                took_over_expired: false,
                store_now: *store_now,
            },
            Self::Refused { refusal, .. } => AcquireOutcome::Refused(*refusal),
        }
    }
}

/// What an acquire asks of the store beyond the key and the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireSpec {
    /// The lease to grant (already clamped).
    pub lease_ms: u64,
    /// 0: a try-acquire that never queues. Otherwise the caller joins the key's FIFO queue
    /// when it is not granted (or keeps its place: one place per session and key), and the
    /// place lapses this long after the call unless renewed by the next call.
    pub queue_ms: u64,
    /// The grant's lock-delay (already clamped): if it ends involuntarily, no other session
    /// is granted the key for this long.
    pub lock_delay_ms: u64,
    /// The request asking: the grant (or the queue place, and a grant handed over to it)
    /// records it. A re-grant to another request of the session records none: either may
    /// have told its client, so neither may abandon it.
    pub request: RequestId,
    /// What the acquire claims of its key (ADR 0007): the key alone (a lock, a writer), a
    /// reader's share, or a permit. A key set's members are always exclusive.
    pub claim: Claim,
}

impl AcquireSpec {
    /// A try-acquire for `lease_ms` without lock-delay (what the tests and the simulation
    /// mostly ask).
    pub const fn lease(lease_ms: u64) -> Self {
        Self {
            lease_ms,
            queue_ms: 0,
            lock_delay_ms: 0,
            request: RequestId::NONE,
            claim: Claim::Exclusive,
        }
    }

    /// The same acquire, claiming `claim`.
    pub const fn claiming(self, claim: Claim) -> Self {
        Self { claim, ..self }
    }
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
        /// The store's clock when it decided, for the replica's [`ClockGuard`]; `None` where
        /// expiry does not follow a wall clock (etcd times leases on its leader's monotonic
        /// clock).
        store_now: Option<DateTime<Utc>>,
    },
    /// Not granted: why, and when asking again may help.
    Refused(Refusal),
}

/// Why an acquire that reached the store was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Another live session holds the key.
    Held {
        /// The holder's token.
        holder_token: FencingToken,
        /// Milliseconds until the holder's grant ends unless it renews (store clock).
        free_in_ms: u64,
    },
    /// The key is free but in the lock-delay of a grant that ended involuntarily.
    Delayed {
        /// Milliseconds until the delay ends (store clock).
        remaining_ms: u64,
    },
    /// The key is free but other sessions queued for it first (FIFO).
    Queued {
        /// Live waiters ahead of the caller.
        ahead: u64,
    },
}

impl Refusal {
    /// How long a waiter may sleep before asking again without missing a deadline the store
    /// knows of (the holder's expiry, the delay's end); `None` when only a wake-up helps.
    pub fn recheck_in_ms(&self) -> Option<u64> {
        match self {
            Self::Queued { .. } => None,
            Self::Held { free_in_ms, .. } => Some(*free_in_ms),
            Self::Delayed { remaining_ms } => Some(*remaining_ms),
        }
    }
}

/// The result of an acquire of a key set that reached the store (ADR 0007): all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetOutcome {
    /// Every key granted, each with its own token, in the set's order (sorted).
    Granted {
        /// One grant per key, in the set's order.
        grants: Vec<LockGrant>,
        /// The store's clock when it decided, as [`AcquireOutcome::Granted`] says.
        store_now: Option<DateTime<Utc>>,
    },
    /// Nothing granted: the first key (in the set's order) that was refused, and why.
    Refused {
        /// That key.
        key: LockKey,
        /// Its refusal.
        refusal: Refusal,
    },
}

impl From<Refusal> for AcquireOutcome {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

/// A wake-up for the replica's waiters: a key became free (released, revoked, reaped, or
/// the head of its queue left) and this session is now first in its queue, or was granted
/// the key by the write that freed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// `session` is first in `key`'s queue and the key is free.
    Head {
        /// The key.
        key: LockKey,
        /// The session at the head of its queue.
        session: SessionId,
    },
    /// `key` was freed and, in the same write, granted to the head of its queue
    /// ([`decide::hand_over`]): that waiter's parked request answers with `grant` without asking
    /// the store again.
    HandedOver {
        /// The grant (no proof: the replica that answers signs it).
        grant: LockGrant,
        /// How long, on the store's clock, the waiter's queue place had gone untouched when
        /// the grant began: the grant began this long after the store saw the waiter's last
        /// call, which is what `waited_ms` may add to the time before that call.
        place_age_ms: u64,
    },
    /// Wake-ups may have been lost (the store's notification channel reconnected): every
    /// waiter asks again.
    Everyone,
}

/// Where a store delivers its wake-ups.
pub type WakeSink = std::sync::Arc<dyn Fn(Wake) + Send + Sync>;

/// A store's [`WakeSink`], once `watch_wakes` set it.
#[derive(Default)]
pub struct WakeSlot(std::sync::OnceLock<WakeSink>);

impl WakeSlot {
    /// Sets the sink; a second call is ignored (one watcher per store).
    pub fn set(&self, sink: WakeSink) {
        let _ = self.0.set(sink);
    }

    /// Delivers `wakes`, if a sink is set.
    pub fn deliver(&self, wakes: impl IntoIterator<Item = Wake>) {
        if let Some(sink) = self.0.get() {
            wakes.into_iter().for_each(|w| sink(w));
        }
    }
}

impl std::fmt::Debug for WakeSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "WakeSlot(set)"
        } else {
            "WakeSlot(unset)"
        })
    }
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

/// Who revoked a grant and why (L8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokeNote {
    /// The name of the credential that revoked.
    pub by: String,
    /// Why, when given.
    pub reason: Option<RevokeReason>,
}

/// A grant revoked, as the store keeps it beside its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    /// The revoked grant's token.
    pub token: FencingToken,
    /// Who and why.
    pub note: RevokeNote,
}

impl Revocation {
    /// What the holder of grant `token` of `key` is told when it renews: by whom and why.
    pub fn told(&self, key: &LockKey) -> String {
        let mut told = format!(
            "lock {key} (token {}) was revoked by {}",
            self.token, self.note.by
        );
        if let Some(reason) = &self.note.reason {
            told.push_str(": ");
            told.push_str(reason.as_str());
        }
        told
    }
}

/// Store failures. The first four are answers about the caller's request; the rest are
/// about the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The session does not exist.
    #[error("session {} is unknown", .0.tag())]
    SessionUnknown(SessionId),
    /// The session exists but has expired.
    #[error("session {} has expired", .0.tag())]
    SessionExpired(SessionId),
    /// The grant presented for renewal is not live.
    #[error("lock {lock_key} with token {fencing_token} is not held by this session")]
    LockLost {
        /// The key.
        lock_key: LockKey,
        /// The token presented.
        fencing_token: FencingToken,
    },
    /// The key's live grants are of another kind than the acquire claims ([`claim::conflict`]),
    /// or the caller holds it in the other mode: nothing granted, the caller's mistake.
    #[error("lock {lock_key} is held as {held}; this acquire asks for {asked}")]
    KindConflict {
        /// The key.
        lock_key: LockKey,
        /// What its live grants are ([`claim::HeldAs::describe`]).
        held: String,
        /// What the acquire asked for ([`claim::describe`]).
        asked: String,
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

    /// Open: creates a session of `opener` that lives `ttl_ms` past each heartbeat.
    async fn open_session(
        &self,
        opener: &SessionOwner,
        ttl_ms: u64,
    ) -> Result<SessionRecord, StoreError>;

    /// [`LockStore::open_session`] for an owner without a credential (tests, the simulation).
    async fn create_session(
        &self,
        owner: &OwnerId,
        ttl_ms: u64,
    ) -> Result<SessionRecord, StoreError> {
        self.open_session(&SessionOwner::anonymous(owner), ttl_ms)
            .await
    }

    /// How many live sessions the credential named `credential` opened, on every replica:
    /// what its session quota counts.
    async fn sessions_of(&self, credential: &str) -> Result<u64, StoreError>;

    /// Who `session` belongs to, while the store keeps it (live, or expired and not yet
    /// reaped); `None` for a session it does not know.
    async fn session_owner(&self, session: SessionId) -> Result<Option<SessionOwner>, StoreError>;

    /// Heartbeat: extends a live session by its TTL.
    async fn heartbeat(&self, session: SessionId) -> Result<SessionRecord, StoreError>;

    /// Close: deletes a session and releases its locks. Returns whether it existed.
    async fn delete_session(&self, session: SessionId) -> Result<bool, StoreError>;

    /// Acquire as a try, without lock-delay: [`LockStore::acquire_with`] with
    /// [`AcquireSpec::lease`].
    async fn acquire(
        &self,
        key: &LockKey,
        session: SessionId,
        lease_ms: u64,
    ) -> Result<AcquireOutcome, StoreError> {
        self.acquire_with(key, session, AcquireSpec::lease(lease_ms))
            .await
    }

    /// Acquire: grants `key` to `session` for `spec.lease_ms`, unless another live session holds
    /// it, the key is in a lock-delay for this session, or live waiters queued before this
    /// session (or at all, for a caller not queued). With `spec.queue_ms > 0` a refused
    /// caller holds a place in the key's FIFO queue; a grant removes it.
    async fn acquire_with(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<AcquireOutcome, StoreError>;

    /// Acquire a set: grants every key of `keys` to `session` or none, in one write, each
    /// key by the lock's rule ([`key_set::decide_set`]) with its own token. `keys` is in the
    /// store's order ([`key_set::canonical`]: sorted, each once) and holds 1 to
    /// [`key_set::MAX_SET_KEYS`] keys. With `spec.queue_ms > 0` a refused set keeps a place in
    /// every key's queue, all taken in one write, so that they share one arrival order; a
    /// freed key never goes to a set's place alone (its waiter is woken to ask for the set).
    /// Renew, release and abandon are per key, as for a lock.
    async fn acquire_set(
        &self,
        keys: &[LockKey],
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<SetOutcome, StoreError>;

    /// Removes `session`'s place in `key`'s queue, if any (a waiter gave up or went away).
    async fn leave_queue(&self, key: &LockKey, session: SessionId) -> Result<(), StoreError>;

    /// Request `request` of `session` ended without telling its client of a grant of `key`
    /// (its client went away, the store's answer was lost or withheld). A grant the store
    /// made for that request, that no other request of the session was granted since, is
    /// released (voluntarily: no lock-delay) and the key goes on to its next waiter; with
    /// `leave`, the request's own queue place goes too. Whether a grant was released.
    async fn abandon(
        &self,
        key: &LockKey,
        session: SessionId,
        request: RequestId,
        leave: bool,
    ) -> Result<bool, StoreError>;

    /// Starts delivering wake-ups for this replica's waiters to `sink` (across replicas
    /// where the backend can). Called once, before serving. Without it waiters still make
    /// progress on their recheck timer.
    async fn watch_wakes(&self, sink: WakeSink) -> Result<(), StoreError> {
        let _ = sink;
        Ok(())
    }

    /// Whether a freed key goes to its live head waiter in the freeing write
    /// ([`Wake::HandedOver`]); otherwise the head is woken to ask ([`Wake::Head`]).
    fn hands_over(&self) -> bool {
        false
    }

    /// Whether this replica may answer `grant`, handed over to a parked request, and how long
    /// the grant may have run by now at the longest (`None`: this store cannot tell, and the
    /// grant is not answered; the request asks the store again). The replica's clock guard
    /// ([`ClockCheckedStore`]) reads the hand-over's start as one more reading of the store's
    /// clock and bounds its age; a refusal withholds the grant (it lapses at its lease, never
    /// believed).
    fn admit_hand_over(
        &self,
        grant: &LockGrant,
    ) -> Result<Option<std::time::Duration>, StoreError> {
        let _ = grant;
        Ok(None)
    }

    /// Renew: extends a live grant by its lease. Never changes the token.
    async fn renew(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<LockGrant, StoreError>;

    /// Release: compare-and-delete on (key, holding session, token). Returns whether a grant was
    /// deleted: a stale token or another session's is `false`, never an error.
    async fn release(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<bool, StoreError>;

    /// Proclaim (C2 §2.4c): the live exclusive grant (key, session, token) announces `value`
    /// in place of what it announced; [`LockStore::get`] answers it while that grant lives and
    /// never for a later grant of the key. [`StoreError::LockLost`] when that grant is not
    /// live (a stale term never overwrites its successor's value).
    async fn proclaim(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        value: &LeaderValue,
    ) -> Result<(), StoreError>;

    /// Inspect: the live grant of `key`, if any, with the number of live waiters queued for it
    /// and what it announces.
    async fn get(&self, key: &LockKey) -> Result<Option<LockInfo>, StoreError>;

    /// Revoke: deletes the live grant of `key`, if any, and returns its token. An involuntary
    /// end: the grant's lock-delay starts. In the same write the store keeps `note` as the
    /// key's last [`Revocation`], so the holder's next renew can be told who and why.
    async fn revoke(
        &self,
        key: &LockKey,
        note: &RevokeNote,
    ) -> Result<Option<FencingToken>, StoreError>;

    /// Watching (C3 W1): up to `limit` events of keys under `prefix` with positions after
    /// `after`, lowest first, with how far the read reached and the oldest position kept.
    async fn events_after(
        &self,
        prefix: &str,
        after: u64,
        limit: usize,
    ) -> Result<EventPage, StoreError>;

    /// Starts telling `sink` the head position whenever events may have been added (across
    /// replicas where the backend can). Called once, before serving; without it watchers
    /// read on their recheck timer.
    async fn watch_events(&self, sink: HeadSink) -> Result<(), StoreError> {
        let _ = sink;
        Ok(())
    }

    /// The last revocation of `key`, if any was ever made (one per key, replaced by the next).
    async fn revocation(&self, key: &LockKey) -> Result<Option<Revocation>, StoreError>;

    /// Deletes expired grants, sessions and queue places; each expired grant's lock-delay
    /// runs from when it expired.
    async fn reap_expired(&self) -> Result<ReapReport, StoreError>;

    /// The store's clock now, for the replica's [`ClockGuard`]; `None` where expiry does not
    /// follow a wall clock.
    async fn clock_now(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(None)
    }

    /// Applies gathered writes, one result per write in the order given (a store that can
    /// commits them together: one transaction, one flush). A write's failure is its own: it
    /// never fails the others. By default each write is applied alone, in order.
    async fn apply_batch(&self, ops: &[batch::BatchOp]) -> Vec<batch::BatchResult> {
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            results.push(op.apply_alone(self).await);
        }
        results
    }

    /// Whether the store answers and takes writes.
    async fn ready(&self) -> Result<(), StoreError>;

    /// What could make this store lose a committed grant after a crash, and so hand out a
    /// token twice; empty when nothing visible can. The lock-server refuses to start on a
    /// non-empty answer unless told otherwise (`LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE`).
    async fn durability_risks(&self) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
}
