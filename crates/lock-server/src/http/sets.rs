//! The key-set route (ADR 0007): `POST /v1/lock-sets/acquire` grants several keys to one
//! session together or not at all. Each grant it answers is an ordinary one, renewed,
//! released and revoked on its own key's routes.

use axum::Json;
use axum::extract::{Extension, State};
use lock_api::{AcquireSetRequest, ErrorBody, ErrorCode, SetGrant};
use service_kit::{ApiError, ApiJson, Caller};

use super::handlers::{acquire_spec, answer_grant, may_acquire, refused};
use super::store_error::api_error;
use crate::metrics as m;
use crate::set_waiting::{SetWaited, acquire_set_waiting};
use crate::state::AppState;
use crate::store::SetOutcome;
use crate::waiting::Exposure;

#[utoipa::path(post, path = "/v1/lock-sets/acquire", tag = "locks", operation_id = "L4s_acquire_set",
    request_body = AcquireSetRequest, security(("lock_client" = [])),
    responses((status = 200, description = "every key granted, each with its own token, sorted by key", body = SetGrant),
        (status = 400, description = "INVALID_ARGUMENT: lock_keys (none, more than 16, a key twice, a malformed key), session_id, ttl_ms, wait_ms, lock_delay_ms, an unknown field or the body", body = ErrorBody),
        (status = 404, description = "SESSION_UNKNOWN", body = ErrorBody),
        (status = 409, description = "LOCK_HELD: a key of the set is held, in a lock-delay, or has waiters queued first (the message names it); nothing was granted", body = ErrorBody),
        (status = 410, description = "SESSION_EXPIRED", body = ErrorBody),
        (status = 429, description = "TOO_MANY_WAITERS or RATE_LIMITED, as L4", body = ErrorBody),
        (status = 503, description = "NOT_LEADER: draining (a waiting set keeps its places for its retry elsewhere)", body = ErrorBody)))]
/// `POST /v1/lock-sets/acquire`. With `wait_ms` the request is held until the whole set is
/// granted or the wait ends; a waiting set holds no key.
pub async fn acquire_set(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<AcquireSetRequest>,
) -> Result<Json<SetGrant>, ApiError> {
    let keys = lock_api::key_set(req.lock_keys)?;
    let (spec, wait_ms) = acquire_spec(&state, req.ttl_ms, req.wait_ms, req.lock_delay_ms)?;
    let backend = state.backend().as_str();
    let _place = (wait_ms > 0)
        .then(|| state.quotas().wait(&caller))
        .transpose()?;
    may_acquire(&state, &caller, req.session_id).await?;
    let mut exposure = Exposure::of_set(state.store_arc(), keys, req.session_id);
    let (outcome, waited_ms) = if wait_ms == 0 {
        (exposure.acquire_set(spec).await.map_err(api_error)?, 0)
    } else {
        let waited = acquire_set_waiting(
            state.waiters(),
            state.draining(),
            &mut exposure,
            spec,
            wait_ms,
        )
        .await
        .map_err(api_error)?;
        waited_answer(waited, backend)?
    };
    let mut grants = match outcome {
        SetOutcome::Granted { grants, .. } => grants,
        SetOutcome::Refused { key, refusal } => {
            return Err(refused(&key, refusal, wait_ms, waited_ms, backend));
        }
    };
    for grant in &mut grants {
        answer_grant(&state, &caller, grant, waited_ms);
    }
    exposure.told();
    Ok(Json(SetGrant { grants }))
}

/// What a waiting set acquire answers, its wait counted in `lock_waits_total` (a set granted
/// by its first try never waited).
fn waited_answer(waited: SetWaited, backend: &'static str) -> Result<(SetOutcome, u64), ApiError> {
    let (label, answer) = match waited {
        SetWaited::AtOnce(outcome) => return Ok((outcome, 0)),
        SetWaited::Answer(outcome, waited_ms) => {
            let label = match outcome {
                SetOutcome::Granted { .. } => "granted",
                SetOutcome::Refused { .. } => "timed_out",
            };
            (label, Ok((outcome, waited_ms)))
        }
        SetWaited::Draining => (
            "draining",
            Err(ApiError::new(
                ErrorCode::NotLeader,
                "this replica is draining for shutdown; the set's places are kept for its retry on another replica",
            )),
        ),
        SetWaited::Refused(refused) => (
            "too_many_waiters",
            Err(ApiError::new(
                ErrorCode::TooManyWaiters,
                format!("cannot wait for the set: {refused}"),
            )),
        ),
    };
    metrics::counter!(m::WAITS_TOTAL, "backend" => backend, "outcome" => label).increment(1);
    answer
}
