//! JSON bodies of the lock service's HTTP surface, pinned in
//! `docs/contracts/C3-http-surfaces.md`. Requests refuse unknown fields.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{FencingToken, LeaderValue, LockKey, OwnerId, SessionId};
use crate::limits::{PERMITS_MAX, SET_KEYS_MAX, TTL_ABSURD_MS};
use crate::proof::GrantScope;
use crate::validation::ValidationError;

/// Which `LockStore` implementation answers; reported by L1 and used as a metric label.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// PostgreSQL: the production store.
    Postgres,
    /// In-process memory: unit tests and simulation only.
    Memory,
    /// etcd (milestone M3).
    Etcd,
}

impl Backend {
    /// The label value used in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Memory => "memory",
            Self::Etcd => "etcd",
        }
    }
}

/// Checks a requested TTL: zero and anything above [`TTL_ABSURD_MS`] are refused; everything
/// else is accepted here and clamped by the server to its configured range.
pub fn validate_requested_ttl(field: &'static str, ttl_ms: u64) -> Result<u64, ValidationError> {
    if ttl_ms == 0 {
        return Err(ValidationError::new(field, "must be at least 1 ms"));
    }
    if ttl_ms > TTL_ABSURD_MS {
        return Err(ValidationError::new(
            field,
            format!("{ttl_ms} ms is above the absurd-TTL limit of {TTL_ABSURD_MS} ms"),
        ));
    }
    Ok(ttl_ms)
}

/// L1 `POST /v1/sessions` request.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSessionRequest {
    /// Who owns the session (for logs and `LockInfo`).
    pub owner_id: OwnerId,
    /// Requested session TTL; the server's `lock.session.ttl` when absent. Clamped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86_400_000))]
    // TTL_ABSURD_MS: a test in openapi.rs keeps them equal
    pub ttl_ms: Option<u64>,
}

/// L1 response (201).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateSessionResponse {
    /// The new session's id.
    pub session_id: SessionId,
    /// The TTL granted (after clamping).
    pub ttl_ms: u64,
    /// The store's expiry instant, for humans and logs only; never for expiry decisions.
    pub expires_at: DateTime<Utc>,
    /// Which store answers.
    pub backend: Backend,
}

/// L2 `POST /v1/sessions/{session_id}/heartbeat` response (200).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatResponse {
    /// The session TTL the heartbeat extended by.
    pub ttl_ms: u64,
    /// The new expiry instant (display only).
    pub expires_at: DateTime<Utc>,
}

/// L4 `POST /v1/locks/{lock_key}/acquire` request.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    /// The session that will hold the lock.
    pub session_id: SessionId,
    /// Requested lease; the server's `lock.default.ttl` when absent. Clamped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86_400_000))]
    // TTL_ABSURD_MS: a test in openapi.rs keeps them equal
    pub ttl_ms: Option<u64>,
    /// How long the server may hold the request waiting for the key, in FIFO order with
    /// the key's other waiters (C3 §L4). Absent or 0: answer at once. Clamped to the
    /// server's `lock.max.wait`; above [`TTL_ABSURD_MS`] refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 86_400_000))]
    pub wait_ms: Option<u64>,
    /// Lock-delay of this grant: if it ends involuntarily (lease or session expiry, L8
    /// revoke), no other session is granted the key for this long. Absent: the server's
    /// `lock.default.lock-delay`; 0: none. Clamped to `lock.max.lock-delay`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 86_400_000))]
    pub lock_delay_ms: Option<u64>,
    /// A read/write lock's side (ADR 0007): `shared` for a reader, which holds the key with
    /// other readers; `exclusive` (the default) for a writer, which holds it alone, exactly
    /// as a lock does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<LockMode>,
    /// A semaphore's permit count (ADR 0007): the key is held by up to this many sessions
    /// at once, each in its own slot with its own token. 1 to [`PERMITS_MAX`]; every live
    /// permit of a key was asked with the same count. Not with `mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 256))]
    // PERMITS_MAX: a test in openapi.rs keeps them equal
    pub permits: Option<u32>,
    /// An election's campaign (C2 §2.4c): the value the grant announces, set before the
    /// grant is answered, as L9 sets it later. Only for an exclusive claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, max_length = 4096))]
    pub value: Option<LeaderValue>,
}

impl AcquireRequest {
    /// What the request claims of its key: refused (naming `permits`) for a count outside
    /// 1 to [`PERMITS_MAX`] or beside `mode`.
    pub fn claim(&self) -> Result<Claim, ValidationError> {
        Claim::of(self.mode, self.permits)
    }
}

/// A read/write lock's side, as L4 names it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockMode {
    /// A writer: the key alone.
    Exclusive,
    /// A reader: the key with other readers.
    Shared,
}

/// What an acquire claims of its key (ADR 0007). A key's live grants are all of one kind:
/// locks and writers (exclusive) beside readers (shared), or permits of one count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Claim {
    /// The whole key: a lock, or a read/write lock's writer.
    #[default]
    Exclusive,
    /// A reader's share, beside other readers.
    Shared,
    /// One of the key's `permits`.
    Permit {
        /// The key's permit count, 1 to [`PERMITS_MAX`].
        permits: u32,
    },
}

impl Claim {
    /// The claim L4's `mode` and `permits` name together.
    pub fn of(mode: Option<LockMode>, permits: Option<u32>) -> Result<Self, ValidationError> {
        match (mode, permits) {
            (None | Some(LockMode::Exclusive), None) => Ok(Self::Exclusive),
            (Some(LockMode::Shared), None) => Ok(Self::Shared),
            (None, Some(permits)) if (1..=PERMITS_MAX).contains(&permits) => {
                Ok(Self::Permit { permits })
            }
            (None, Some(permits)) => Err(ValidationError::new(
                "permits",
                format!("a semaphore has 1 to {PERMITS_MAX} permits, got {permits}"),
            )),
            (Some(_), Some(_)) => Err(ValidationError::new(
                "permits",
                "a key is a semaphore (permits) or a read/write lock (mode), not both",
            )),
        }
    }

    /// L4's `mode` and `permits` for this claim (what a client sends).
    pub fn as_wire(self) -> (Option<LockMode>, Option<u32>) {
        match self {
            Self::Exclusive => (None, None),
            Self::Shared => (Some(LockMode::Shared), None),
            Self::Permit { permits } => (None, Some(permits)),
        }
    }

    /// Whether a grant in `scope` answers this claim.
    pub fn answered_by(self, scope: GrantScope) -> bool {
        match (self, scope) {
            (Self::Exclusive, GrantScope::Exclusive) | (Self::Shared, GrantScope::Shared) => true,
            (Self::Permit { permits }, GrantScope::Permit { slot }) => slot < permits,
            _ => false,
        }
    }
}

/// `POST /v1/lock-sets/acquire` request (ADR 0007): several keys granted to one session
/// together, each with its own token, or none; a waiting set holds no key. The options are
/// L4's, for every key of the set.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireSetRequest {
    /// The session that will hold the keys.
    pub session_id: SessionId,
    /// 1 to [`SET_KEYS_MAX`] keys, each once, in any order ([`key_set`]).
    pub lock_keys: Vec<LockKey>,
    /// Requested lease of every grant, as L4's `ttl_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86_400_000))]
    pub ttl_ms: Option<u64>,
    /// How long the server may hold the request waiting for the whole set, as L4's
    /// `wait_ms`; the set's places in the keys' queues share one arrival order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 86_400_000))]
    pub wait_ms: Option<u64>,
    /// Lock-delay of every grant, as L4's `lock_delay_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 86_400_000))]
    pub lock_delay_ms: Option<u64>,
}

/// `POST /v1/lock-sets/acquire` response (200): one grant per key, sorted by key. Each is
/// an ordinary grant: renewed, released and fenced on its own key's routes.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetGrant {
    /// The grants, sorted by key.
    pub grants: Vec<LockGrant>,
}

/// `keys` as a set is taken: sorted, each once, 1 to [`SET_KEYS_MAX`] of them; refused
/// (naming `lock_keys`) when empty, too many, or a key repeats.
pub fn key_set(mut keys: Vec<LockKey>) -> Result<Vec<LockKey>, ValidationError> {
    if keys.is_empty() || keys.len() > SET_KEYS_MAX {
        let n = keys.len();
        return Err(ValidationError::new(
            "lock_keys",
            format!("a set names 1 to {SET_KEYS_MAX} keys, got {n}"),
        ));
    }
    keys.sort();
    if let Some(pair) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(ValidationError::new(
            "lock_keys",
            format!("{} is named twice; a set names each key once", pair[0]),
        ));
    }
    Ok(keys)
}

/// Checks a requested wait or lock-delay: anything above [`TTL_ABSURD_MS`] is refused; 0
/// means none; everything else is clamped by the server.
pub fn validate_requested_duration(field: &'static str, ms: u64) -> Result<u64, ValidationError> {
    if ms > TTL_ABSURD_MS {
        return Err(ValidationError::new(
            field,
            format!("{ms} ms is above the absurd-duration limit of {TTL_ABSURD_MS} ms"),
        ));
    }
    Ok(ms)
}

/// L4 and L5 response (200): a grant. Renew returns the same token.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockGrant {
    /// The key granted.
    pub lock_key: LockKey,
    /// The grant's fencing token.
    pub fencing_token: FencingToken,
    /// The lease granted (after clamping); clients compute deadlines from this.
    pub lease_ms: u64,
    /// The store's expiry instant, for humans and logs only.
    pub expires_at: DateTime<Utc>,
    /// The holding session.
    pub session_id: SessionId,
    /// The lock-server's signed proof of this grant (`v2.{key_id}.{grant}.{signature}`, see
    /// [`crate::FenceVerifier`]); absent when the server has no signing key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// L4 only: how long the server held the request before the store call that granted
    /// it (0 without `wait_ms`). The grant began at least this long after the request was
    /// sent, so a client may start its deadline that much later (C2 §2.3); an SDK never
    /// credits more than it measured itself.
    #[serde(default)]
    pub waited_ms: u64,
    /// What the grant holds of its key (ADR 0007): absent for the whole key (a lock, a
    /// writer), `shared` for a reader, `permit-{slot}` for a semaphore's permit. A resource
    /// fences a permit per slot ([`GrantScope::fenced_resource`]).
    #[serde(default, skip_serializing_if = "GrantScope::is_exclusive")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "permit-0"))]
    pub scope: GrantScope,
}

/// L5 `POST /v1/locks/{lock_key}/renew` request.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// The holding session.
    pub session_id: SessionId,
    /// The grant's token; renew never changes it.
    pub fencing_token: FencingToken,
}

/// L9 `POST /v1/locks/{lock_key}/proclaim` request: the live exclusive grant (key, session,
/// token) announces `value` in place of the one it announced, keeping its token (an
/// election's leader changing what it says without giving up its term).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProclaimRequest {
    /// The holding session.
    pub session_id: SessionId,
    /// The grant's token: a leader's term.
    pub fencing_token: FencingToken,
    /// What the grant announces from now on.
    #[cfg_attr(feature = "openapi", schema(value_type = String, max_length = 4096))]
    pub value: LeaderValue,
}

/// L6 `POST /v1/locks/{lock_key}/release` request: compare-and-delete on key, token and
/// holding session. The session id is the holder's proof: L7 never shows it, so knowing
/// the key and the token is not enough to release someone else's lock.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The holding session.
    pub session_id: SessionId,
    /// The grant's token.
    pub fencing_token: FencingToken,
}

/// L6 response (200). A stale token is `released: false`, not an error.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseResponse {
    /// Whether a live grant with that key and token was deleted.
    pub released: bool,
}

/// L7 `GET /v1/locks/{lock_key}` response (200): who holds the key now. It names the
/// holder's owner, never its session id: the session id is what L2-L6 require.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// The key.
    pub lock_key: LockKey,
    /// The live grant's token.
    pub fencing_token: FencingToken,
    /// The holding session's owner.
    pub owner_id: OwnerId,
    /// The earlier of the lease's and the session's expiry (display only).
    pub expires_at: DateTime<Utc>,
    /// Sessions queued for the key behind this grant (L4 with `wait_ms`), all replicas.
    #[serde(default)]
    pub waiters: u64,
    /// A key held shared or by permits (ADR 0007): every live holder, lowest token first
    /// (the fields above then name the newest). Empty for a key held exclusively.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<HolderInfo>,
    /// A semaphore key's permit count, while any permit is live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// What the live exclusive grant announces (an election's leader, L4 `value` or L9);
    /// absent while it has announced nothing. Never a value of an earlier grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub value: Option<LeaderValue>,
}

/// One live holder of a key held shared or by permits (L7).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderInfo {
    /// Its token.
    pub fencing_token: FencingToken,
    /// Its session's owner.
    pub owner_id: OwnerId,
    /// The earlier of its lease's and its session's expiry (display only).
    pub expires_at: DateTime<Utc>,
    /// What it holds: `shared`, or `permit-{slot}`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "permit-0"))]
    pub scope: GrantScope,
}

/// L8 `POST /v1/locks/{lock_key}/revoke` response (200). This is the revoke result only:
/// never an acquire or held-check result.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockOutcome {
    /// The key.
    pub lock_key: LockKey,
    /// Whether a live grant was revoked.
    pub revoked: bool,
    /// The revoked grant's token, when there was one.
    pub fencing_token: Option<FencingToken>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_refuse_unknown_fields() {
        let err = serde_json::from_str::<ReleaseRequest>(r#"{"fencing_token":1,"x":2}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `x`"), "{err}");
    }

    #[test]
    fn ttl_bounds() {
        assert!(validate_requested_ttl("ttl_ms", 0).is_err());
        assert!(validate_requested_ttl("ttl_ms", TTL_ABSURD_MS + 1).is_err());
        assert_eq!(validate_requested_ttl("ttl_ms", 1).unwrap(), 1);
    }

    #[test]
    fn backend_serializes_lowercase() {
        assert_eq!(
            serde_json::to_string(&Backend::Postgres).unwrap(),
            "\"postgres\""
        );
    }
}
