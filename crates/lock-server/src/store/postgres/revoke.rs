//! A revoke (L8) on PostgreSQL: the key's live grant and every live share end in one
//! statement, the lock-delay starts and the note is kept, under the key's fence row.

use lock_api::{FencingToken, LockKey, RevokeReason};

use super::rows::to_u64;
use super::{PostgresStore, SET_ENDING, map_err};
use crate::store::{RevokeNote, StoreError};

impl PostgresStore {
    pub(super) async fn revoke_key(
        &self,
        key: &LockKey,
        note: &RevokeNote,
    ) -> Result<Option<FencingToken>, StoreError> {
        // An involuntary end: the grant's lock-delay runs from now (on the fence row, which
        // outlives the grant row; a key's shares (ADR 0007) all end, the longest delay
        // exempting nobody). The delete's trigger wakes the head waiter, who then learns of
        // the delay. The note goes in with the delete, naming the newest token: a renew that
        // finds the grant gone finds who revoked it. The fence row first, as every write to a
        // key's shares takes it.
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query(SET_ENDING)
            .bind("revoked")
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query("SELECT 1 FROM lock_fences WHERE lock_key = $1 FOR UPDATE")
            .bind(key.as_str())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let token: Option<i64> = sqlx::query_scalar(
            "WITH gone AS (
                 DELETE FROM locks l USING lock_sessions s
                  WHERE l.lock_key = $1 AND s.session_id = l.session_id
                    AND l.expires_at > now() AND s.expires_at > now()
              RETURNING l.fencing_token, l.session_id, l.lock_delay_ms, true AS whole),
             shares_gone AS (
                 DELETE FROM lock_holds h USING lock_sessions s
                  WHERE h.lock_key = $1 AND s.session_id = h.session_id
                    AND h.expires_at > now() AND s.expires_at > now()
              RETURNING h.fencing_token, h.session_id, h.lock_delay_ms, false AS whole),
             ended AS (SELECT * FROM gone UNION ALL SELECT * FROM shares_gone),
             newest AS (
                 SELECT max(fencing_token) AS fencing_token, max(lock_delay_ms) AS lock_delay_ms,
                        CASE WHEN bool_and(whole) THEN (array_agg(session_id))[1] END AS exempt
                   FROM ended),
             delayed AS (
                 UPDATE lock_fences f
                    SET delay_until = now() + n.lock_delay_ms * interval '1 millisecond',
                        delay_exempt = n.exempt
                   FROM newest n
                  WHERE f.lock_key = $1 AND n.lock_delay_ms > 0),
             noted AS (
                 INSERT INTO lock_revocations (lock_key, fencing_token, revoked_by, reason, revoked_at)
                 SELECT $1, fencing_token, $2, $3, now() FROM newest WHERE fencing_token IS NOT NULL
                 ON CONFLICT (lock_key) DO UPDATE
                    SET fencing_token = EXCLUDED.fencing_token, revoked_by = EXCLUDED.revoked_by,
                        reason = EXCLUDED.reason, revoked_at = EXCLUDED.revoked_at)
             SELECT fencing_token FROM newest",
        )
        .bind(key.as_str())
        .bind(&note.by)
        .bind(note.reason.as_ref().map(RevokeReason::as_str))
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        token.map(|t| to_u64(t).map(FencingToken)).transpose()
    }
}
