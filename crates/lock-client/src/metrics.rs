//! Metric names the SDK emits through the `metrics` facade (pinned in C4). The embedding
//! process installs the exporter.

/// Lost grants delivered to `on_lock_lost` (and session losses with nothing held), by backend.
pub const SESSION_LOST_TOTAL: &str = "lock_session_lost_total";
/// Heartbeat (L2) results by backend and `result` (ok, not_leader, unreachable, lost, error).
pub const HEARTBEATS_TOTAL: &str = "lock_client_heartbeats_total";
/// Renewal (L5) results by backend and `result` (ok, not_leader, unreachable, lost, error).
pub const RENEWALS_TOTAL: &str = "lock_client_renewals_total";
/// Acquire outcomes by backend and `outcome` (granted, reentrant, contended, error).
pub const ACQUIRE_TOTAL: &str = "lock_client_acquire_total";
/// Time `acquire` spent, on the SDK's clock, by backend and `outcome`.
pub const ACQUIRE_WAIT_SECONDS: &str = "lock_client_acquire_wait_seconds";
