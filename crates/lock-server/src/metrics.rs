//! Prometheus metrics of the lock-server (names pinned in `docs/contracts/C4-observability.md`).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Grants handed out (new tokens and same-session re-grants).
pub const GRANTS_TOTAL: &str = "lock_grants_total";
/// Acquires answered `LOCK_HELD`.
pub const CONTENTION_TOTAL: &str = "lock_contention_total";
/// Grants that expired: removed by the reaper or replaced by a new grant (`reason`).
pub const EXPIRED_TOTAL: &str = "lock_expired_total";
/// Sessions removed by the reaper after expiring.
pub const SESSIONS_EXPIRED_TOTAL: &str = "lock_sessions_expired_total";
/// Sessions created.
pub const SESSIONS_CREATED_TOTAL: &str = "lock_sessions_created_total";
/// Renewals refused with `LOCK_LOST`.
pub const RENEW_LOST_TOTAL: &str = "lock_renew_lost_total";
/// Releases, by `released` = true/false.
pub const RELEASES_TOTAL: &str = "lock_releases_total";
/// Revocations that removed a live grant.
pub const REVOKED_TOTAL: &str = "lock_revoked_total";
/// Mutations answered `NOT_LEADER`.
pub const NOT_LEADER_TOTAL: &str = "lock_not_leader_total";
/// HTTP requests by route, method and status.
pub const HTTP_REQUESTS_TOTAL: &str = "lock_http_requests_total";
/// HTTP request latency by route and method.
pub const HTTP_REQUEST_SECONDS: &str = "lock_http_request_duration_seconds";

/// Histogram buckets for request latency, in seconds.
const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Installs the process-wide Prometheus recorder once and returns its handle.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS_SECONDS)
                .expect("latency buckets are non-empty");
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed by an embedding process; then this
            // handle renders an empty page, which is better than refusing to start.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
