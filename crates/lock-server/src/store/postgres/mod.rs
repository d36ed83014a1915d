//! `LockStore` on PostgreSQL. Each operation is one round trip; the grant logic lives in
//! SQL functions (`migrations/`) so the store's `now()` is the only clock. A batch of writes
//! is one `lock_batch` statement. `rows.rs` reads what the functions answer; `listen.rs`
//! carries their wake-ups; `hosts.rs` finds the writable host of a multi-host URL.

mod durability;
mod events;
mod hosts;
mod listen;
mod reap;
mod revoke;
mod rows;
mod shares;
mod values;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lock_api::{
    Backend, Claim, FencingToken, LeaderValue, LockGrant, LockInfo, LockKey, OwnerId, RevokeReason,
    SessionId,
};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use self::hosts::Hosts;
use self::listen::{connect_listener, listen};
use self::rows::{
    AcquireRow, BatchRow, acquire_answer, batch_answer, heartbeat_answer, renew_answer, set_answer,
    to_i64, to_u64,
};
use lock_store::batch::{BatchOp, BatchResult};
use lock_store::{
    AcquireOutcome, AcquireSpec, EventPage, HeadSink, LockStore, ReapReport, RequestId, Revocation,
    RevokeNote, SessionOwner, SessionRecord, SetOutcome, StoreError, WakeSink,
};

/// How the grants a transaction deletes ended, for the watch log (`lock_event()`): set in
/// the transactions of a revoke and of the reaper.
const SET_ENDING: &str = "SELECT set_config('lock.ending', $1, true)";

/// SQLSTATE of "cannot execute ... in a read-only transaction": a demoted primary or a
/// database set read-only.
const SQLSTATE_READ_ONLY: &str = "25006";
/// SQLSTATE classes that mean "the store, not the request, failed; try again".
const TRANSIENT_SQLSTATE_PREFIXES: &[&str] = &["08", "57P", "40"];
/// How long a request waits for a pooled connection before the store is "unavailable".
const POOL_ACQUIRE_TIMEOUT_MS: u64 = 2_000;
/// The setting `lock_notify_free()` reads on the freeing transaction's connection: `off`
/// wakes a freed key's head waiter to ask instead of granting it the key (migration 0006).
const HAND_OVER_SETTING: &str = "lock.hand_over";

/// The PostgreSQL lock store.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// Connections of its own for LISTEN, so waking and watching never take a request's.
    listen_pool: PgPool,
    /// Every replica (sink) served by this store's one listener.
    sinks: Arc<Mutex<Vec<WakeSink>>>,
    listening: Arc<AtomicBool>,
    /// Whether its connections let `lock_notify_free()` hand a freed key over.
    hand_over: bool,
    /// The hosts of its URL, and which one the pools connect to.
    hosts: Arc<Hosts>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool)
            .field("listening", &self.listening)
            .field("hand_over", &self.hand_over)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects with at most `max_connections` and runs the embedded migrations; a freed
    /// key is handed over to its head waiter.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        Self::connect_handing_over(url, max_connections, true).await
    }

    /// [`Self::connect`], choosing whether a freed key is handed over to its head waiter in
    /// the transaction that freed it (`false`: the head is woken to ask, one more commit).
    pub async fn connect_handing_over(
        url: &str,
        max_connections: u32,
        hand_over: bool,
    ) -> Result<Self, StoreError> {
        let hosts = Hosts::parse(url, (!hand_over).then_some((HAND_OVER_SETTING, "off")))?;
        let (options, listen_options) = hosts.first_writable().await?;
        let pool = (hosts.pool_options(PgPoolOptions::new()))
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_millis(POOL_ACQUIRE_TIMEOUT_MS))
            // No ping before every checkout: it doubles round trips. A dead connection fails
            // its query (503 STORE_UNAVAILABLE, retried by clients) and is dropped.
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .map_err(map_err)?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| StoreError::Internal(format!("migrations failed: {e}")))?;
        // Two listeners: wake-ups (`listen.rs`) and the watch log's sequencer (`events.rs`).
        let listen_pool = (hosts.pool_options(PgPoolOptions::new()))
            .max_connections(2)
            .acquire_timeout(Duration::from_millis(POOL_ACQUIRE_TIMEOUT_MS))
            .connect_lazy_with(listen_options);
        hosts.attach(&pool, &listen_pool);
        Ok(Self {
            pool,
            listen_pool,
            sinks: Arc::default(),
            listening: Arc::default(),
            hand_over,
            hosts: Arc::new(hosts),
        })
    }

    /// The connection pool (for tests and benchmarks).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// `err` as the store's error; an unavailable or read-only store has a multi-host URL
    /// look for the host that takes writes.
    fn failed(&self, err: sqlx::Error) -> StoreError {
        self.hosts.saw(map_err(err))
    }
}

fn map_err(err: sqlx::Error) -> StoreError {
    if let Some(db) = err.as_database_error() {
        let code = db.code().unwrap_or_default();
        if code == SQLSTATE_READ_ONLY {
            return StoreError::NotLeader(db.message().to_owned());
        }
        // Connection exceptions (08), operator intervention such as a terminated backend or
        // a shutting-down server (57P), and transaction rollbacks (40: serialization failure,
        // deadlock) are about the store, not the request: retryable.
        if TRANSIENT_SQLSTATE_PREFIXES
            .iter()
            .any(|p| code.starts_with(p))
        {
            return StoreError::Unavailable(db.to_string());
        }
        return StoreError::Internal(db.to_string());
    }
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => StoreError::Unavailable(err.to_string()),
        other => StoreError::Internal(other.to_string()),
    }
}

/// Why a batch statement failed: whether it may have committed decides what its writes are
/// told.
#[derive(Debug)]
enum BatchFailed {
    /// Never sent (no connection to be had): every write is answered the store's
    /// unavailability; none goes again, which would only ask the starved pool for more.
    NotSent(StoreError),
    /// The server refused the statement with an error of its own (an autocommit statement
    /// that errors commits nothing). Each write may go again alone.
    NotCommitted(StoreError),
    /// The answer was lost on the way (a cut connection), or the server ended the session
    /// (classes 08 and 57: such a FATAL may follow the implicit commit at Sync): the batch may
    /// have committed.
    Unknown(StoreError),
}

/// SQLSTATE classes of errors that end the connection and may come after a commit.
const SESSION_ENDING_SQLSTATE_CLASSES: [&str; 2] = ["08", "57"];

impl BatchFailed {
    fn of(err: sqlx::Error) -> Self {
        if matches!(err, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed) {
            return Self::NotSent(map_err(err));
        }
        let statement_refused = err.as_database_error().is_some_and(|db| {
            let code = db.code().unwrap_or_default();
            !SESSION_ENDING_SQLSTATE_CLASSES
                .iter()
                .any(|class| code.starts_with(class))
        });
        if statement_refused {
            Self::NotCommitted(map_err(err))
        } else {
            Self::Unknown(map_err(err))
        }
    }
}

impl PostgresStore {
    /// `ops` as one `lock_batch` statement: one transaction, one flush. Each row names its
    /// write by position (`ord`), and every write must get exactly one.
    async fn batch_statement(&self, ops: &[BatchOp]) -> Result<Vec<BatchResult>, BatchFailed> {
        let n = ops.len();
        let (mut kinds, mut keys, mut sessions) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut tokens, mut leases, mut queues, mut delays, mut requests) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for op in ops {
            let (kind, key, session, token, spec) = match op {
                BatchOp::Heartbeat { session } => ("heartbeat", "", session, 0, None),
                BatchOp::Acquire { key, session, spec } => {
                    ("acquire", key.as_str(), session, 0, Some(spec))
                }
                BatchOp::Renew {
                    key,
                    session,
                    token,
                } => ("renew", key.as_str(), session, token.0, None),
                BatchOp::Release {
                    key,
                    session,
                    token,
                } => ("release", key.as_str(), session, token.0, None),
            };
            let int = |v: u64| to_i64(v).map_err(BatchFailed::NotCommitted);
            kinds.push(kind);
            keys.push(key);
            sessions.push(session.0);
            tokens.push(int(token)?);
            leases.push(int(spec.map_or(0, |s| s.lease_ms))?);
            queues.push(int(spec.map_or(0, |s| s.queue_ms))?);
            delays.push(int(spec.map_or(0, |s| s.lock_delay_ms))?);
            requests.push(int(spec.map_or(0, |s| s.request.0))?);
        }
        let rows: Vec<BatchRow> =
            sqlx::query_as("SELECT *, now() FROM lock_batch($1, $2, $3, $4, $5, $6, $7, $8)")
                .bind(&kinds)
                .bind(&keys)
                .bind(&sessions)
                .bind(&tokens)
                .bind(&leases)
                .bind(&queues)
                .bind(&delays)
                .bind(&requests)
                .fetch_all(&self.pool)
                .await
                .map_err(BatchFailed::of)?;
        // Committed: from here on a fault is a bug in the statement, reported to the writes it
        // leaves in doubt, never a reason to apply the batch again.
        let mut results: Vec<Option<BatchResult>> = vec![None; n];
        for row in rows {
            let slot = usize::try_from(row.0)
                .ok()
                .and_then(|ord| ord.checked_sub(1))
                .filter(|&i| i < n && results[i].is_none());
            let Some(i) = slot else {
                let err = StoreError::Internal(format!("lock_batch answered position {}", row.0));
                return Ok(vec![Err(err); n]);
            };
            results[i] = Some(batch_answer(&ops[i], row));
        }
        Ok(results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(StoreError::Internal(
                        "lock_batch left a write unanswered".into(),
                    ))
                })
            })
            .collect())
    }
}

#[async_trait]
impl LockStore for PostgresStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    /// `lock_notify_free()` grants a freed key to its head waiter (migration 0006).
    fn hands_over(&self) -> bool {
        self.hand_over
    }

    async fn open_session(
        &self,
        opener: &SessionOwner,
        ttl_ms: u64,
    ) -> Result<SessionRecord, StoreError> {
        let session_id = SessionId::random();
        let expires_at: DateTime<Utc> = sqlx::query_scalar(
            "INSERT INTO lock_sessions (session_id, owner_id, credential, ttl_ms, expires_at)
             VALUES ($1, $2, $3, $4, now() + $4 * interval '1 millisecond')
             RETURNING expires_at",
        )
        .bind(session_id.0)
        .bind(opener.owner.as_str())
        .bind(opener.credential.as_str())
        .bind(to_i64(ttl_ms)?)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| self.failed(e))?;
        Ok(SessionRecord {
            session_id,
            ttl_ms,
            expires_at,
        })
    }

    async fn session_owner(&self, session: SessionId) -> Result<Option<SessionOwner>, StoreError> {
        let row: Option<(String, String)> =
            sqlx::query_as("SELECT owner_id, credential FROM lock_sessions WHERE session_id = $1")
                .bind(session.0)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.failed(e))?;
        row.map(|(owner, credential)| {
            Ok(SessionOwner {
                owner: OwnerId::parse(owner)
                    .map_err(|e| StoreError::Internal(format!("a stored owner id: {e}")))?,
                credential,
            })
        })
        .transpose()
    }

    async fn sessions_of(&self, credential: &str) -> Result<u64, StoreError> {
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM lock_sessions WHERE credential = $1 AND expires_at > now()",
        )
        .bind(credential)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| self.failed(e))?;
        to_u64(live)
    }

    async fn heartbeat(&self, session: SessionId) -> Result<SessionRecord, StoreError> {
        let (outcome, ttl_ms, expires_at): (String, Option<i64>, Option<DateTime<Utc>>) =
            sqlx::query_as("SELECT * FROM session_heartbeat($1)")
                .bind(session.0)
                .fetch_one(&self.pool)
                .await
                .map_err(|e| self.failed(e))?;
        heartbeat_answer(session, &outcome, ttl_ms, expires_at)
    }

    async fn delete_session(&self, session: SessionId) -> Result<bool, StoreError> {
        // The session's grants are locked first, in key order (bytewise, as a batch and a key
        // set take keys), then the cascade deletes them: a close never waits for a set in a
        // cycle. Its shares after their keys' fence rows, as every write to shares.
        let result = sqlx::query(
            "WITH held AS MATERIALIZED (
                 SELECT l.lock_key FROM locks l WHERE l.session_id = $1
                  ORDER BY l.lock_key COLLATE \"C\" FOR UPDATE),
             fences AS MATERIALIZED (
                 SELECT f.lock_key FROM lock_fences f
                  WHERE f.lock_key IN (SELECT h.lock_key FROM lock_holds h WHERE h.session_id = $1)
                  ORDER BY f.lock_key COLLATE \"C\" FOR SHARE),
             shared AS MATERIALIZED (
                 SELECT h.lock_key FROM lock_holds h WHERE h.session_id = $1
                  ORDER BY h.lock_key COLLATE \"C\" FOR UPDATE)
             DELETE FROM lock_sessions WHERE session_id = $1
                AND (SELECT count(*) FROM held) + (SELECT count(*) FROM fences)
                    + (SELECT count(*) FROM shared) >= 0",
        )
        .bind(session.0)
        .execute(&self.pool)
        .await
        .map_err(|e| self.failed(e))?;
        Ok(result.rows_affected() > 0)
    }

    async fn acquire_with(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<AcquireOutcome, StoreError> {
        if spec.claim != Claim::Exclusive {
            lock_store::claim::check_count(key, spec.claim)?;
            return self.acquire_share(key, session, spec).await;
        }
        // now() is the transaction's start, the same instant the function decided by.
        let row: AcquireRow =
            sqlx::query_as("SELECT *, now() FROM lock_acquire($1, $2, $3, $4, $5, $6)")
                .bind(key.as_str())
                .bind(session.0)
                .bind(to_i64(spec.lease_ms)?)
                .bind(to_i64(spec.queue_ms)?)
                .bind(to_i64(spec.lock_delay_ms)?)
                .bind(to_i64(spec.request.0)?)
                .fetch_one(&self.pool)
                .await
                .map_err(|e| self.failed(e))?;
        acquire_answer(key, session, row)
    }

    async fn acquire_set(
        &self,
        keys: &[LockKey],
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<SetOutcome, StoreError> {
        let names: Vec<&str> = keys.iter().map(LockKey::as_str).collect();
        let rows: Vec<BatchRow> =
            sqlx::query_as("SELECT *, now() FROM lock_acquire_set($1, $2, $3, $4, $5, $6)")
                .bind(&names)
                .bind(session.0)
                .bind(to_i64(spec.lease_ms)?)
                .bind(to_i64(spec.queue_ms)?)
                .bind(to_i64(spec.lock_delay_ms)?)
                .bind(to_i64(spec.request.0)?)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.failed(e))?;
        set_answer(keys, session, rows)
    }

    async fn leave_queue(&self, key: &LockKey, session: SessionId) -> Result<(), StoreError> {
        sqlx::query("SELECT lock_leave($1, $2)")
            .bind(key.as_str())
            .bind(session.0)
            .execute(&self.pool)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    async fn abandon(
        &self,
        key: &LockKey,
        session: SessionId,
        request: RequestId,
        leave: bool,
    ) -> Result<bool, StoreError> {
        sqlx::query_scalar("SELECT lock_abandon($1, $2, $3, $4)")
            .bind(key.as_str())
            .bind(session.0)
            .bind(to_i64(request.0)?)
            .bind(leave)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.failed(e))
    }

    async fn watch_wakes(&self, sink: WakeSink) -> Result<(), StoreError> {
        self.sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(sink);
        if self.listening.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        match connect_listener(&self.listen_pool).await {
            Ok(listener) => {
                tokio::spawn(listen(
                    listener,
                    self.listen_pool.clone(),
                    self.sinks.clone(),
                ));
                Ok(())
            }
            Err(err) => {
                self.listening.store(false, Ordering::SeqCst);
                Err(self.failed(err))
            }
        }
    }

    async fn renew(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<LockGrant, StoreError> {
        let (outcome, lease, expires_at): (String, Option<i64>, Option<DateTime<Utc>>) =
            sqlx::query_as("SELECT * FROM lock_renew($1, $2, $3)")
                .bind(key.as_str())
                .bind(session.0)
                .bind(to_i64(token.0)?)
                .fetch_one(&self.pool)
                .await
                .map_err(|e| self.failed(e))?;
        renew_answer(key, session, token, &outcome, lease, expires_at)
    }

    async fn release(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<bool, StoreError> {
        sqlx::query_scalar("SELECT lock_release($1, $2, $3)")
            .bind(key.as_str())
            .bind(session.0)
            .bind(to_i64(token.0)?)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.failed(e))
    }

    async fn proclaim(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
        value: &LeaderValue,
    ) -> Result<(), StoreError> {
        self.proclaim_value(key, session, token, value).await
    }

    async fn get(&self, key: &LockKey) -> Result<Option<LockInfo>, StoreError> {
        let row: Option<(i64, String, DateTime<Utc>, i64, Option<String>)> = sqlx::query_as(
            "SELECT l.fencing_token, s.owner_id, LEAST(l.expires_at, s.expires_at),
                    (SELECT count(*) FROM lock_waiters w JOIN lock_sessions ws ON ws.session_id = w.session_id
                      WHERE w.lock_key = l.lock_key AND w.expires_at > now() AND ws.expires_at > now()),
                    v.value
               FROM locks l JOIN lock_sessions s ON s.session_id = l.session_id
               LEFT JOIN lock_values v ON v.lock_key = l.lock_key AND v.fencing_token = l.fencing_token
              WHERE l.lock_key = $1 AND l.expires_at > now() AND s.expires_at > now()",
        )
        .bind(key.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.failed(e))?;
        if row.is_none() {
            return self.shares_info(key).await;
        }
        row.map(|(token, owner, expires_at, waiters, value)| {
            Ok(LockInfo {
                lock_key: key.clone(),
                fencing_token: FencingToken(to_u64(token)?),
                owner_id: OwnerId::parse(owner)
                    .map_err(|e| StoreError::Internal(format!("stored owner id: {e}")))?,
                expires_at,
                waiters: to_u64(waiters)?,
                holders: Vec::new(),
                permits: None,
                value: value
                    .map(LeaderValue::parse)
                    .transpose()
                    .map_err(|e| StoreError::Internal(format!("stored value: {e}")))?,
            })
        })
        .transpose()
    }

    async fn revoke(
        &self,
        key: &LockKey,
        note: &RevokeNote,
    ) -> Result<Option<FencingToken>, StoreError> {
        self.revoke_key(key, note).await
    }

    async fn events_after(
        &self,
        prefix: &str,
        after: u64,
        limit: usize,
    ) -> Result<EventPage, StoreError> {
        self.events_page(prefix, after, limit).await
    }

    async fn watch_events(&self, sink: HeadSink) -> Result<(), StoreError> {
        self.start_events(sink);
        Ok(())
    }

    async fn revocation(&self, key: &LockKey) -> Result<Option<Revocation>, StoreError> {
        let row: Option<(i64, String, Option<String>)> = sqlx::query_as(
            "SELECT fencing_token, revoked_by, reason FROM lock_revocations WHERE lock_key = $1",
        )
        .bind(key.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.failed(e))?;
        let Some((token, by, reason)) = row else {
            return Ok(None);
        };
        let reason = reason
            .map(RevokeReason::parse)
            .transpose()
            .map_err(|e| StoreError::Internal(format!("stored revoke reason of {key}: {e}")))?;
        Ok(Some(Revocation {
            token: FencingToken(to_u64(token)?),
            note: RevokeNote { by, reason },
        }))
    }

    async fn reap_expired(&self) -> Result<ReapReport, StoreError> {
        self.reap().await
    }

    async fn apply_batch(&self, ops: &[BatchOp]) -> Vec<BatchResult> {
        // A lone write calls its own function: the same decision, without the arrays.
        if let [op] = ops {
            return vec![op.apply_alone(self).await];
        }
        match self.batch_statement(ops).await {
            Ok(results) => results,
            // One statement that did not commit: its failure may be any one write's (an
            // overflowing lease, a deadlock with another replica's batch), so none is failed
            // for it. Each write goes alone, all at once (none waits behind another), and
            // fails, if at all, alone.
            Err(BatchFailed::NotSent(err)) => vec![Err(self.hosts.saw(err)); ops.len()],
            Err(BatchFailed::NotCommitted(err)) => {
                tracing::debug!(event = "batch_failed_applying_alone", writes = ops.len(), error = %err);
                futures_util::future::join_all(ops.iter().map(|op| op.apply_alone(self))).await
            }
            // It may have committed: applying it again would answer from after its own
            // effect (a release that succeeded answering `released: false`). Every write is
            // told the truth, that it is unknown; the client asks again (503), and every lock
            // write is idempotent for its session.
            Err(BatchFailed::Unknown(err)) => {
                tracing::warn!(event = "batch_outcome_unknown", writes = ops.len(), error = %err);
                let err = self.hosts.saw(err);
                let unknown = StoreError::Unavailable(format!(
                    "the store's answer was lost; the write may or may not have been applied, ask again: {err}"
                ));
                vec![Err(unknown); ops.len()]
            }
        }
    }

    async fn clock_now(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        sqlx::query_scalar("SELECT now()")
            .fetch_one(&self.pool)
            .await
            .map(Some)
            .map_err(|e| self.failed(e))
    }

    async fn ready(&self) -> Result<(), StoreError> {
        let read_only: String = sqlx::query_scalar("SHOW transaction_read_only")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.failed(e))?;
        if read_only == "on" {
            let err = StoreError::NotLeader("the database is read-only".into());
            return Err(self.hosts.saw(err));
        }
        Ok(())
    }

    async fn durability_risks(&self) -> Result<Vec<String>, StoreError> {
        self.settings_risks().await
    }
}
