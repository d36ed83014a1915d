//! Handlers of the lock surface (sessions and locks) and the health and metrics endpoints.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use lock_api::{
    AcquireRequest, Claim, CreateSessionRequest, CreateSessionResponse, ErrorBody, ErrorCode,
    FencingToken, GrantId, GrantScope, HeartbeatResponse, LockGrant, LockInfo, LockKey,
    LockOutcome, ReleaseRequest, ReleaseResponse, RenewRequest, RevokeReason, RevokeRequest,
    SessionId, ValidationError, validate_requested_duration, validate_requested_ttl,
};

use super::store_error::api_error;
use crate::metrics as m;
use crate::quota::OpenRefused;
use crate::sessions::Standing;
use crate::state::AppState;
use crate::store::{AcquireOutcome, AcquireSpec, Refusal, RevokeNote, SessionOwner, StoreError};
use crate::waiting::{self, Exposure, Waited};
use service_kit::{ApiError, ApiJson, Caller};

type ApiResult<T> = Result<T, ApiError>;

pub(super) fn key_from_path(raw: String) -> ApiResult<LockKey> {
    Ok(LockKey::parse(raw)?)
}

fn session_from_path(raw: &str) -> ApiResult<SessionId> {
    Ok(SessionId::parse(raw)?)
}

/// What `caller` is to `session`: only the credential that opened a session may act on it
/// (`SessionBinding`).
pub(super) async fn standing(
    state: &AppState,
    caller: &Caller,
    session: SessionId,
    route: &'static str,
) -> ApiResult<Standing> {
    state
        .sessions()
        .standing(state.store(), caller, session, route)
        .await
        .map_err(api_error)
}

/// The answer to a caller presenting another credential's session: the one an unknown
/// session gets, word for word, so it learns nothing of the session.
pub(super) fn as_unknown(session: SessionId) -> ApiError {
    api_error(StoreError::SessionUnknown(session))
}

// The audit trail: every grant, renewal, release, session creation, extension and close is
// one `info` line with the store's own expiry (`expires_at`, RFC 3339), logged before the
// answer leaves. From it the harness checks that tokens are unique and rise per key, and that
// a client's deadline never lies after the server's expiry.

#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", operation_id = "L1_create_session",
    request_body = CreateSessionRequest, security(("lock_client" = [])),
    responses((status = 201, description = "the session, with the TTL granted", body = CreateSessionResponse),
        (status = 400, description = "INVALID_ARGUMENT: owner_id, ttl_ms, an unknown field or a malformed body", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: this credential may not open sessions as this owner_id, or no client credential is configured", body = ErrorBody),
        (status = 429, description = "TOO_MANY_SESSIONS: this credential holds its quota of live sessions, counted in the store across replicas (limits.sessions); RATE_LIMITED: over its requests a second; both with Retry-After", body = ErrorBody)))]
/// L1 `POST /v1/sessions`.
pub async fn create_session(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<CreateSessionRequest>,
) -> ApiResult<(StatusCode, Json<CreateSessionResponse>)> {
    let requested = match req.ttl_ms {
        Some(ttl) => validate_requested_ttl("ttl_ms", ttl)?,
        None => state.ttl().session_default_ms,
    };
    if !caller.owners.allows(req.owner_id.as_str()) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "credential {} may not open sessions as owner {}",
                caller.name, req.owner_id
            ),
        ));
    }
    let _place = state
        .quotas()
        .open_session(state.store(), &caller)
        .await
        .map_err(|refused| match refused {
            OpenRefused::Quota(err) => err,
            OpenRefused::Store(err) => api_error(err),
        })?;
    let opener = SessionOwner {
        owner: req.owner_id.clone(),
        credential: caller.name.clone(),
    };
    let record = state
        .store()
        .open_session(&opener, state.ttl().clamp(requested))
        .await
        .map_err(api_error)?;
    state.sessions().opened(record.session_id, opener);
    metrics::counter!(m::SESSIONS_CREATED_TOTAL, "backend" => state.backend().as_str())
        .increment(1);
    tracing::info!(event = "session_created", credential = %caller.name, session = %record.session_id.tag(), owner = %req.owner_id, ttl_ms = record.ttl_ms, expires_at = %record.expires_at.to_rfc3339());
    Ok((
        StatusCode::CREATED,
        Json(CreateSessionResponse {
            session_id: record.session_id,
            ttl_ms: record.ttl_ms,
            expires_at: record.expires_at,
            backend: state.backend(),
        }),
    ))
}

#[utoipa::path(post, path = "/v1/sessions/{session_id}/heartbeat", tag = "sessions", operation_id = "L2_heartbeat",
    params(("session_id" = SessionId, Path, description = "the session id L1 answered (a UUID)")), security(("lock_client" = [])),
    responses((status = 200, description = "extended by its TTL", body = HeartbeatResponse),
        (status = 400, description = "INVALID_ARGUMENT: session_id is not a UUID", body = ErrorBody),
        (status = 404, description = "SESSION_UNKNOWN: never existed, deleted, or expired and reaped", body = ErrorBody),
        (status = 410, description = "SESSION_EXPIRED: expired, not yet reaped", body = ErrorBody)))]
/// L2 `POST /v1/sessions/{session_id}/heartbeat`.
pub async fn heartbeat(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(session_id): Path<String>,
) -> ApiResult<Json<HeartbeatResponse>> {
    let session = session_from_path(&session_id)?;
    if standing(&state, &caller, session, "heartbeat").await? == Standing::Foreign {
        return Err(as_unknown(session));
    }
    let record = state.store().heartbeat(session).await.map_err(api_error)?;
    tracing::info!(event = "session_extended", credential = %caller.name, session = %session.tag(), expires_at = %record.expires_at.to_rfc3339());
    Ok(Json(HeartbeatResponse {
        ttl_ms: record.ttl_ms,
        expires_at: record.expires_at,
    }))
}

#[utoipa::path(delete, path = "/v1/sessions/{session_id}", tag = "sessions", operation_id = "L3_delete_session",
    params(("session_id" = SessionId, Path, description = "the session id L1 answered (a UUID)")), security(("lock_client" = [])),
    responses((status = 204, description = "deleted with its grants, or never existed"),
        (status = 400, description = "INVALID_ARGUMENT: session_id is not a UUID", body = ErrorBody)))]
/// L3 `DELETE /v1/sessions/{session_id}`: 204 whether or not it existed.
pub async fn delete_session(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(session_id): Path<String>,
) -> ApiResult<StatusCode> {
    let session = session_from_path(&session_id)?;
    if standing(&state, &caller, session, "close").await? == Standing::Foreign {
        // 204 as for a session that never existed; nothing is deleted.
        return Ok(StatusCode::NO_CONTENT);
    }
    let invoked_at = chrono::Utc::now();
    state
        .store()
        .delete_session(session)
        .await
        .map_err(api_error)?;
    state.sessions().closed(session);
    tracing::info!(event = "session_closed", credential = %caller.name, session = %session.tag(), invoked_at = %invoked_at.to_rfc3339());
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/locks/{lock_key}/acquire", tag = "locks", operation_id = "L4_acquire",
    params(("lock_key" = LockKey, Path, description = "the lock key")), request_body = AcquireRequest, security(("lock_client" = [])),
    responses((status = 200, description = "granted: a new token, or the same token to the same session", body = LockGrant),
        (status = 400, description = "INVALID_ARGUMENT: lock_key, session_id, ttl_ms, permits (1 to 256, not with mode), value (4096 bytes, no NUL; only for an exclusive claim), an unknown field or the body", body = ErrorBody),
        (status = 404, description = "SESSION_UNKNOWN", body = ErrorBody),
        (status = 409, description = "LOCK_HELD: another live session holds it, the key is in a lock-delay, or waiters queued first (after wait_ms, if given); LOCK_KIND_CONFLICT: the key's live grants are of another kind (permits of another count, permits beside a lock or readers) or this session holds it in the other mode", body = ErrorBody),
        (status = 410, description = "SESSION_EXPIRED", body = ErrorBody),
        (status = 429, description = "TOO_MANY_WAITERS: wait_ms given but this replica already holds lock.max.waiters(-per-key) waiters, or this credential's limits.waiters; RATE_LIMITED: over its requests a second", body = ErrorBody),
        (status = 503, description = "NOT_LEADER: draining (a waiter keeps its queue place for its retry elsewhere)", body = ErrorBody)))]
/// L4 `POST /v1/locks/{lock_key}/acquire`. With `wait_ms` the request is held, in FIFO
/// order with the key's other waiters on every replica, until granted or the wait ends.
pub async fn acquire(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(lock_key): Path<String>,
    ApiJson(req): ApiJson<AcquireRequest>,
) -> ApiResult<Json<LockGrant>> {
    let key = key_from_path(lock_key)?;
    let (spec, wait_ms) = acquire_spec(&state, req.ttl_ms, req.wait_ms, req.lock_delay_ms)?;
    let claim = req.claim()?;
    if req.value.is_some() && claim != Claim::Exclusive {
        Err(ValidationError::new(
            "value",
            "only an exclusive claim announces a value",
        ))?;
    }
    let spec = spec.claiming(claim);
    let backend = state.backend().as_str();
    let _place = (wait_ms > 0)
        .then(|| state.quotas().wait(&caller))
        .transpose()?;
    may_acquire(&state, &caller, req.session_id).await?;
    let mut exposure = Exposure::new(state.store_arc(), &key, req.session_id);
    let (outcome, waited_ms) = if wait_ms == 0 {
        (exposure.acquire(spec).await.map_err(api_error)?, 0)
    } else {
        let waited = waiting::acquire_waiting(
            state.waiters(),
            state.draining(),
            &mut exposure,
            spec,
            wait_ms,
        )
        .await
        .map_err(api_error)?;
        let (label, answer) = waited_answer(waited, &key);
        if let Some(label) = label {
            metrics::counter!(m::WAITS_TOTAL, "backend" => backend, "outcome" => label)
                .increment(1);
        }
        answer?
    };
    let AcquireOutcome::Granted {
        mut grant,
        took_over_expired,
        ..
    } = outcome
    else {
        let AcquireOutcome::Refused(refusal) = outcome else {
            unreachable!("an outcome is a grant or a refusal");
        };
        return Err(refused(&key, refusal, wait_ms, waited_ms, backend));
    };
    if let Some(value) = &req.value {
        // Before the answer: a campaign's leader is never seen without what it announces
        // by its own client, and an unanswered grant is abandoned with its value.
        (state.store())
            .proclaim(&key, req.session_id, grant.fencing_token, value)
            .await
            .map_err(api_error)?;
    }
    answer_grant(&state, &caller, &mut grant, waited_ms);
    exposure.told();
    if took_over_expired {
        metrics::counter!(m::EXPIRED_TOTAL, "backend" => backend, "reason" => "takeover")
            .increment(1);
    }
    Ok(Json(grant))
}

/// An acquire's options, checked and clamped: the spec for the store (without a queue
/// place) and the wait.
pub(super) fn acquire_spec(
    state: &AppState,
    ttl_ms: Option<u64>,
    wait_ms: Option<u64>,
    lock_delay_ms: Option<u64>,
) -> ApiResult<(AcquireSpec, u64)> {
    let requested = match ttl_ms {
        Some(ttl) => validate_requested_ttl("ttl_ms", ttl)?,
        None => state.ttl().lock_default_ms,
    };
    let wait_ms = match wait_ms {
        Some(ms) => validate_requested_duration("wait_ms", ms)?.min(state.wait().max_wait_ms),
        None => 0,
    };
    let lock_delay_ms = match lock_delay_ms {
        Some(ms) => validate_requested_duration("lock_delay_ms", ms)?,
        None => state.wait().default_lock_delay_ms,
    }
    .min(state.wait().max_lock_delay_ms);
    let spec = AcquireSpec {
        lease_ms: state.ttl().clamp(requested),
        lock_delay_ms,
        ..AcquireSpec::lease(0)
    };
    Ok((spec, wait_ms))
}

/// Whether `caller` may acquire for `session`. Checked where the store would answer, after
/// every refusal an unknown session gets too: another credential's session is answered word
/// for word as an unknown one.
pub(super) async fn may_acquire(
    state: &AppState,
    caller: &Caller,
    session: SessionId,
) -> ApiResult<()> {
    match standing(state, caller, session, "acquire").await? {
        Standing::Foreign => Err(as_unknown(session)),
        // The owner check of L1, again: the credential's owners may have changed since.
        Standing::Opener(opener) if !caller.owners.allows(opener.owner.as_str()) => {
            Err(ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "credential {} may not act as owner {}",
                    caller.name, opener.owner
                ),
            ))
        }
        Standing::Opener(_) | Standing::Unknown => Ok(()),
    }
}

/// A grant about to be answered: signed, its wait told, counted and written to the audit
/// trail.
pub(super) fn answer_grant(
    state: &AppState,
    caller: &Caller,
    grant: &mut LockGrant,
    waited_ms: u64,
) {
    let id = grant_id(grant);
    grant.proof = sign_as(state, grant, &id);
    grant.waited_ms = waited_ms;
    let backend = state.backend().as_str();
    metrics::counter!(m::GRANTS_TOTAL, "backend" => backend).increment(1);
    tracing::info!(event = "lock_granted", credential = %caller.name, key = %grant.lock_key, token = grant.fencing_token.0, session = %grant.session_id.tag(), grant = id.as_text(), lease_ms = grant.lease_ms, waited_ms, expires_at = %grant.expires_at.to_rfc3339());
}

/// What a waiting acquire answers, and the `lock_waits_total` outcome it counts: a wait is
/// counted when it parked (or was refused a place); one granted by its first try never waited.
fn waited_answer(
    waited: Waited,
    key: &LockKey,
) -> (Option<&'static str>, ApiResult<(AcquireOutcome, u64)>) {
    match waited {
        Waited::AtOnce(outcome) => (None, Ok((outcome, 0))),
        Waited::Answer(outcome, waited_ms) => {
            let label = if matches!(outcome, AcquireOutcome::Granted { .. }) {
                "granted"
            } else {
                "timed_out"
            };
            (Some(label), Ok((outcome, waited_ms)))
        }
        Waited::HandedOver(grant, waited_ms) => {
            let outcome = AcquireOutcome::Granted {
                grant,
                took_over_expired: false,
                // The store's clock was read by the replica's guard when it admitted the
                // hand-over (LockStore::admit_hand_over).
                store_now: None,
            };
            (Some("handed_over"), Ok((outcome, waited_ms)))
        }
        Waited::Draining => (
            Some("draining"),
            Err(ApiError::new(
                ErrorCode::NotLeader,
                format!(
                    "this replica is draining for shutdown; {key}'s queue keeps this session's place for its retry on another replica"
                ),
            )),
        ),
        Waited::Refused(refused) => (
            Some("too_many_waiters"),
            Err(ApiError::new(
                ErrorCode::TooManyWaiters,
                format!("cannot wait for {key}: {refused}"),
            )),
        ),
    }
}

/// The 409 an acquire refused by the store answers, counted as contention.
pub(super) fn refused(
    key: &LockKey,
    refusal: Refusal,
    wait_ms: u64,
    waited_ms: u64,
    backend: &'static str,
) -> ApiError {
    let waited = if wait_ms == 0 {
        String::new()
    } else {
        format!(" after waiting {waited_ms} ms")
    };
    metrics::counter!(m::CONTENTION_TOTAL, "backend" => backend).increment(1);
    let message = match refusal {
        Refusal::Held { holder_token, .. } => {
            format!("lock {key} is held by another session (token {holder_token}){waited}")
        }
        Refusal::Delayed { remaining_ms } => {
            metrics::counter!(m::LOCK_DELAYED_TOTAL, "backend" => backend).increment(1);
            format!(
                "lock {key} is free but in the lock-delay of a grant that ended involuntarily, for {remaining_ms} ms more{waited}"
            )
        }
        Refusal::Queued { ahead } => {
            format!("lock {key} is free but {ahead} waiting sessions queued for it first{waited}")
        }
    };
    ApiError::new(ErrorCode::LockHeld, message)
}

#[utoipa::path(post, path = "/v1/locks/{lock_key}/renew", tag = "locks", operation_id = "L5_renew",
    params(("lock_key" = LockKey, Path, description = "the lock key")), request_body = RenewRequest, security(("lock_client" = [])),
    responses((status = 200, description = "renewed: the same token, a fresh lease", body = LockGrant),
        (status = 400, description = "INVALID_ARGUMENT: lock_key, session_id, fencing_token, an unknown field or the body", body = ErrorBody),
        (status = 404, description = "SESSION_UNKNOWN", body = ErrorBody),
        (status = 409, description = "LOCK_LOST: no live grant with this key, session and token; LOCK_REVOKED: an operator revoked it (the message says who and why)", body = ErrorBody),
        (status = 410, description = "SESSION_EXPIRED", body = ErrorBody)))]
/// L5 `POST /v1/locks/{lock_key}/renew`.
pub async fn renew(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(lock_key): Path<String>,
    ApiJson(req): ApiJson<RenewRequest>,
) -> ApiResult<Json<LockGrant>> {
    let key = key_from_path(lock_key)?;
    let token = req.fencing_token.validate()?;
    if standing(&state, &caller, req.session_id, "renew").await? == Standing::Foreign {
        return Err(as_unknown(req.session_id));
    }
    match state.store().renew(&key, req.session_id, token).await {
        Ok(mut grant) => {
            grant.proof = sign(&state, &grant);
            tracing::info!(event = "lock_renewed", credential = %caller.name, key = %key, token = grant.fencing_token.0, session = %grant.session_id.tag(), expires_at = %grant.expires_at.to_rfc3339());
            Ok(Json(grant))
        }
        Err(err @ StoreError::LockLost { .. }) => {
            metrics::counter!(m::RENEW_LOST_TOTAL, "backend" => state.backend().as_str())
                .increment(1);
            // A revoked grant's holder is told who revoked it and why; a failed read of the
            // note leaves the plain answer, which is as true.
            match state.store().revocation(&key).await {
                Ok(Some(revoked)) if revoked.token == req.fencing_token => {
                    Err(ApiError::new(ErrorCode::LockRevoked, revoked.told(&key)))
                }
                _ => Err(api_error(err)),
            }
        }
        Err(err) => Err(api_error(err)),
    }
}

#[utoipa::path(post, path = "/v1/locks/{lock_key}/release", tag = "locks", operation_id = "L6_release",
    params(("lock_key" = LockKey, Path, description = "the lock key")), request_body = ReleaseRequest, security(("lock_client" = [])),
    responses((status = 200, description = "whether this call deleted the grant (a stale token is false, not an error)", body = ReleaseResponse),
        (status = 400, description = "INVALID_ARGUMENT: lock_key, session_id, fencing_token, an unknown field or the body", body = ErrorBody)))]
/// L6 `POST /v1/locks/{lock_key}/release`: compare-and-delete on key, session and token.
pub async fn release(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(lock_key): Path<String>,
    ApiJson(req): ApiJson<ReleaseRequest>,
) -> ApiResult<Json<ReleaseResponse>> {
    let key = key_from_path(lock_key)?;
    let token = req.fencing_token.validate()?;
    if standing(&state, &caller, req.session_id, "release").await? == Standing::Foreign {
        // What a stale token or an unknown session gets: nothing was released.
        return Ok(Json(ReleaseResponse { released: false }));
    }
    let invoked_at = chrono::Utc::now();
    let released = state
        .store()
        .release(&key, req.session_id, token)
        .await
        .map_err(api_error)?;
    tracing::info!(event = "lock_released", credential = %caller.name, key = %key, token = token.0, session = %req.session_id.tag(), released, invoked_at = %invoked_at.to_rfc3339());
    metrics::counter!(m::RELEASES_TOTAL, "backend" => state.backend().as_str(), "released" => released.to_string())
        .increment(1);
    Ok(Json(ReleaseResponse { released }))
}

#[utoipa::path(get, path = "/v1/locks/{lock_key}", tag = "locks", operation_id = "L7_inspect",
    params(("lock_key" = LockKey, Path, description = "the lock key")), security(("lock_client" = [])),
    responses((status = 200, description = "the live grant (never its session id)", body = LockInfo),
        (status = 400, description = "INVALID_ARGUMENT: lock_key", body = ErrorBody),
        (status = 404, description = "LOCK_NOT_HELD: no live grant", body = ErrorBody)))]
/// L7 `GET /v1/locks/{lock_key}`.
pub async fn get_lock(
    State(state): State<AppState>,
    Path(lock_key): Path<String>,
) -> ApiResult<Json<LockInfo>> {
    let key = key_from_path(lock_key)?;
    match state.store().get(&key).await.map_err(api_error)? {
        Some(info) => Ok(Json(info)),
        None => Err(ApiError::new(
            ErrorCode::LockNotHeld,
            format!("lock {key} is not held"),
        )),
    }
}

#[utoipa::path(post, path = "/v1/locks/{lock_key}/revoke", tag = "admin", operation_id = "L8_revoke",
    params(("lock_key" = LockKey, Path, description = "the lock key")), request_body(content = Option<RevokeRequest>, description = "optional: why (told to the holder, audited, counted by its first word)"), security(("lock_admin" = [])),
    responses((status = 200, description = "the revoke result", body = LockOutcome),
        (status = 400, description = "INVALID_ARGUMENT: Authorization sent twice, lock_key, reason, an unknown field or the body", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: a body that is not application/json", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: Authorization missing, not bearer, or not an admin credential", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: no admin credential is configured: revoke is disabled", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: this credential is over its requests a second on this replica", body = ErrorBody)))]
/// L8 `POST /v1/locks/{lock_key}/revoke`: needs an `admin` credential (`LOCK_ADMIN_TOKEN`
/// or a named one).
pub async fn revoke(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(lock_key): Path<String>,
    body: Bytes,
) -> ApiResult<Json<LockOutcome>> {
    let caller = state.callers().authorize(
        &headers,
        ADMIN_ROLE,
        "revoke (LOCK_ADMIN_TOKEN or an `admin` credential)",
    )?;
    state.callers().admit(&caller)?;
    let key = key_from_path(lock_key)?;
    let request: RevokeRequest = ApiJson::optional(&headers, &body)?;
    let note = RevokeNote {
        by: caller.name.clone(),
        reason: request.reason,
    };
    let token: Option<FencingToken> = state.store().revoke(&key, &note).await.map_err(api_error)?;
    if let Some(token) = token {
        let label = RevokeReason::label(note.reason.as_ref());
        metrics::counter!(m::REVOKED_TOTAL, "backend" => state.backend().as_str(), "reason" => label)
            .increment(1);
        let reason = note.reason.as_ref().map(RevokeReason::as_str);
        tracing::warn!(event = "lock_revoked", key = %key, token = token.0, backend = state.backend().as_str(), credential = note.by, reason);
    }
    Ok(Json(LockOutcome {
        lock_key: key,
        revoked: token.is_some(),
        fencing_token: token,
    }))
}

/// The role of lock clients: every lock route but revoke.
pub const CLIENT_ROLE: &str = lock_api::LOCK_CREDENTIAL_ROLES[0];
/// The role of operators: revoke.
pub const ADMIN_ROLE: &str = lock_api::LOCK_CREDENTIAL_ROLES[1];
/// The name of `LOCK_CLIENT_TOKEN`'s credential.
pub const CLIENT_CREDENTIAL: &str = "lock-client";
/// The name of `LOCK_ADMIN_TOKEN`'s credential: audit lines and the holder's refusal say
/// who revoked.
pub const ADMIN_CREDENTIAL: &str = "lock-admin";

/// The proof of `grant`, when this replica signs grants: it names the grant (its session,
/// key and token, digested), so a token issued twice is two proofs for two grants. A share
/// (a reader's, a permit: ADR 0007) gets a v3 proof, which signs its scope too.
fn sign(state: &AppState, grant: &LockGrant) -> Option<String> {
    sign_as(state, grant, &grant_id(grant))
}

/// [`sign`] with the grant's id already derived.
fn sign_as(state: &AppState, grant: &LockGrant, id: &GrantId) -> Option<String> {
    let signer = state.signer()?;
    let (key, token) = (&grant.lock_key, grant.fencing_token);
    Some(match grant.scope {
        GrantScope::Exclusive => signer.sign(key, token, id),
        scope => signer.sign_scoped(key, token, id, scope),
    })
}

/// The id a grant's proofs name: its session, key and token, digested.
fn grant_id(grant: &LockGrant) -> GrantId {
    GrantId::derive(grant.session_id, &grant.lock_key, grant.fencing_token)
}

/// Middleware of L1-L7: a `client` credential (`LOCK_CLIENT_TOKEN` or a named one) within
/// its request rate; handlers find the caller as an extension.
pub async fn require_client(
    State(state): State<AppState>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let admitted = state
        .callers()
        .authorize(
            request.headers(),
            CLIENT_ROLE,
            "the lock surface (LOCK_CLIENT_TOKEN or a `client` credential)",
        )
        .and_then(|caller| state.callers().admit(&caller).map(|()| caller));
    match admitted {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(err) => err.into_response(),
    }
}

#[utoipa::path(get, path = "/health/ready", tag = "health", operation_id = "ready",
    responses((status = 200, description = "not draining, and the store takes writes"),
        (status = 503, description = "NOT_LEADER (draining, read-only store, etcd without a leader) or STORE_UNAVAILABLE", body = ErrorBody)))]
/// `GET /health/ready`: the store answers and takes writes, and we are not draining.
pub async fn ready(State(state): State<AppState>) -> ApiResult<StatusCode> {
    if state.is_draining() {
        return Err(ApiError::new(
            ErrorCode::NotLeader,
            "this replica is draining for shutdown",
        ));
    }
    state.store().ready().await.map_err(api_error)?;
    Ok(StatusCode::OK)
}
