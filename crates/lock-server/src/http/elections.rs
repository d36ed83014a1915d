//! L9, an election's proclaim (C2 §2.4c): a leader changes what it announces and keeps its
//! term. A campaign is L4 with a `value`; the leader is L7.

use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use lock_api::{ErrorBody, LockKey, ProclaimRequest};
use service_kit::{ApiError, ApiJson, Caller};

use super::handlers::{as_unknown, key_from_path, standing};
use super::store_error::api_error;
use crate::sessions::Standing;
use crate::state::AppState;

#[utoipa::path(post, path = "/v1/locks/{lock_key}/proclaim", tag = "locks", operation_id = "L9_proclaim",
    params(("lock_key" = LockKey, Path, description = "the lock key: an election's name")), request_body = ProclaimRequest, security(("lock_client" = [])),
    responses((status = 204, description = "the live grant announces the value from now on; its token is unchanged"),
        (status = 400, description = "INVALID_ARGUMENT: lock_key, session_id, fencing_token, value, an unknown field or the body", body = ErrorBody),
        (status = 404, description = "SESSION_UNKNOWN", body = ErrorBody),
        (status = 409, description = "LOCK_LOST: no live exclusive grant with this key, session and token", body = ErrorBody),
        (status = 410, description = "SESSION_EXPIRED", body = ErrorBody)))]
/// L9 `POST /v1/locks/{lock_key}/proclaim`: the live exclusive grant (key, session, token)
/// announces `value` in place of what it announced.
pub async fn proclaim(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(lock_key): Path<String>,
    ApiJson(req): ApiJson<ProclaimRequest>,
) -> Result<StatusCode, ApiError> {
    let key = key_from_path(lock_key)?;
    let token = req.fencing_token.validate()?;
    if standing(&state, &caller, req.session_id, "proclaim").await? == Standing::Foreign {
        return Err(as_unknown(req.session_id));
    }
    (state.store())
        .proclaim(&key, req.session_id, token, &req.value)
        .await
        .map_err(api_error)?;
    tracing::info!(event = "lock_proclaimed", credential = %caller.name, key = %key, token = token.0, session = %req.session_id.tag());
    Ok(StatusCode::NO_CONTENT)
}
