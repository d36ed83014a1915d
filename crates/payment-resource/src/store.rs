//! paydb access. Every fenced write locks the payout row and applies [`FenceRule`] through
//! [`fenced`] in the transaction that writes: the one place a fence is checked.

use std::time::Duration;

use fence_kit::{FenceRefusal, GrantFence, ProvenFence, check_fence};
use lock_api::FencingToken;
use payment_api::{
    CreatePayout, LedgerSummary, Payout, PayoutState, RecordOutcome, Reservation, Submission,
    SubmissionOutcome,
};
use sqlx::postgres::{PgPoolOptions, PgRow};
use sqlx::{PgConnection, PgPool, Row};

/// How long a request waits for a pooled connection.
const POOL_ACQUIRE_TIMEOUT_MS: u64 = 2_000;
/// Most payouts one list call returns.
pub const LIST_LIMIT_MAX: i64 = 500;
/// SQLSTATE classes meaning the store, not the request, failed.
const TRANSIENT_SQLSTATE_PREFIXES: &[&str] = &["08", "57P", "40", "25006"];

/// What went wrong, for the caller or the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayError {
    /// No such payout.
    #[error("payout {0} does not exist")]
    PayoutUnknown(i64),
    /// The token is not the one the fence allows.
    #[error("payout {payout_id}: token {token} refused by fence {fence}")]
    FencedOut {
        /// The payout.
        payout_id: i64,
        /// The token presented.
        token: u64,
        /// The payout's fence.
        fence: i64,
    },
    /// The payout is terminal.
    #[error("payout {payout_id} is already {state:?}")]
    AlreadyTerminal {
        /// The payout.
        payout_id: i64,
        /// Its terminal state.
        state: PayoutState,
    },
    /// A submission is on record.
    #[error("payout {0} already has its rail submission on record")]
    AlreadySubmitted(i64),
    /// No submission on record.
    #[error("payout {0} has no rail submission on record")]
    SubmissionUnknown(i64),
    /// The submission's outcome is not known yet.
    #[error("payout {0}: the rail submission is still in flight")]
    SubmissionInFlight(i64),
    /// Bad input (names the field).
    #[error("{0}")]
    Invalid(String),
    /// The store failed transiently.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A bug.
    #[error("store error: {0}")]
    Internal(String),
}

impl From<sqlx::Error> for PayError {
    fn from(err: sqlx::Error) -> Self {
        if let Some(db) = err.as_database_error() {
            let code = db.code().unwrap_or_default();
            if TRANSIENT_SQLSTATE_PREFIXES
                .iter()
                .any(|p| code.starts_with(p))
            {
                return Self::Unavailable(db.to_string());
            }
            return Self::Internal(db.to_string());
        }
        match err {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Protocol(_) => Self::Unavailable(err.to_string()),
            other => Self::Internal(other.to_string()),
        }
    }
}

pub use fence_kit::FenceRule;

const PAYOUT_COLUMNS: &str = "payout_id, amount_minor, currency, beneficiary, state, fence";

fn payout(row: &PgRow) -> Result<Payout, PayError> {
    let state: String = row.try_get("state")?;
    Ok(Payout {
        payout_id: row.try_get("payout_id")?,
        amount_minor: row.try_get("amount_minor")?,
        currency: row.try_get("currency")?,
        beneficiary: row.try_get("beneficiary")?,
        state: PayoutState::parse(&state)
            .ok_or_else(|| PayError::Internal(format!("stored state {state}")))?,
        fence: row.try_get("fence")?,
    })
}

fn submission(row: &PgRow) -> Result<Submission, PayError> {
    let outcome: String = row.try_get("outcome")?;
    Ok(Submission {
        payout_id: row.try_get("payout_id")?,
        presented_token: row.try_get("presented_token")?,
        outcome: SubmissionOutcome::parse(&outcome)
            .ok_or_else(|| PayError::Internal(format!("stored outcome {outcome}")))?,
        rail_reference: row.try_get("rail_reference")?,
    })
}

/// Locks `payout_id`'s row and applies `rule` to the presented grant. Stale tokens (and a
/// token issued twice, from the grant that did not claim) are refused before terminality is
/// reported, so a zombie always learns it was fenced.
pub async fn fenced(
    tx: &mut PgConnection,
    payout_id: i64,
    presented: &ProvenFence,
    rule: FenceRule,
) -> Result<Payout, PayError> {
    let (current, fence_grant) = locked(tx, payout_id).await?;
    let grant = presented.grant.as_text();
    let presented_fence = GrantFence {
        token: presented.token.as_i64(),
        grant: &grant,
    };
    let fence = GrantFence {
        token: current.fence,
        grant: &fence_grant,
    };
    match check_fence(rule, presented_fence, fence, current.state) {
        Ok(()) => Ok(current),
        Err(FenceRefusal::FencedOut { fence }) => Err(PayError::FencedOut {
            payout_id,
            token: presented.token.0,
            fence,
        }),
        Err(FenceRefusal::Terminal(state)) => Err(PayError::AlreadyTerminal { payout_id, state }),
    }
}

/// The payout row and the grant that set its fence, locked (`FOR UPDATE`) until `tx` ends.
async fn locked(tx: &mut PgConnection, payout_id: i64) -> Result<(Payout, String), PayError> {
    let row = sqlx::query(&format!(
        "SELECT {PAYOUT_COLUMNS}, fence_grant FROM payouts WHERE payout_id = $1 FOR UPDATE"
    ))
    .bind(payout_id)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(PayError::PayoutUnknown(payout_id))?;
    Ok((payout(&row)?, row.try_get("fence_grant")?))
}

/// Live offers a credential may hold beyond its work: enough for a fresh executor to start
/// (its first scans), too few to keep new payouts from the others.
pub const OFFERS_HELD_BASE: i64 = 8;
/// Live offers a credential may hold per non-terminal payout it claimed: an executor asks
/// two offers per free attempt slot.
pub const OFFERS_PER_PAYOUT_IN_HAND: i64 = 2;

/// paydb.
#[derive(Debug, Clone)]
pub struct PayStore {
    pool: PgPool,
}

impl PayStore {
    /// Connects and runs the embedded migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, PayError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_millis(POOL_ACQUIRE_TIMEOUT_MS))
            .connect(url)
            .await?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| PayError::Internal(format!("migrations failed: {e}")))?;
        Ok(Self { pool })
    }

    /// Creates a payout, or returns the one created earlier with the same idempotency key
    /// (`false`) when the body matches; a different body under the same key is refused.
    pub async fn create(
        &self,
        idempotency_key: &str,
        req: &CreatePayout,
    ) -> Result<(Payout, bool), PayError> {
        let inserted = sqlx::query(&format!(
            "INSERT INTO payouts (idempotency_key, amount_minor, currency, beneficiary)
             VALUES ($1, $2, $3, $4) ON CONFLICT (idempotency_key) DO NOTHING
             RETURNING {PAYOUT_COLUMNS}"
        ))
        .bind(idempotency_key)
        .bind(req.amount_minor)
        .bind(&req.currency)
        .bind(&req.beneficiary)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(row) = inserted {
            return Ok((payout(&row)?, true));
        }
        let row = sqlx::query(&format!(
            "SELECT {PAYOUT_COLUMNS} FROM payouts WHERE idempotency_key = $1"
        ))
        .bind(idempotency_key)
        .fetch_one(&self.pool)
        .await?;
        let existing = payout(&row)?;
        if (
            existing.amount_minor,
            existing.currency.as_str(),
            existing.beneficiary.as_str(),
        ) != (
            req.amount_minor,
            req.currency.as_str(),
            req.beneficiary.as_str(),
        ) {
            return Err(PayError::Invalid(format!(
                "Idempotency-Key: already used for payout {} with a different body",
                existing.payout_id
            )));
        }
        Ok((existing, false))
    }

    /// One payout.
    pub async fn get(&self, payout_id: i64) -> Result<Payout, PayError> {
        let row = sqlx::query(&format!(
            "SELECT {PAYOUT_COLUMNS} FROM payouts WHERE payout_id = $1"
        ))
        .bind(payout_id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(PayError::PayoutUnknown(payout_id))?;
        payout(&row)
    }

    /// Non-terminal payouts in id order, at most `limit`.
    pub async fn list_claimable(&self, after: i64, limit: i64) -> Result<Vec<Payout>, PayError> {
        let rows = sqlx::query(&format!(
            "SELECT {PAYOUT_COLUMNS} FROM payouts
              WHERE state IN ('PENDING', 'CLAIMED', 'SUBMITTED') AND payout_id > $2
              ORDER BY payout_id LIMIT $1"
        ))
        .bind(limit)
        .bind(after)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(payout).collect()
    }

    /// Offers `executor` up to `limit` non-terminal payouts that no executor (itself
    /// included) holds a live offer for, and that are not in `skip`, oldest first, each its
    /// alone for `offer_ms`. Rows another credential's offer call is taking at the same moment
    /// are skipped, not waited for: two executors asking at once get disjoint payouts.
    ///
    /// In proportion to work: the calling credential `by` holds at most
    /// [`OFFERS_HELD_BASE`] live offers plus [`OFFERS_PER_PAYOUT_IN_HAND`] per non-terminal
    /// payout it claimed; past that the answer is empty. One credential's calls are taken one
    /// at a time (a transaction-scoped advisory lock), so asking in parallel gets no more.
    pub async fn offer(
        &self,
        by: &str,
        executor: &str,
        limit: i64,
        offer_ms: i64,
        skip: &[i64],
    ) -> Result<Vec<Payout>, PayError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('payment-offers:' || $1))")
            .bind(by)
            .execute(&mut *tx)
            .await?;
        let (held, in_hand): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM payouts WHERE offered_by = $1 AND offered_until > now()),
                    (SELECT count(*) FROM payouts WHERE claimed_by = $1
                        AND state IN ('PENDING', 'CLAIMED', 'SUBMITTED'))",
        )
        .bind(by)
        .fetch_one(&mut *tx)
        .await?;
        let room = OFFERS_HELD_BASE + OFFERS_PER_PAYOUT_IN_HAND * in_hand - held;
        let limit = limit.min(room);
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(&format!(
            "WITH free AS (
                 SELECT payout_id FROM payouts
                  WHERE state IN ('PENDING', 'CLAIMED', 'SUBMITTED')
                    AND (offered_until IS NULL OR offered_until <= now())
                    AND payout_id <> ALL($4)
                  ORDER BY payout_id LIMIT $2
                    FOR UPDATE SKIP LOCKED)
             UPDATE payouts p
                SET offered_to = $1, offered_by = $5,
                    offered_until = now() + $3 * interval '1 millisecond'
               FROM free WHERE p.payout_id = free.payout_id
             RETURNING {}",
            PAYOUT_COLUMNS
                .split(", ")
                .map(|c| format!("p.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .bind(executor)
        .bind(limit)
        .bind(offer_ms)
        .bind(skip)
        .bind(by)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut payouts = rows.iter().map(payout).collect::<Result<Vec<_>, _>>()?;
        payouts.sort_by_key(|p| p.payout_id);
        Ok(payouts)
    }

    /// Claims with `fence`'s grant, raising the fence to it.
    pub async fn claim(
        &self,
        payout_id: i64,
        fence: &ProvenFence,
        by: &str,
    ) -> Result<Payout, PayError> {
        let mut tx = self.pool.begin().await?;
        fenced(&mut tx, payout_id, fence, FenceRule::Claim).await?;
        let row = sqlx::query(&format!(
            "UPDATE payouts SET fence = $2, fence_grant = $3, claimed_by = $4, updated_at = now(),
                    state = CASE WHEN state = 'PENDING' THEN 'CLAIMED' ELSE state END
              WHERE payout_id = $1 RETURNING {PAYOUT_COLUMNS}"
        ))
        .bind(payout_id)
        .bind(fence.token.as_i64())
        .bind(fence.grant.as_text())
        .bind(by)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        payout(&row)
    }

    /// Reserves the payout's one rail submission for the current fence holder.
    pub async fn reserve(
        &self,
        payout_id: i64,
        fence: &ProvenFence,
    ) -> Result<Reservation, PayError> {
        let token = fence.token;
        let mut tx = self.pool.begin().await?;
        fenced(&mut tx, payout_id, fence, FenceRule::Holder).await?;
        let inserted = sqlx::query(
            "INSERT INTO rail_submission (payout_id, presented_token, outcome) VALUES ($1, $2, 'IN_FLIGHT')
             ON CONFLICT (payout_id) DO NOTHING
             RETURNING payout_id, presented_token, outcome, rail_reference",
        )
        .bind(payout_id)
        .bind(token.as_i64())
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(PayError::AlreadySubmitted(payout_id))?;
        let row = sqlx::query(&format!(
            "UPDATE payouts SET state = 'SUBMITTED', updated_at = now() WHERE payout_id = $1 RETURNING {PAYOUT_COLUMNS}"
        ))
        .bind(payout_id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Reservation {
            payout: payout(&row)?,
            submission: submission(&inserted)?,
        })
    }

    /// The payout's submission, if any.
    pub async fn submission(&self, payout_id: i64) -> Result<Submission, PayError> {
        let row = sqlx::query("SELECT payout_id, presented_token, outcome, rail_reference FROM rail_submission WHERE payout_id = $1")
            .bind(payout_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(PayError::SubmissionUnknown(payout_id))?;
        submission(&row)
    }

    /// Records what the rail said for the submission `token` reserved. A fact, not a fenced
    /// write: it is recorded even if the fence moved meanwhile. `TIMEOUT` ends the payout
    /// `RAIL_AMBIGUOUS` in the same transaction. Recording the same outcome twice is a no-op.
    pub async fn record_outcome(
        &self,
        payout_id: i64,
        token: FencingToken,
        req: &RecordOutcome,
    ) -> Result<Submission, PayError> {
        if req.outcome == SubmissionOutcome::InFlight {
            return Err(PayError::Invalid(
                "outcome: must be ACKED, REJECTED or TIMEOUT".into(),
            ));
        }
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT 1 FROM payouts WHERE payout_id = $1 FOR UPDATE")
            .bind(payout_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(PayError::PayoutUnknown(payout_id))?;
        let current = sqlx::query("SELECT payout_id, presented_token, outcome, rail_reference FROM rail_submission WHERE payout_id = $1")
            .bind(payout_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(PayError::SubmissionUnknown(payout_id))?;
        let current = submission(&current)?;
        if current.presented_token != token.as_i64() {
            return Err(PayError::FencedOut {
                payout_id,
                token: token.0,
                fence: current.presented_token,
            });
        }
        if current.outcome != SubmissionOutcome::InFlight {
            return if current.outcome == req.outcome {
                Ok(current)
            } else {
                Err(PayError::AlreadySubmitted(payout_id))
            };
        }
        let row = sqlx::query(
            "UPDATE rail_submission SET outcome = $2, rail_reference = $3, updated_at = now() WHERE payout_id = $1
             RETURNING payout_id, presented_token, outcome, rail_reference",
        )
        .bind(payout_id)
        .bind(req.outcome.as_str())
        .bind(&req.rail_reference)
        .fetch_one(&mut *tx)
        .await?;
        if req.outcome == SubmissionOutcome::Timeout {
            mark_ambiguous(&mut tx, payout_id).await?;
        }
        tx.commit().await?;
        submission(&row)
    }

    /// Posts the recorded outcome for the current fence holder: `ACKED` → `SETTLED` with
    /// its ledger posting, `REJECTED` → `REJECTED`, `TIMEOUT` (or `IN_FLIGHT` older than the
    /// hop budget) → `RAIL_AMBIGUOUS`. Posting an outcome already posted returns the payout
    /// unchanged. The flag says whether this call posted it.
    pub async fn post(
        &self,
        payout_id: i64,
        fence: &ProvenFence,
        hop_budget: Duration,
    ) -> Result<(Payout, bool), PayError> {
        let mut tx = self.pool.begin().await?;
        let current = match fenced(&mut tx, payout_id, fence, FenceRule::Holder).await {
            Err(PayError::AlreadyTerminal { .. }) => {
                // Give the row lock and the pooled connection back before reading with
                // another: holding one while waiting for a second starves the pool when many
                // posts of one payout arrive at once.
                tx.rollback().await?;
                return self.get(payout_id).await.map(|p| (p, false));
            }
            other => other?,
        };
        let row = sqlx::query(
            "SELECT outcome, now() - created_at > $2 * interval '1 millisecond' AS overdue
               FROM rail_submission WHERE payout_id = $1 FOR UPDATE",
        )
        .bind(payout_id)
        .bind(i64::try_from(hop_budget.as_millis()).unwrap_or(i64::MAX))
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(PayError::SubmissionUnknown(payout_id))?;
        let outcome: String = row.try_get("outcome")?;
        let overdue: bool = row.try_get("overdue")?;
        match SubmissionOutcome::parse(&outcome) {
            Some(SubmissionOutcome::Acked) => {
                set_state(&mut tx, payout_id, PayoutState::Settled).await?;
                sqlx::query(
                    "INSERT INTO ledger_entries (payout_id, account, amount_minor, currency)
                     VALUES ($1, 'payouts_payable', -$2, $3), ($1, 'rail_settlement', $2, $3)",
                )
                .bind(payout_id)
                .bind(current.amount_minor)
                .bind(&current.currency)
                .execute(&mut *tx)
                .await?;
            }
            Some(SubmissionOutcome::Rejected) => {
                set_state(&mut tx, payout_id, PayoutState::Rejected).await?
            }
            Some(SubmissionOutcome::Timeout) => mark_ambiguous(&mut tx, payout_id).await?,
            Some(SubmissionOutcome::InFlight) if overdue => {
                sqlx::query("UPDATE rail_submission SET outcome = 'TIMEOUT', updated_at = now() WHERE payout_id = $1")
                    .bind(payout_id)
                    .execute(&mut *tx)
                    .await?;
                mark_ambiguous(&mut tx, payout_id).await?;
            }
            Some(SubmissionOutcome::InFlight) => {
                return Err(PayError::SubmissionInFlight(payout_id));
            }
            None => return Err(PayError::Internal(format!("stored outcome {outcome}"))),
        }
        tx.commit().await?;
        self.get(payout_id).await.map(|p| (p, true))
    }

    /// How many non-terminal payouts were not updated for `stuck_after`, and the age in
    /// seconds of the oldest non-terminal payout (0 when none).
    pub async fn open_payout_ages(&self, stuck_after: Duration) -> Result<(i64, f64), PayError> {
        let (stuck, oldest): (i64, f64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE updated_at < now() - $1 * interval '1 millisecond'),
                    COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8
               FROM payouts WHERE state IN ('PENDING', 'CLAIMED', 'SUBMITTED')",
        )
        .bind(i64::try_from(stuck_after.as_millis()).unwrap_or(i64::MAX))
        .fetch_one(&self.pool)
        .await?;
        Ok((stuck, oldest))
    }

    /// Operator repair: raises the fence of non-terminal `payout_id` to `fence`'s grant (one
    /// the lock service just made, proven by the caller). Only upwards: a token at or below
    /// the fence is `FENCED_OUT`, so an old genuine proof can never lower a fence and re-arm
    /// a holder it fenced out. Returns the old fence.
    pub async fn refence(
        &self,
        payout_id: i64,
        fence: &ProvenFence,
    ) -> Result<(Payout, i64), PayError> {
        let mut tx = self.pool.begin().await?;
        let (current, _) = locked(&mut tx, payout_id).await?;
        if fence.token.as_i64() <= current.fence {
            return Err(PayError::FencedOut {
                payout_id,
                token: fence.token.0,
                fence: current.fence,
            });
        }
        if current.state.is_terminal() {
            return Err(PayError::AlreadyTerminal {
                payout_id,
                state: current.state,
            });
        }
        let row = sqlx::query(&format!(
            "UPDATE payouts SET fence = $2, fence_grant = $3, updated_at = now()
              WHERE payout_id = $1 RETURNING {PAYOUT_COLUMNS}"
        ))
        .bind(payout_id)
        .bind(fence.token.as_i64())
        .bind(fence.grant.as_text())
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((payout(&row)?, current.fence))
    }

    /// The ledger check: every currency balances and each settled payout has exactly one
    /// posting.
    pub async fn ledger_summary(&self) -> Result<LedgerSummary, PayError> {
        let balances: Vec<(String, i64)> = sqlx::query_as(
            "SELECT currency, sum(amount_minor)::bigint FROM ledger_entries GROUP BY currency ORDER BY currency",
        )
        .fetch_all(&self.pool)
        .await?;
        let (settled, postings, extra): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM payouts WHERE state = 'SETTLED'),
                    (SELECT count(*) FROM (SELECT payout_id FROM ledger_entries GROUP BY payout_id HAVING count(*) = 2) p),
                    (SELECT count(*) FROM (SELECT payout_id FROM ledger_entries GROUP BY payout_id HAVING count(*) > 2) x)",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(LedgerSummary {
            balance_by_currency: balances,
            settled_payouts: settled,
            postings,
            payouts_with_extra_postings: extra,
        })
    }

    /// Whether the store answers and takes writes.
    pub async fn ready(&self) -> Result<(), PayError> {
        let read_only: String = sqlx::query_scalar("SHOW transaction_read_only")
            .fetch_one(&self.pool)
            .await?;
        if read_only == "on" {
            return Err(PayError::Unavailable("paydb is read-only".into()));
        }
        Ok(())
    }
}

async fn set_state(
    tx: &mut PgConnection,
    payout_id: i64,
    state: PayoutState,
) -> Result<(), PayError> {
    sqlx::query("UPDATE payouts SET state = $2, updated_at = now() WHERE payout_id = $1")
        .bind(payout_id)
        .bind(state.as_str())
        .execute(&mut *tx)
        .await?;
    Ok(())
}

async fn mark_ambiguous(tx: &mut PgConnection, payout_id: i64) -> Result<(), PayError> {
    tracing::warn!(
        event = "rail_ambiguous",
        payout_id,
        "rail outcome unknown: payout ends RAIL_AMBIGUOUS, never resubmitted"
    );
    set_state(tx, payout_id, PayoutState::RailAmbiguous).await
}
