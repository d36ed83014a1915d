//! The HTTP surface: the lock routes (open, heartbeat and close a session; acquire, renew,
//! release, inspect and revoke a lock; acquire a key set; proclaim a leader's value; watch), health and metrics, and the layers every request
//! passes: the drain guard and `NOT_LEADER` counter here, then `service_kit::common_layers`
//! (body limit, timeout, metrics, JSON errors, tracing).

mod elections;
mod handlers;
pub mod openapi;
mod sets;
mod store_error;
mod watch;

use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use lock_api::{ErrorCode, WireCode};
use service_kit::{ApiError, RequestMetrics, common_layers};

use crate::metrics as m;
use crate::state::AppState;

pub use handlers::{ADMIN_CREDENTIAL, ADMIN_ROLE, CLIENT_CREDENTIAL, CLIENT_ROLE};

/// The router of one replica.
pub fn router(state: AppState, request_timeout: Duration) -> Router {
    // Every lock route but revoke: the lock clients' credential, checked before anything else.
    let client_routes = Router::new()
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
        .route("/v1/lock-sets/acquire", post(sets::acquire_set))
        .route("/v1/locks/{lock_key}/renew", post(handlers::renew))
        .route("/v1/locks/{lock_key}/release", post(handlers::release))
        .route("/v1/locks/{lock_key}/proclaim", post(elections::proclaim))
        .route("/v1/locks/{lock_key}", get(handlers::get_lock))
        .route("/v1/watch", get(watch::watch))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            handlers::require_client,
        ));
    let routes = Router::new()
        .merge(client_routes)
        // Revoke: the operators' credential, checked in the handler.
        .route("/v1/locks/{lock_key}/revoke", post(handlers::revoke))
        .route("/health/live", get(service_kit::live))
        .route("/health/ready", get(handlers::ready))
        .route("/metrics", get(service_kit::render_metrics))
        .route("/openapi.json", get(openapi::serve))
        .fallback(service_kit::not_found)
        .layer(middleware::from_fn_with_state(state.clone(), drain_guard))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_not_leader,
        ))
        .with_state(state.clone());
    let metrics = RequestMetrics {
        requests_total: m::HTTP_REQUESTS_TOTAL,
        duration_seconds: m::HTTP_REQUEST_SECONDS,
        labels: vec![("backend", state.backend().as_str().to_owned())],
    };
    common_layers(
        routes,
        lock_api::REQUEST_BODY_MAX_BYTES,
        request_timeout,
        metrics,
    )
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

/// Counts `NOT_LEADER` answers to mutations.
async fn count_not_leader(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let mutates = !matches!(*request.method(), Method::GET | Method::HEAD);
    let response = next.run(request).await;
    if mutates && response.extensions().get::<WireCode>() == Some(&ErrorCode::NotLeader.into()) {
        metrics::counter!(m::NOT_LEADER_TOTAL, "backend" => state.backend().as_str()).increment(1);
    }
    response
}
