//! The executor's small HTTP surface: `/metrics`, `/health/live`, `/health/ready`. Logs,
//! the recorder and flag parsing are the process kit's (`process-kit`).

use axum::Router;
use axum::http::header;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

/// The router of `/metrics` and health.
pub fn router(metrics: PrometheusHandle) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        metrics.render(),
                    )
                }
            }),
        )
        .route("/health/live", get(|| async { "ok" }))
        .route("/health/ready", get(|| async { "ok" }))
        .fallback(|| async {
            let body = lock_api::ErrorBody {
                code: lock_api::ErrorCode::NotFound,
                message: "no such route".into(),
            };
            (axum::http::StatusCode::NOT_FOUND, axum::Json(body))
        })
}
