//! Prometheus metrics of the lock-server (names pinned in `docs/contracts/C4-observability.md`).

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
