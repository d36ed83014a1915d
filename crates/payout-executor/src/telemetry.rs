//! Logs and the executor's small HTTP surface: `/metrics`, `/health/live`, `/health/ready`.

use axum::Router;
use axum::http::header;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Histogram buckets for `payout_execute_seconds` and the SDK's wait histogram.
const BUCKETS_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// JSON (default) or text logs, filtered by `RUST_LOG`.
pub fn init_logs(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = if format == LogFormat::Text {
        builder.try_init()
    } else {
        builder.json().flatten_event(true).try_init()
    };
}

/// Installs the Prometheus recorder (the SDK's metrics land here too).
pub fn install_metrics() -> anyhow::Result<PrometheusHandle> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS_SECONDS)?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    Ok(handle)
}

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
