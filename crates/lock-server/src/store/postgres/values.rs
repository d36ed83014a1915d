//! What an election's leader announces (`lock_values`, migration 0015): the proclaim write.
//! The read is `get`'s join on the key and the live grant's token.

use lock_api::{FencingToken, LeaderValue, LockKey, SessionId};

use super::rows::to_i64;
use super::{PostgresStore, map_err};
use crate::store::StoreError;

/// Upserts the value of the live exclusive grant (key, session, token), its row locked so no
/// release or take-over commits between the check and the write (READ COMMITTED re-reads a
/// locked row, and a deleted one drops out); a row naming a higher token is never
/// overwritten.
const PROCLAIM: &str = "
    WITH held AS (
        SELECT l.lock_key FROM locks l JOIN lock_sessions s ON s.session_id = l.session_id
         WHERE l.lock_key = $1 AND l.session_id = $2 AND l.fencing_token = $3
           AND l.expires_at > now() AND s.expires_at > now()
           FOR KEY SHARE OF l)
    INSERT INTO lock_values AS v (lock_key, fencing_token, value)
    SELECT lock_key, $3, $4 FROM held
    ON CONFLICT (lock_key) DO UPDATE SET fencing_token = EXCLUDED.fencing_token, value = EXCLUDED.value
     WHERE v.fencing_token <= EXCLUDED.fencing_token
    RETURNING 1";

impl PostgresStore {
    pub(super) async fn proclaim_value(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        value: &LeaderValue,
    ) -> Result<(), StoreError> {
        let written: Option<i32> = sqlx::query_scalar(PROCLAIM)
            .bind(key.as_str())
            .bind(session.0)
            .bind(to_i64(token.0)?)
            .bind(value.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        if written.is_some() {
            return Ok(());
        }
        // Refused: the session's own standing first, as every store answers a proclaim.
        let live: Option<bool> = sqlx::query_scalar(
            "SELECT expires_at > now() FROM lock_sessions WHERE session_id = $1",
        )
        .bind(session.0)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Err(match live {
            None => StoreError::SessionUnknown(session),
            Some(false) => StoreError::SessionExpired(session),
            Some(true) => StoreError::LockLost {
                lock_key: key.clone(),
                fencing_token: token,
            },
        })
    }
}
