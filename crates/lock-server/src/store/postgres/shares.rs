//! Readers and permits on PostgreSQL (ADR 0007): the calls beside the lock's own. A share is
//! a `lock_holds` row; `lock_acquire_share` decides and grants one, `lock_renew`,
//! `lock_release` and `lock_abandon` find it by its token, and `lock_notify_free` wakes the
//! waiter a freed share makes room for. Inspect reads them here (revoke and the reaper end
//! them in their one statement each).

use chrono::{DateTime, Utc};
use lock_api::{Claim, FencingToken, GrantScope, HolderInfo, LockInfo, LockKey};
use lock_api::{OwnerId, SessionId};

use super::rows::{acquire_answer, required, to_i64, to_u64};
use super::{PostgresStore, map_err};
use lock_store::claim::{HeldAs, conflict_error};
use lock_store::{AcquireOutcome, AcquireSpec, StoreError};

/// A row of `lock_acquire_share` with the transaction's `now()`: outcome, token, lease,
/// expiry, wait, waiters ahead, scope, what the key is held as, now.
type ShareRow = (
    String,
    Option<i64>,
    Option<i64>,
    Option<DateTime<Utc>>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
    DateTime<Utc>,
);

/// A live share as inspect reads it: token, owner, end, slot, permit count.
type HolderRow = (i64, String, DateTime<Utc>, Option<i32>, Option<i32>);

impl PostgresStore {
    /// [`lock_store::LockStore::acquire_with`] for a reader's or a permit's claim.
    pub(super) async fn acquire_share(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<AcquireOutcome, StoreError> {
        let permits = match spec.claim {
            Claim::Permit { permits } => Some(i32::try_from(permits).map_err(internal)?),
            Claim::Shared => None,
            Claim::Exclusive => unreachable!("a lock is lock_acquire's"),
        };
        let row: ShareRow =
            sqlx::query_as("SELECT *, now() FROM lock_acquire_share($1, $2, $3, $4, $5, $6, $7)")
                .bind(key.as_str())
                .bind(session.0)
                .bind(to_i64(spec.lease_ms)?)
                .bind(to_i64(spec.queue_ms)?)
                .bind(to_i64(spec.lock_delay_ms)?)
                .bind(to_i64(spec.request.0)?)
                .bind(permits)
                .fetch_one(&self.pool)
                .await
                .map_err(map_err)?;
        share_answer(key, session, spec.claim, row)
    }

    /// Inspect of a key no exclusive grant holds: its live shares, if any.
    pub(super) async fn shares_info(&self, key: &LockKey) -> Result<Option<LockInfo>, StoreError> {
        let rows: Vec<HolderRow> = sqlx::query_as(
            "SELECT h.fencing_token, s.owner_id, LEAST(h.expires_at, s.expires_at), h.slot, h.permits
               FROM lock_holds h JOIN lock_sessions s ON s.session_id = h.session_id
              WHERE h.lock_key = $1 AND h.expires_at > now() AND s.expires_at > now()
              ORDER BY h.fencing_token",
        )
        .bind(key.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        let Some(&(_, _, _, _, permits)) = rows.first() else {
            return Ok(None);
        };
        let holders = rows
            .into_iter()
            .map(holder_info)
            .collect::<Result<Vec<HolderInfo>, StoreError>>()?;
        let newest = holders
            .last()
            .cloned()
            .ok_or_else(|| internal("no holder"))?;
        Ok(Some(LockInfo {
            lock_key: key.clone(),
            fencing_token: newest.fencing_token,
            owner_id: newest.owner_id,
            expires_at: newest.expires_at,
            waiters: self.live_waiters(key).await?,
            holders,
            permits: permits.map(u32::try_from).transpose().map_err(internal)?,
            value: None,
        }))
    }

    /// Live waiters queued for `key`.
    async fn live_waiters(&self, key: &LockKey) -> Result<u64, StoreError> {
        let waiters: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM lock_waiters w JOIN lock_sessions s ON s.session_id = w.session_id
              WHERE w.lock_key = $1 AND w.expires_at > now() AND s.expires_at > now()",
        )
        .bind(key.as_str())
        .fetch_one(&self.pool)
        .await
        .map_err(map_err)?;
        to_u64(waiters)
    }
}

fn share_answer(
    key: &LockKey,
    session: SessionId,
    claim: Claim,
    row: ShareRow,
) -> Result<AcquireOutcome, StoreError> {
    let (outcome, token, lease, expires_at, wait_ms, ahead, scope, held_as, store_now) = row;
    if outcome == "KIND_CONFLICT" {
        let held = held_as_of(&required(held_as, "held_as")?)?;
        return Err(conflict_error(key, claim, held));
    }
    // Every other answer is read as lock_acquire's; a grant then takes its scope.
    let row = (
        outcome, token, lease, expires_at, None, wait_ms, ahead, store_now,
    );
    let mut answer = acquire_answer(key, session, row)?;
    if let AcquireOutcome::Granted { grant, .. } = &mut answer {
        let scope = required(scope, "scope")?;
        grant.scope = GrantScope::parse(&scope).ok_or_else(|| internal(&scope))?;
    }
    Ok(answer)
}

/// `lock_acquire_share`'s `held_as`: `exclusive`, `shared` or `permits:N`.
fn held_as_of(text: &str) -> Result<HeldAs, StoreError> {
    match text {
        "exclusive" => Ok(HeldAs::Exclusive),
        "shared" => Ok(HeldAs::Shared),
        _ => text
            .strip_prefix("permits:")
            .and_then(|n| n.parse().ok())
            .map(HeldAs::Permits)
            .ok_or_else(|| internal(text)),
    }
}

fn holder_info(row: HolderRow) -> Result<HolderInfo, StoreError> {
    let (token, owner, ends_at, slot, _) = row;
    let scope = match slot {
        Some(slot) => GrantScope::Permit {
            slot: u32::try_from(slot).map_err(internal)?,
        },
        None => GrantScope::Shared,
    };
    Ok(HolderInfo {
        fencing_token: FencingToken(to_u64(token)?),
        owner_id: OwnerId::parse(owner).map_err(internal)?,
        expires_at: ends_at,
        scope,
    })
}

fn internal(err: impl std::fmt::Display) -> StoreError {
    StoreError::Internal(format!("lock_holds: {err}"))
}
