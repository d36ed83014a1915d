//! Routes of payment-resource (its section of the HTTP contract): create (creators), get, list
//! claimable, claim and post (executors), reserve and record a rail submission (rail-proxy
//! only), re-fence (operators), ledger summary. Each write checks, in this order: the
//! caller's role credential, the path, the token and its signed proof, then the fence.
//!
//! [`handlers`] answers each route; [`openapi`] describes them; this file routes.

mod handlers;
pub mod openapi;

use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use service_kit::{RequestMetrics, common_layers};

pub use handlers::{AppState, Role, env_credentials};
use handlers::{
    claim, create, get_payout, get_submission, ledger_summary, list, offer, post_result, ready,
    record_outcome, refence, reserve,
};

/// Largest request body.
const BODY_MAX_BYTES: usize = 16 * 1024;

/// The router.
pub fn router(state: AppState, request_timeout: Duration) -> Router {
    let routes = Router::new()
        .route("/v1/payouts", post(create).get(list))
        .route("/v1/offers", post(offer))
        .route("/v1/payouts/{payout_id}", get(get_payout))
        .route("/v1/payouts/{payout_id}/claim", post(claim))
        .route("/v1/payouts/{payout_id}/submissions", post(reserve))
        .route("/v1/payouts/{payout_id}/submission", get(get_submission))
        .route(
            "/v1/payouts/{payout_id}/submission/outcome",
            post(record_outcome),
        )
        .route("/v1/payouts/{payout_id}/post", post(post_result))
        .route("/v1/payouts/{payout_id}/refence", post(refence))
        .route("/v1/ledger/summary", get(ledger_summary))
        .route("/health/live", get(service_kit::live))
        .route("/health/ready", get(ready))
        .route("/metrics", get(service_kit::render_metrics))
        .route("/openapi.json", get(openapi::serve))
        .fallback(service_kit::not_found)
        .with_state(state);
    common_layers(
        routes,
        BODY_MAX_BYTES,
        request_timeout,
        RequestMetrics::for_service("payment-resource"),
    )
}
