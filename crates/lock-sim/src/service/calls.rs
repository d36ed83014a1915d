//! The lock surface as the simulation's clients and replicas speak it: each request
//! ([`LockCall`]) and each answer ([`LockAnswer`]), with what a grant holds of its key (a
//! lock's whole key, a reader's share, a permit's slot: ADR 0007).

use lock_api::{Claim, FencingToken, GrantScope, LeaderValue, LockKey, SessionId};
use lock_store::{EventPage, RequestId};

use crate::observe::LeaderRead;
use crate::sched::Nanos;

/// A lock-surface request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockCall {
    /// Open a session.
    Open { owner: String, ttl_ms: u64 },
    /// Heartbeat a session: keep it alive.
    Heartbeat(SessionId),
    /// Acquire a key, with the wait the SDK's loop asked for (`None`: a try). `request`: the
    /// replica's name for the request ([`RequestId::NONE`] as the client sends it; the
    /// replica that takes it names it, as lock-server's `waiting::Exposure` does). `claim`:
    /// the key alone (a lock, a writer), a reader's share, or a permit (ADR 0007); a share's
    /// acquire is never batched (lock-server's `Batched` sends it alone).
    Acquire {
        key: LockKey,
        session: SessionId,
        lease_ms: u64,
        wait_ms: Option<u64>,
        request: RequestId,
        claim: Claim,
    },
    /// Acquire a key set (sorted, each key once) all or nothing, as `Acquire` does one key
    /// (ADR 0007); never batched: a set is a store transaction of its own.
    AcquireSet {
        keys: Vec<LockKey>,
        session: SessionId,
        lease_ms: u64,
        wait_ms: Option<u64>,
        request: RequestId,
    },
    /// Renew a lease.
    Renew {
        key: LockKey,
        session: SessionId,
        token: FencingToken,
    },
    /// Release a grant.
    Release {
        key: LockKey,
        session: SessionId,
        token: FencingToken,
    },
    /// L9: the live grant (an election's leader) announces `value`; a store call of its own,
    /// never batched (lock-server's `Batched` passes it through).
    Proclaim {
        key: LockKey,
        session: SessionId,
        token: FencingToken,
        value: LeaderValue,
    },
    /// L7 of an election's key: its leader's term and value (an observer's read).
    Inspect { key: LockKey },
    /// W1's read: a page of the events of keys under `prefix` after position `after` (a
    /// watcher's, as lock-server's watch stream reads it).
    Events { prefix: String, after: u64 },
}

impl LockCall {
    /// Whether `answer` can be this call's own: an answer of its kind about its key and
    /// token, or a refusal.
    pub fn answered_by(&self, answer: &LockAnswer) -> bool {
        match (self, answer) {
            (Self::Open { .. }, LockAnswer::Opened { .. })
            | (Self::Heartbeat(_), LockAnswer::Extended { .. })
            | (Self::Release { .. }, LockAnswer::Released)
            | (Self::Proclaim { .. }, LockAnswer::Proclaimed)
            | (Self::Inspect { .. }, LockAnswer::Leader(_))
            | (Self::Events { .. }, LockAnswer::Page(_))
            | (_, LockAnswer::Held | LockAnswer::NotLeader | LockAnswer::KindConflict)
            | (_, LockAnswer::SessionUnknown | LockAnswer::SessionExpired | LockAnswer::LockLost) => {
                true
            }
            (
                Self::Acquire { key, claim, .. },
                LockAnswer::Granted {
                    key: granted,
                    scope,
                    ..
                },
            ) => granted == key && claim.answered_by(*scope),
            (Self::AcquireSet { keys, .. }, LockAnswer::SetGranted { members, .. }) => {
                members.iter().map(|m| &m.key).eq(keys.iter())
            }
            (
                Self::Renew { key, token, .. },
                LockAnswer::Granted {
                    key: granted,
                    token: renewed,
                    ..
                },
            ) => granted == key && renewed == token,
            _ => false,
        }
    }

    /// The key a call is about, if any (a set's are several: none).
    pub fn key(&self) -> Option<&LockKey> {
        match self {
            Self::Open { .. }
            | Self::Heartbeat(_)
            | Self::AcquireSet { .. }
            | Self::Events { .. } => None,
            Self::Acquire { key, .. }
            | Self::Renew { key, .. }
            | Self::Release { key, .. }
            | Self::Proclaim { key, .. }
            | Self::Inspect { key } => Some(key),
        }
    }
}

/// One member of a set granted whole, as a replica tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its key.
    pub key: LockKey,
    /// Its own token.
    pub token: FencingToken,
    /// Its lease, as told.
    pub lease_ms: u64,
    /// Its expiry in true time, as told.
    pub expires: Nanos,
}

/// A lock-surface answer (`expires` in true nanoseconds: the store's expiry read through its
/// clock's offset at the answer; a later step of that clock moves the real expiry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAnswer {
    /// A session was opened.
    Opened {
        session: SessionId,
        ttl_ms: u64,
        expires: Nanos,
    },
    /// A heartbeat extended the session.
    Extended { ttl_ms: u64, expires: Nanos },
    /// A grant, from an acquire or a renew.
    Granted {
        key: LockKey,
        token: FencingToken,
        lease_ms: u64,
        expires: Nanos,
        session: SessionId,
        /// How long the replica held the request before the store call that granted it.
        waited_ms: u64,
        /// What the grant holds of its key: the whole key, a reader's share, a permit's slot.
        scope: GrantScope,
    },
    /// A key set granted whole: each member's grant, in the set's order.
    SetGranted {
        members: Vec<Member>,
        session: SessionId,
        /// How long the replica held the request before the store call that granted it.
        waited_ms: u64,
    },
    /// An acquire refused: another session holds it.
    Held,
    /// A release's answer (whatever it found).
    Released,
    /// A proclaim's answer: the value is announced.
    Proclaimed,
    /// An L7 read of an election's key: its leader, if a grant holds it alone.
    Leader(Option<LeaderRead>),
    /// W1's read: a page of the store's events.
    Page(EventPage),
    /// 503.
    NotLeader,
    /// 404.
    SessionUnknown,
    /// 410.
    SessionExpired,
    /// 409 on renew.
    LockLost,
    /// 409 on acquire: the key's live grants are of another kind, or the session holds it in
    /// the other mode (`LOCK_KIND_CONFLICT`).
    KindConflict,
}
