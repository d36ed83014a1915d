//! The HTTP surface: routes of L1-L8, health and metrics, and the layers every request
//! passes (tracing, JSON errors, metrics, timeout, drain guard, body limit).

mod error;
mod handlers;
mod json;

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use lock_api::ErrorCode;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

pub use error::ApiError;
pub use json::ApiJson;

use crate::metrics as m;
use crate::state::AppState;

/// Largest error body a layer below us produced that is quoted into our JSON message.
const QUOTED_BODY_MAX_BYTES: usize = 1024;

/// The router of one replica.
pub fn router(state: AppState, request_timeout: Duration) -> Router {
    Router::new()
        .route("/v1/sessions", post(handlers::create_session))
        .route(
            "/v1/sessions/{session_id}/heartbeat",
            post(handlers::heartbeat),
        )
        .route(
            "/v1/sessions/{session_id}",
            axum::routing::delete(handlers::delete_session),
        )
        .route("/v1/locks/{lock_key}/acquire", post(handlers::acquire))
        .route("/v1/locks/{lock_key}/renew", post(handlers::renew))
        .route("/v1/locks/{lock_key}/release", post(handlers::release))
        .route("/v1/locks/{lock_key}/revoke", post(handlers::revoke))
        .route("/v1/locks/{lock_key}", get(handlers::get_lock))
        .route("/health/live", get(handlers::live))
        .route("/health/ready", get(handlers::ready))
        .route("/metrics", get(handlers::metrics))
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(lock_api::REQUEST_BODY_MAX_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), drain_guard))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            request_timeout,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .layer(middleware::map_response(jsonify_errors))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// While draining, every mutation is answered `NOT_LEADER` so clients move to another replica.
async fn drain_guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let mutates = !matches!(*request.method(), Method::GET | Method::HEAD);
    if mutates && state.is_draining() && request.uri().path().starts_with("/v1/") {
        return ApiError::new(
            ErrorCode::NotLeader,
            "this replica is draining for shutdown; use another",
        )
        .into_response();
    }
    next.run(request).await
}

/// Counts and times every request by route; counts `NOT_LEADER` answers.
async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().as_str().to_owned();
    let mutates = !matches!(*request.method(), Method::GET | Method::HEAD);
    let response = next.run(request).await;
    let code = response.extensions().get::<ErrorCode>().copied();
    let backend = state.backend().as_str();
    if mutates && code == Some(ErrorCode::NotLeader) {
        metrics::counter!(m::NOT_LEADER_TOTAL, "backend" => backend).increment(1);
    }
    metrics::counter!(
        m::HTTP_REQUESTS_TOTAL,
        "backend" => backend,
        "route" => route.clone(),
        "method" => method.clone(),
        "status" => response.status().as_u16().to_string(),
    )
    .increment(1);
    metrics::histogram!(m::HTTP_REQUEST_SECONDS, "backend" => backend, "route" => route, "method" => method)
        .record(started.elapsed().as_secs_f64());
    response
}

/// Turns any error answer that is not already our JSON (router 405, timeouts, limits) into
/// `{"code","message"}`, keeping the status.
async fn jsonify_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let text = axum::body::to_bytes(response.into_body(), QUOTED_BODY_MAX_BYTES)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let code = error::code_for_status(status);
    let mut out = ApiError::new(code, message).into_response();
    *out.status_mut() = status;
    out
}

/// Attaches the error code to the response so layers can see it.
pub(crate) fn tag(mut response: Response<Body>, code: ErrorCode) -> Response<Body> {
    response.extensions_mut().insert(code);
    response
}
