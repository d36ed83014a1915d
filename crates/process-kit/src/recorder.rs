//! The process-wide Prometheus recorder: installed once, with the same buckets for every
//! `*_seconds` histogram in every binary.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Histogram buckets for every `*_seconds` metric.
const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Installs the process-wide recorder once and returns its handle.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS_SECONDS)
                .expect("latency buckets are non-empty");
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // An embedding process may have installed a recorder already; then this handle
            // renders an empty page, which is better than refusing to start.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
