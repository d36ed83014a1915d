//! The reaper's one statement.
//!
//! One statement, one snapshot and one now(): the grants and shares (ADR 0007) of expired
//! sessions are returned (and logged) before the sessions go, never dropped silently by the
//! cascade. The victims' rows are locked first, in key order (bytewise, as a batch and a key
//! set take keys), so a reap never waits for a set in a cycle. The victims are found through
//! the expiry indexes (expired leases; grants of expired sessions), so a pass that finds
//! nothing costs a few index probes, not a scan of every grant: with a million held keys, a
//! scan took 0.6 s of every second. Each ended grant's lock-delay runs from its end; a key
//! whose shares ended exempts nobody.

use super::rows::{ReapRow, reap_report};
use super::{PostgresStore, SET_ENDING, events, map_err};
use crate::store::{ReapReport, StoreError};

/// First, in the same transaction: the fence rows of keys with ended shares, in key order.
/// Every write to a key's shares takes its fence row before the share's row; so does the
/// reaper.
pub(super) const LOCK_FENCES_OF_ENDED_SHARES: &str = "
SELECT 1 FROM lock_fences f
 WHERE f.lock_key IN (
     SELECT h.lock_key FROM lock_holds h WHERE h.expires_at <= now()
     UNION
     SELECT h.lock_key FROM lock_sessions s JOIN lock_holds h ON h.session_id = s.session_id
      WHERE s.expires_at <= now())
 ORDER BY f.lock_key COLLATE \"C\"
   FOR UPDATE";

/// Rows: each ended grant or share (key, token, session, owner, whether its lease ended), then
/// one row with the count of sessions removed.
pub(super) const REAP_EXPIRED: &str = "
WITH candidates AS (
     SELECT l.lock_key FROM locks l WHERE l.expires_at <= now()
     UNION
     SELECT l.lock_key FROM lock_sessions s JOIN locks l ON l.session_id = s.session_id
      WHERE s.expires_at <= now()),
 victims AS MATERIALIZED (
     SELECT l.lock_key FROM locks l JOIN candidates c ON c.lock_key = l.lock_key
      ORDER BY l.lock_key COLLATE \"C\" FOR UPDATE OF l),
 gone AS (
     DELETE FROM locks l USING lock_sessions s, victims v
      WHERE l.lock_key = v.lock_key AND s.session_id = l.session_id
        AND (l.expires_at <= now() OR s.expires_at <= now())
  RETURNING l.lock_key, l.fencing_token, l.session_id, s.owner_id,
            l.expires_at <= now() AS lease_expired, l.lock_delay_ms,
            LEAST(l.expires_at, s.expires_at) AS ends_at, true AS whole),
 share_candidates AS (
     SELECT h.lock_key, h.fencing_token FROM lock_holds h WHERE h.expires_at <= now()
     UNION
     SELECT h.lock_key, h.fencing_token
       FROM lock_sessions s JOIN lock_holds h ON h.session_id = s.session_id
      WHERE s.expires_at <= now()),
 share_victims AS MATERIALIZED (
     SELECT h.lock_key, h.fencing_token
       FROM lock_holds h JOIN share_candidates c
         ON c.lock_key = h.lock_key AND c.fencing_token = h.fencing_token
      ORDER BY h.lock_key COLLATE \"C\", h.fencing_token FOR UPDATE OF h),
 shares_gone AS (
     DELETE FROM lock_holds h USING lock_sessions s, share_victims v
      WHERE h.lock_key = v.lock_key AND h.fencing_token = v.fencing_token
        AND s.session_id = h.session_id
        AND (h.expires_at <= now() OR s.expires_at <= now())
  RETURNING h.lock_key, h.fencing_token, h.session_id, s.owner_id,
            h.expires_at <= now() AS lease_expired, h.lock_delay_ms,
            LEAST(h.expires_at, s.expires_at) AS ends_at, false AS whole),
 ended AS (SELECT * FROM gone UNION ALL SELECT * FROM shares_gone),
 delayed AS (
     UPDATE lock_fences f
        SET delay_until = GREATEST(COALESCE(f.delay_until, '-infinity'), d.until),
            delay_exempt = d.exempt
       FROM (SELECT e.lock_key, max(e.ends_at + e.lock_delay_ms * interval '1 millisecond') AS until,
                    CASE WHEN count(*) = 1 AND bool_and(e.whole) THEN (array_agg(e.session_id))[1] END AS exempt
               FROM ended e WHERE e.lock_delay_ms > 0 GROUP BY e.lock_key) d
      WHERE f.lock_key = d.lock_key),
 lapsed AS (DELETE FROM lock_waiters WHERE expires_at <= now()),
 dead AS (DELETE FROM lock_sessions WHERE expires_at <= now() RETURNING 1)
 SELECT lock_key, fencing_token, session_id, owner_id, lease_expired, NULL::bigint FROM ended
 UNION ALL
 SELECT NULL, NULL, NULL, NULL, NULL, count(*) FROM dead";

impl PostgresStore {
    /// [`lock_store::LockStore::reap_expired`]: the reaper's transaction, old events forgotten in it.
    pub(super) async fn reap(&self) -> Result<ReapReport, StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query(SET_ENDING)
            .bind("expired")
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query(events::FORGET_OLD_EVENTS)
            .bind(events::EVENTS_KEPT_FOR)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query(LOCK_FENCES_OF_ENDED_SHARES)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let rows: Vec<ReapRow> = sqlx::query_as(REAP_EXPIRED)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        reap_report(rows)
    }
}
