//! The handler of each payment-resource route. Each write checks, in this order: the caller's
//! role credential, the path, the token and its signed proof, then the fence.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use fence_kit::{FencedWrite, ProvenFence, TrustedKeys};
use lock_api::{ErrorBody, ErrorCode, WireCode};
use payment_api::{
    AMOUNT_MAX_MINOR, BENEFICIARY_MAX_BYTES, CreatePayout, IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENCY_KEY_MAX_BYTES, LedgerSummary, OFFER_EXECUTOR_MAX_BYTES, OFFER_LIMIT_MAX,
    OFFER_MS_MAX, OFFER_MS_MIN, OFFER_SKIP_MAX, OfferRequest, PaymentCode, Payout, RecordOutcome,
    Reservation, Submission,
};
use serde::Deserialize;
use service_kit::{ApiError, ApiJson, Caller, Callers};

use crate::store::{LIST_LIMIT_MAX, PayError, PayStore};

/// Default page size of the claimable list.
const LIST_LIMIT_DEFAULT: i64 = 50;

/// What handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// paydb.
    pub store: PayStore,
    /// The credentials it accepts (each with its roles) and their request rates.
    pub callers: Arc<Callers>,
    /// The lock service's public keys: every fenced write's proof is checked against them.
    pub verifier: Arc<TrustedKeys>,
    /// The proxy's hop budget.
    pub hop_budget: Duration,
}

impl From<PayError> for ApiError {
    fn from(err: PayError) -> Self {
        let code: WireCode = match &err {
            PayError::PayoutUnknown(_) => PaymentCode::PayoutUnknown.into(),
            PayError::FencedOut { .. } => {
                tracing::warn!(event = "fenced_out", error = %err, "a stale token was refused");
                ErrorCode::FencedOut.into()
            }
            PayError::AlreadyTerminal { .. } => PaymentCode::AlreadyTerminal.into(),
            PayError::AlreadySubmitted(_) => PaymentCode::AlreadySubmitted.into(),
            PayError::SubmissionUnknown(_) => PaymentCode::SubmissionUnknown.into(),
            PayError::SubmissionInFlight(_) => PaymentCode::SubmissionInFlight.into(),
            PayError::Invalid(_) => ErrorCode::InvalidArgument.into(),
            PayError::Unavailable(_) => ErrorCode::StoreUnavailable.into(),
            PayError::Internal(_) => {
                tracing::error!(event = "store_error", error = %err);
                ErrorCode::Internal.into()
            }
        };
        Self::new(code, err.to_string())
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The callers of payment-resource, each with its own credential (SECURITY.md).
#[derive(Debug, Clone, Copy)]
pub enum Role {
    /// P0.
    Creator,
    /// List claimable, P2, P3.
    Executor,
    /// Reserve and record a submission.
    Proxy,
    /// Re-fence.
    Admin,
    /// A payout, its submission, the ledger summary.
    Reader,
}

impl Role {
    /// Its name in the credentials file, and how refusals name it.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Self::Creator => (
                "creator",
                "creating payouts (PAYMENT_CREATOR_TOKEN or a `creator` credential)",
            ),
            Self::Executor => (
                "executor",
                "executors' calls (PAYOUT_EXECUTOR_TOKEN or an `executor` credential)",
            ),
            Self::Proxy => (
                "proxy",
                "submissions (PAYMENT_PROXY_TOKEN or a `proxy` credential)",
            ),
            Self::Admin => (
                "admin",
                "re-fencing (PAYMENT_ADMIN_TOKEN or an `admin` credential)",
            ),
            Self::Reader => (
                "reader",
                "reads (PAYMENT_READER_TOKEN or a `reader` credential)",
            ),
        }
    }

    /// The caller, when it presents a credential with this role and is within its rate.
    fn check(self, state: &AppState, headers: &HeaderMap) -> ApiResult<Caller> {
        let (role, what) = self.names();
        let caller = state.callers.authorize(headers, role, what)?;
        state.callers.admit(&caller)?;
        Ok(caller)
    }
}

/// The credentials of payment-resource's environment, each with its one role.
pub fn env_credentials(config: &crate::Config) -> Vec<lock_api::CredentialEntry> {
    [
        (&config.creator_token, "payment-creator", Role::Creator),
        (&config.executor_token, "payout-executor", Role::Executor),
        (&config.proxy_token, "rail-proxy", Role::Proxy),
        (&config.admin_token, "payment-admin", Role::Admin),
        (&config.reader_token, "payment-reader", Role::Reader),
    ]
    .into_iter()
    .filter_map(|(secret, name, role)| {
        let secret = secret.as_deref().filter(|s| !s.trim().is_empty())?;
        Some(lock_api::CredentialEntry::from_secret(
            name,
            &[role.names().0],
            secret,
        ))
    })
    .collect()
}

/// A fenced write's checks, in order: the role's credential, the payout id of the path, the
/// token and the lock service's signature of it for `payout:{id}`. The payout id and the
/// proven token with its grant.
fn fenced_write(
    state: &AppState,
    headers: &HeaderMap,
    raw_id: &str,
    role: Role,
) -> ApiResult<(i64, ProvenFence)> {
    fenced_write_by(state, headers, raw_id, role).map(|(_, id, fence)| (id, fence))
}

/// [`fenced_write`], also naming the caller (for audit lines).
fn fenced_write_by(
    state: &AppState,
    headers: &HeaderMap,
    raw_id: &str,
    role: Role,
) -> ApiResult<(Caller, i64, ProvenFence)> {
    let caller = role.check(state, headers)?;
    let id = payout_id(raw_id)?;
    let key = payment_api::payout_lock_key(id);
    let fence = FencedWrite::from_headers(headers)?.verify(&state.verifier.current(), &key)?;
    Ok((caller, id, fence))
}

fn payout_id(raw: &str) -> ApiResult<i64> {
    payment_api::parse_payout_id(raw)
        .ok_or_else(|| ApiError::invalid("payout_id", "must be a positive integer"))
}

fn validate(req: &CreatePayout) -> ApiResult<()> {
    if !(1..=AMOUNT_MAX_MINOR).contains(&req.amount_minor) {
        return Err(ApiError::invalid(
            "amount_minor",
            format!("must be between 1 and {AMOUNT_MAX_MINOR}"),
        ));
    }
    if req.currency.len() != 3 || !req.currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(ApiError::invalid(
            "currency",
            "must be an ISO 4217 code like EUR",
        ));
    }
    if req.beneficiary.len() > BENEFICIARY_MAX_BYTES || req.beneficiary.trim().is_empty() {
        return Err(ApiError::invalid(
            "beneficiary",
            format!("must be 1 to {BENEFICIARY_MAX_BYTES} bytes with a visible character"),
        ));
    }
    payment_api::check_readable("beneficiary", &req.beneficiary)?;
    Ok(())
}

fn idempotency_key(headers: &HeaderMap) -> ApiResult<String> {
    let key = service_kit::single_header(headers, IDEMPOTENCY_KEY_HEADER, "Idempotency-Key")?
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .unwrap_or("");
    if key.is_empty()
        || key.len() > IDEMPOTENCY_KEY_MAX_BYTES
        || !key.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            format!(
                "header is required: 1 to {IDEMPOTENCY_KEY_MAX_BYTES} visible ASCII characters"
            ),
        ));
    }
    Ok(key.to_owned())
}

#[utoipa::path(post, path = "/v1/payouts", tag = "payouts", operation_id = "P0_create",
    params(("Idempotency-Key" = String, Header, description = "required, sent once: 1 to 128 visible ASCII characters")),
    request_body = CreatePayout, security(("payment_creator" = [])),
    responses((status = 201, description = "created, PENDING", body = Payout),
        (status = 200, description = "the key was used before with the same body: the same payout", body = Payout),
        (status = 400, description = "INVALID_ARGUMENT: body, Idempotency-Key, amount_minor, currency or beneficiary", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: not the creators' credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: PAYMENT_CREATOR_TOKEN unset", body = ErrorBody)))]
pub(super) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreatePayout>,
) -> ApiResult<(StatusCode, Json<Payout>)> {
    Role::Creator.check(&state, &headers)?;
    let key = idempotency_key(&headers)?;
    validate(&req)?;
    let (payout, created) = state.store.create(&key, &req).await?;
    if created {
        metrics::counter!("payouts_created_total").increment(1);
    }
    Ok((
        if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        Json(payout),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[serde(default)]
    claimable: Option<bool>,
    #[serde(default)]
    limit: Option<i64>,
    /// Keyset paging: only payouts with a larger id.
    #[serde(default)]
    after: Option<i64>,
}

#[utoipa::path(get, path = "/v1/payouts", tag = "payouts", operation_id = "P1_list_claimable",
    params(("claimable" = bool, Query, description = "must be true: only claimable listings are served"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "page size, default 50"),
        ("after" = Option<i64>, Query, minimum = 0, description = "keyset paging: only payouts with a larger id")),
    security(("payout_executor" = [])),
    responses((status = 200, description = "non-terminal payouts in id order", body = Vec<Payout>),
        (status = 400, description = "INVALID_ARGUMENT: claimable, limit, after or query", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: not the executors' credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: PAYOUT_EXECUTOR_TOKEN unset", body = ErrorBody)))]
pub(super) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<Payout>>> {
    Role::Executor.check(&state, &headers)?;
    let Query(query) = query.map_err(|e| ApiError::invalid("query", e.body_text()))?;
    if query.claimable != Some(true) {
        return Err(ApiError::invalid(
            "claimable",
            "only claimable=true listings are served",
        ));
    }
    let limit = query.limit.unwrap_or(LIST_LIMIT_DEFAULT);
    if !(1..=LIST_LIMIT_MAX).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {LIST_LIMIT_MAX}"),
        ));
    }
    let after = query.after.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::invalid(
            "after",
            "must be a payout id (0 or more)",
        ));
    }
    Ok(Json(state.store.list_claimable(after, limit).await?))
}

#[utoipa::path(post, path = "/v1/offers", tag = "payouts", operation_id = "offer",
    request_body = OfferRequest, security(("payout_executor" = [])),
    responses((status = 200, description = "payouts offered to this executor alone for offer_ms, in id order (empty: none free, or the credential holds its share of offers: 8 plus 2 per payout it is working on)", body = Vec<Payout>),
        (status = 400, description = "INVALID_ARGUMENT: executor, limit, offer_ms, skip or body", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: not the executors' credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: PAYOUT_EXECUTOR_TOKEN unset", body = ErrorBody)))]
pub(super) async fn offer(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<OfferRequest>,
) -> ApiResult<Json<Vec<Payout>>> {
    let caller = Role::Executor.check(&state, &headers)?;
    // The lock service's owner-id rule: the executor names itself by its session's owner.
    let name = &req.executor;
    if name.is_empty() || name.len() > OFFER_EXECUTOR_MAX_BYTES {
        return Err(ApiError::invalid(
            "executor",
            format!("must be 1 to {OFFER_EXECUTOR_MAX_BYTES} bytes"),
        ));
    }
    payment_api::check_readable("executor", name)?;
    if req.skip.len() > OFFER_SKIP_MAX {
        return Err(ApiError::invalid(
            "skip",
            format!("at most {OFFER_SKIP_MAX} payout ids"),
        ));
    }
    if !(1..=OFFER_LIMIT_MAX).contains(&req.limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {OFFER_LIMIT_MAX}"),
        ));
    }
    if !(OFFER_MS_MIN..=OFFER_MS_MAX).contains(&req.offer_ms) {
        return Err(ApiError::invalid(
            "offer_ms",
            format!("must be between {OFFER_MS_MIN} and {OFFER_MS_MAX}"),
        ));
    }
    Ok(Json(
        state
            .store
            .offer(
                &caller.name,
                &req.executor,
                req.limit,
                req.offer_ms,
                &req.skip,
            )
            .await?,
    ))
}

#[utoipa::path(get, path = "/v1/payouts/{payout_id}", tag = "payouts", operation_id = "P1_get",
    params(("payout_id" = i64, Path, minimum = 1, description = "the payout id (digits only)")), security(("payment_reader" = [])),
    responses((status = 200, description = "the payout", body = Payout),
        (status = 401, description = "UNAUTHENTICATED: not the readers' credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: PAYMENT_READER_TOKEN unset", body = ErrorBody),
        (status = 404, description = "PAYOUT_UNKNOWN", body = ErrorBody)))]
pub(super) async fn get_payout(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Payout>> {
    Role::Reader.check(&state, &headers)?;
    Ok(Json(state.store.get(payout_id(&id)?).await?))
}

#[utoipa::path(post, path = "/v1/payouts/{payout_id}/claim", tag = "payouts", operation_id = "P2_claim",
    params(("payout_id" = i64, Path, minimum = 1, description = "the payout id (digits only)"), ("X-Fencing-Token" = i64, Header, minimum = 0, description = "the lock grant's fencing token for payout:{payout_id}"), ("X-Fencing-Proof" = String, Header, description = "the lock service's proof of that token (ADR 0004)")), security(("payout_executor" = [])),
    responses((status = 200, description = "claimed: fence = the token", body = Payout),
        (status = 400, description = "INVALID_ARGUMENT: payout_id, X-Fencing-Token, Authorization or X-Fencing-Proof sent twice", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: not this role's credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN (the role's credential is not configured) or PROOF_INVALID", body = ErrorBody),
        (status = 404, description = "PAYOUT_UNKNOWN", body = ErrorBody),
        (status = 409, description = "FENCED_OUT (token below the fence) or ALREADY_TERMINAL", body = ErrorBody)))]
pub(super) async fn claim(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Payout>> {
    let (caller, id, fence) = fenced_write_by(&state, &headers, &id, Role::Executor)?;
    Ok(Json(state.store.claim(id, &fence, &caller.name).await?))
}

#[utoipa::path(post, path = "/v1/payouts/{payout_id}/submissions", tag = "submissions", operation_id = "reserve",
    params(("payout_id" = i64, Path, minimum = 1, description = "the payout id (digits only)"), ("X-Fencing-Token" = i64, Header, minimum = 0, description = "the lock grant's fencing token for payout:{payout_id}"), ("X-Fencing-Proof" = String, Header, description = "the lock service's proof of that token (ADR 0004)")), security(("payment_proxy" = [])),
    responses((status = 201, description = "reserved: payout SUBMITTED, submission IN_FLIGHT", body = Reservation),
        (status = 400, description = "INVALID_ARGUMENT: payout_id, X-Fencing-Token, Authorization or X-Fencing-Proof sent twice", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: not this role's credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN (the role's credential is not configured) or PROOF_INVALID", body = ErrorBody),
        (status = 404, description = "PAYOUT_UNKNOWN", body = ErrorBody),
        (status = 409, description = "FENCED_OUT, ALREADY_TERMINAL or ALREADY_SUBMITTED", body = ErrorBody)))]
pub(super) async fn reserve(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Reservation>)> {
    let (id, fence) = fenced_write(&state, &headers, &id, Role::Proxy)?;
    Ok((
        StatusCode::CREATED,
        Json(state.store.reserve(id, &fence).await?),
    ))
}

#[utoipa::path(get, path = "/v1/payouts/{payout_id}/submission", tag = "submissions", operation_id = "get_submission",
    params(("payout_id" = i64, Path, minimum = 1, description = "the payout id (digits only)")), security(("payment_reader" = []), ("payment_proxy" = [])),
    responses((status = 200, description = "the payout's one submission", body = Submission),
        (status = 401, description = "UNAUTHENTICATED: neither the readers' nor rail-proxy's credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: PAYMENT_READER_TOKEN unset", body = ErrorBody),
        (status = 404, description = "SUBMISSION_UNKNOWN (also when the payout does not exist)", body = ErrorBody)))]
pub(super) async fn get_submission(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Submission>> {
    // rail-proxy reads it too, with its own credential, after a refused reservation.
    let (proxy, what) = Role::Proxy.names();
    let caller = match state.callers.authorize(&headers, proxy, what) {
        Ok(caller) => caller,
        Err(_) => {
            let (reader, what) = Role::Reader.names();
            state.callers.authorize(&headers, reader, what)?
        }
    };
    state.callers.admit(&caller)?;
    Ok(Json(state.store.submission(payout_id(&id)?).await?))
}

#[utoipa::path(post, path = "/v1/payouts/{payout_id}/submission/outcome", tag = "submissions", operation_id = "record_outcome",
    params(("payout_id" = i64, Path, minimum = 1, description = "the payout id (digits only)"), ("X-Fencing-Token" = i64, Header, minimum = 0, description = "the lock grant's fencing token for payout:{payout_id}"), ("X-Fencing-Proof" = String, Header, description = "the lock service's proof of that token (ADR 0004)")), request_body = RecordOutcome, security(("payment_proxy" = [])),
    responses((status = 200, description = "the submission as recorded", body = Submission),
        (status = 400, description = "INVALID_ARGUMENT: payout_id, X-Fencing-Token, Authorization or X-Fencing-Proof sent twice", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: not this role's credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN (the role's credential is not configured) or PROOF_INVALID", body = ErrorBody),
        (status = 404, description = "PAYOUT_UNKNOWN", body = ErrorBody),
        (status = 409, description = "FENCED_OUT (not the reserving token) or ALREADY_SUBMITTED (another outcome recorded)", body = ErrorBody)))]
pub(super) async fn record_outcome(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<RecordOutcome>,
) -> ApiResult<Json<Submission>> {
    let (id, fence) = fenced_write(&state, &headers, &id, Role::Proxy)?;
    Ok(Json(
        state.store.record_outcome(id, fence.token, &req).await?,
    ))
}

#[utoipa::path(post, path = "/v1/payouts/{payout_id}/post", tag = "payouts", operation_id = "P3_post",
    params(("payout_id" = i64, Path, minimum = 1, description = "the payout id (digits only)"), ("X-Fencing-Token" = i64, Header, minimum = 0, description = "the lock grant's fencing token for payout:{payout_id}"), ("X-Fencing-Proof" = String, Header, description = "the lock service's proof of that token (ADR 0004)")), security(("payout_executor" = [])),
    responses((status = 200, description = "posted: SETTLED, REJECTED or RAIL_AMBIGUOUS (a terminal payout: unchanged)", body = Payout),
        (status = 400, description = "INVALID_ARGUMENT: payout_id, X-Fencing-Token, Authorization or X-Fencing-Proof sent twice", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: not this role's credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN (the role's credential is not configured) or PROOF_INVALID", body = ErrorBody),
        (status = 404, description = "PAYOUT_UNKNOWN", body = ErrorBody),
        (status = 409, description = "FENCED_OUT or SUBMISSION_IN_FLIGHT", body = ErrorBody)))]
pub(super) async fn post_result(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Payout>> {
    let (id, fence) = fenced_write(&state, &headers, &id, Role::Executor)?;
    let (payout, posted) = state.store.post(id, &fence, state.hop_budget).await?;
    if posted {
        metrics::counter!("payouts_posted_total", "state" => payout.state.as_str()).increment(1);
    }
    Ok(Json(payout))
}

#[utoipa::path(post, path = "/v1/payouts/{payout_id}/refence", tag = "admin", operation_id = "refence",
    params(("payout_id" = i64, Path, minimum = 1, description = "the payout id (digits only)"), ("X-Fencing-Token" = i64, Header, minimum = 0, description = "the lock grant's fencing token for payout:{payout_id}"), ("X-Fencing-Proof" = String, Header, description = "the lock service's proof of that token (ADR 0004)")), security(("payment_admin" = [])),
    responses((status = 200, description = "fence = the token (above the old fence) and its grant; state unchanged", body = Payout),
        (status = 400, description = "INVALID_ARGUMENT: payout_id, X-Fencing-Token, Authorization or X-Fencing-Proof sent twice", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: not this role's credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN (the role's credential is not configured) or PROOF_INVALID", body = ErrorBody),
        (status = 404, description = "PAYOUT_UNKNOWN", body = ErrorBody),
        (status = 409, description = "FENCED_OUT (the token is not above the fence: a re-fence only raises) or ALREADY_TERMINAL", body = ErrorBody)))]
/// Operator repair: the operator acquires `payout:{id}` from the lock service and presents
/// that grant's token and proof; the fence moves to that grant. Only upwards: a lower or
/// equal token is refused `FENCED_OUT`, so an old genuine proof can never re-arm a paused
/// holder it once fenced out. Audited: a WARN line and `payouts_refenced_total`.
pub(super) async fn refence(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Payout>> {
    let (caller, id, fence) = fenced_write_by(&state, &headers, &id, Role::Admin)?;
    let (payout, old_fence) = state.store.refence(id, &fence).await?;
    metrics::counter!("payouts_refenced_total").increment(1);
    tracing::warn!(
        event = "payout_refenced",
        credential = %caller.name,
        payout_id = id,
        old_fence,
        new_fence = payout.fence,
        state = payout.state.as_str(),
        "an operator raised a payout's fence to a grant the lock service made"
    );
    Ok(Json(payout))
}

#[utoipa::path(get, path = "/v1/ledger/summary", tag = "ledger", operation_id = "ledger_summary", security(("payment_reader" = [])),
    responses((status = 200, description = "the balance check of I6", body = LedgerSummary),
        (status = 401, description = "UNAUTHENTICATED: not the readers' credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: PAYMENT_READER_TOKEN unset", body = ErrorBody)))]
pub(super) async fn ledger_summary(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> ApiResult<Json<LedgerSummary>> {
    Role::Reader.check(&state, &headers)?;
    Ok(Json(state.store.ledger_summary().await?))
}

#[utoipa::path(get, path = "/health/ready", tag = "health", operation_id = "ready",
    responses((status = 200, description = "paydb answers"),
        (status = 503, description = "STORE_UNAVAILABLE", body = ErrorBody)))]
pub(super) async fn ready(State(state): State<AppState>) -> ApiResult<StatusCode> {
    state.store.ready().await?;
    Ok(StatusCode::OK)
}
