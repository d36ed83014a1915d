//! The `/metrics` and `/health/live` handlers over the process kit's recorder.

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

/// Installs the process-wide recorder once and returns its handle (`process_kit::recorder`).
pub use process_kit::recorder::install as install_metrics;

/// `GET /metrics`: Prometheus text of the process-wide recorder.
pub async fn render_metrics() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        install_metrics().render(),
    )
}

/// `GET /health/live`: the process answers.
pub async fn live() -> StatusCode {
    StatusCode::OK
}
