//! What the SQL functions answer, read into the store's types: one place per row shape
//! (`lock_acquire`, `lock_renew`, `session_heartbeat`, `lock_batch`), shared by the single
//! calls and the batch.

use chrono::{DateTime, Utc};
use lock_api::{Claim, FencingToken, GrantScope, LockGrant, LockKey, OwnerId, SessionId};
use uuid::Uuid;

use lock_store::batch::{BatchAnswer, BatchOp, BatchResult};
use lock_store::claim::{HeldAs, conflict_error};
use lock_store::{
    AcquireOutcome, ExpiredLock, ReapReport, Refusal, SessionRecord, SetOutcome, StoreError,
};

pub(super) fn to_i64(value: u64) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::Internal(format!("{value} does not fit in bigint")))
}

pub(super) fn to_u64(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value)
        .map_err(|_| StoreError::Internal(format!("negative value {value} in store")))
}

pub(super) fn required<T>(value: Option<T>, what: &str) -> Result<T, StoreError> {
    value.ok_or_else(|| StoreError::Internal(format!("store function returned no {what}")))
}

pub(super) fn session_error(outcome: &str, session: SessionId) -> StoreError {
    match outcome {
        "SESSION_UNKNOWN" => StoreError::SessionUnknown(session),
        "SESSION_EXPIRED" => StoreError::SessionExpired(session),
        other => StoreError::Internal(format!("unexpected store outcome {other}")),
    }
}

/// One row of `lock_acquire` (or of `lock_batch` for an acquire) with the transaction's
/// `now()`: outcome, token, lease, expiry, took over, wait, waiters ahead, now.
pub(super) type AcquireRow = (
    String,
    Option<i64>,
    Option<i64>,
    Option<DateTime<Utc>>,
    Option<bool>,
    Option<i64>,
    Option<i64>,
    DateTime<Utc>,
);

/// A row of `lock_batch` (`ord` is 1-based) with the transaction's `now()`.
pub(super) type BatchRow = (
    i32,
    String,
    Option<i64>,
    Option<i64>,
    Option<DateTime<Utc>>,
    Option<bool>,
    Option<i64>,
    Option<i64>,
    DateTime<Utc>,
);

pub(super) fn acquire_answer(
    key: &LockKey,
    session: SessionId,
    row: AcquireRow,
) -> Result<AcquireOutcome, StoreError> {
    let (outcome, token, lease, expires_at, took_over, wait_ms, ahead, store_now) = row;
    let token_of = || {
        required(token, "fencing_token")
            .and_then(to_u64)
            .map(FencingToken)
    };
    // A negative wait means the deadline passed between two of the function's now()
    // readings (they are equal within a transaction, so never in practice): ask again.
    let waited = || Ok::<_, StoreError>(required(wait_ms, "wait_ms")?.max(0).unsigned_abs());
    match outcome.as_str() {
        "GRANTED" => Ok(AcquireOutcome::Granted {
            grant: LockGrant {
                lock_key: key.clone(),
                fencing_token: token_of()?,
                lease_ms: to_u64(required(lease, "lease_ms")?)?,
                expires_at: required(expires_at, "expires_at")?,
                session_id: session,
                proof: None,
                waited_ms: 0,
                scope: lock_api::GrantScope::Exclusive,
            },
            took_over_expired: took_over.unwrap_or(false),
            store_now: Some(store_now),
        }),
        "LOCK_HELD" => Ok(Refusal::Held {
            holder_token: token_of()?,
            free_in_ms: waited()?,
        }
        .into()),
        "LOCK_DELAYED" => Ok(Refusal::Delayed {
            remaining_ms: waited()?,
        }
        .into()),
        "QUEUED" => Ok(Refusal::Queued {
            ahead: to_u64(required(ahead, "ahead")?)?,
        }
        .into()),
        // lock_shares_answer: `ahead` carries the key's permit count, none when it is read.
        "KIND_CONFLICT" => {
            let held = match ahead.map(u32::try_from) {
                Some(Ok(permits)) => HeldAs::Permits(permits),
                Some(Err(_)) => return Err(StoreError::Internal(format!("permits {ahead:?}"))),
                None => HeldAs::Shared,
            };
            Err(conflict_error(key, Claim::Exclusive, held))
        }
        other => Err(session_error(other, session)),
    }
}

/// The rows of `lock_acquire_set` (a `lock_batch` row's shape: `ord` names the set's member,
/// from 1): every key granted, or the one refusal.
pub(super) fn set_answer(
    keys: &[LockKey],
    session: SessionId,
    rows: Vec<BatchRow>,
) -> Result<SetOutcome, StoreError> {
    let mut grants = Vec::with_capacity(keys.len());
    let mut store_now = None;
    for (ord, outcome, token, lease, expires_at, took_over, wait_ms, ahead, now) in rows {
        let member = usize::try_from(ord - 1)
            .ok()
            .and_then(|i| keys.get(i))
            .ok_or_else(|| StoreError::Internal(format!("lock_acquire_set answered ord {ord}")))?;
        let row = (
            outcome, token, lease, expires_at, took_over, wait_ms, ahead, now,
        );
        match acquire_answer(member, session, row)? {
            AcquireOutcome::Granted { grant, .. } => grants.push(grant),
            AcquireOutcome::Refused(refusal) => {
                let key = member.clone();
                return Ok(SetOutcome::Refused { key, refusal });
            }
        }
        store_now = Some(now);
    }
    if grants.len() != keys.len() {
        let got = grants.len();
        return Err(StoreError::Internal(format!(
            "lock_acquire_set granted {got} of {} keys",
            keys.len()
        )));
    }
    Ok(SetOutcome::Granted { grants, store_now })
}

pub(super) fn renew_answer(
    key: &LockKey,
    session: SessionId,
    token: FencingToken,
    outcome: &str,
    lease: Option<i64>,
    expires_at: Option<DateTime<Utc>>,
) -> Result<LockGrant, StoreError> {
    // A share's renewal names its scope ('RENEWED permit-3'), which the replica signs.
    let (outcome, scope) = match outcome.split_once(' ') {
        Some(("RENEWED", scope)) => ("RENEWED", GrantScope::parse(scope)),
        _ => (outcome, Some(GrantScope::Exclusive)),
    };
    match outcome {
        "RENEWED" => Ok(LockGrant {
            lock_key: key.clone(),
            fencing_token: token,
            lease_ms: to_u64(required(lease, "lease_ms")?)?,
            expires_at: required(expires_at, "expires_at")?,
            session_id: session,
            proof: None,
            waited_ms: 0,
            scope: scope
                .ok_or_else(|| StoreError::Internal(format!("renewed {key} in no scope")))?,
        }),
        "LOCK_LOST" => Err(StoreError::LockLost {
            lock_key: key.clone(),
            fencing_token: token,
        }),
        other => Err(session_error(other, session)),
    }
}

pub(super) fn heartbeat_answer(
    session: SessionId,
    outcome: &str,
    ttl_ms: Option<i64>,
    expires_at: Option<DateTime<Utc>>,
) -> Result<SessionRecord, StoreError> {
    if outcome != "OK" {
        return Err(session_error(outcome, session));
    }
    Ok(SessionRecord {
        session_id: session,
        ttl_ms: to_u64(required(ttl_ms, "ttl_ms")?)?,
        expires_at: required(expires_at, "expires_at")?,
    })
}

/// The answer of `op` from its row of `lock_batch`.
pub(super) fn batch_answer(op: &BatchOp, row: BatchRow) -> BatchResult {
    let (_, outcome, token, lease, expires_at, took_over, wait_ms, ahead, store_now) = row;
    Ok(match op {
        BatchOp::Heartbeat { session } => {
            BatchAnswer::Heartbeat(heartbeat_answer(*session, &outcome, lease, expires_at)?)
        }
        BatchOp::Acquire { key, session, .. } => BatchAnswer::Acquire(acquire_answer(
            key,
            *session,
            (
                outcome, token, lease, expires_at, took_over, wait_ms, ahead, store_now,
            ),
        )?),
        BatchOp::Renew {
            key,
            session,
            token,
        } => BatchAnswer::Renew(renew_answer(
            key, *session, *token, &outcome, lease, expires_at,
        )?),
        BatchOp::Release { .. } => match outcome.as_str() {
            "RELEASED" => BatchAnswer::Release(true),
            "NOT_HELD" => BatchAnswer::Release(false),
            other => {
                return Err(StoreError::Internal(format!(
                    "unexpected release outcome {other}"
                )));
            }
        },
    })
}

/// One row of the reaper's statement: a grant it removed (key, token, session, owner, whether
/// its lease ended), or the count of sessions it removed.
pub(super) type ReapRow = (
    Option<String>,
    Option<i64>,
    Option<Uuid>,
    Option<String>,
    Option<bool>,
    Option<i64>,
);

/// The reaper's rows as its report.
pub(super) fn reap_report(rows: Vec<ReapRow>) -> Result<ReapReport, StoreError> {
    let mut report = ReapReport::default();
    for row in rows {
        match row {
            (Some(key), Some(token), Some(session), Some(owner), Some(lease_expired), None) => {
                report.locks.push(ExpiredLock {
                    lock_key: LockKey::parse(key)
                        .map_err(|e| StoreError::Internal(format!("stored key: {e}")))?,
                    fencing_token: FencingToken(to_u64(token)?),
                    session_id: SessionId(session),
                    owner_id: OwnerId::parse(owner)
                        .map_err(|e| StoreError::Internal(format!("stored owner id: {e}")))?,
                    reason: if lease_expired { "lease" } else { "session" },
                });
            }
            (None, None, None, None, None, Some(sessions)) => report.sessions = to_u64(sessions)?,
            other => {
                return Err(StoreError::Internal(format!(
                    "unexpected reaper row {other:?}"
                )));
            }
        }
    }
    Ok(report)
}
