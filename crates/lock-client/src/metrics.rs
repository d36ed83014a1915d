//! Metric names the SDK emits through the `metrics` facade (pinned in
//! `docs/contracts/C4-observability.md`). The embedding process installs the exporter.

/// Lost grants delivered to `on_lock_lost` (and session losses with nothing held), by backend.
pub const SESSION_LOST_TOTAL: &str = "lock_session_lost_total";
/// Session heartbeat results by backend and `result` (ok, not_leader, unreachable, lost, error).
pub const HEARTBEATS_TOTAL: &str = "lock_client_heartbeats_total";
/// Lease renewal results by backend and `result` (ok, not_leader, unreachable, lost, error).
pub const RENEWALS_TOTAL: &str = "lock_client_renewals_total";
/// Acquire outcomes by backend and `outcome` (granted, reentrant, contended, error).
pub const ACQUIRE_TOTAL: &str = "lock_client_acquire_total";
/// Grants an `acquire` gave back after it gave up on an attempt whose answer never came
/// (C2 §L4), by backend.
pub const ACQUIRES_SETTLED_TOTAL: &str = "lock_client_acquires_settled_total";
/// Time `acquire` spent, on the SDK's clock, by backend and `outcome`.
pub const ACQUIRE_WAIT_SECONDS: &str = "lock_client_acquire_wait_seconds";
/// Time left before the grant's conservative deadline at every held-check that passed
/// (`remaining`, `check_still_held`), by backend: how close guarded work comes to the edge.
pub const GUARD_HEADROOM_SECONDS: &str = "lock_guard_headroom_seconds";

/// Values of the `result` label of heartbeats and renewals.
pub const RESULTS: [&str; 5] = ["ok", "not_leader", "unreachable", "lost", "error"];
/// Values of the `outcome` label of acquires.
pub const ACQUIRE_OUTCOMES: [&str; 4] = ["granted", "reentrant", "contended", "error"];

/// HELP text of every family the SDK emits, and each series of `backend` registered at zero
/// (an absent series is not a zero). Called when a session opens, since the backend is known
/// only from the answer that opened the session; repeating it is harmless.
pub(crate) fn describe(backend: &'static str) {
    use metrics::{counter, describe_counter, describe_histogram, histogram};
    describe_counter!(
        SESSION_LOST_TOTAL,
        "Lost grants delivered to on_lock_lost, and sessions lost while holding nothing."
    );
    describe_counter!(HEARTBEATS_TOTAL, "Session heartbeats (L2), by result.");
    describe_counter!(RENEWALS_TOTAL, "Lease renewals (L5), by result.");
    describe_counter!(ACQUIRE_TOTAL, "acquire calls, by outcome.");
    describe_counter!(
        ACQUIRES_SETTLED_TOTAL,
        "Grants released by an acquire that gave up on an attempt whose answer never came."
    );
    describe_histogram!(
        ACQUIRE_WAIT_SECONDS,
        metrics::Unit::Seconds,
        "Time acquire spent on the SDK's clock, by outcome (not for reentrant acquires)."
    );
    describe_histogram!(
        GUARD_HEADROOM_SECONDS,
        metrics::Unit::Seconds,
        "Time left before the grant's conservative deadline at each held-check that passed."
    );
    counter!(SESSION_LOST_TOTAL, "backend" => backend).increment(0);
    counter!(ACQUIRES_SETTLED_TOTAL, "backend" => backend).increment(0);
    // Registered without a sample: no held-check has passed yet.
    let _ = histogram!(GUARD_HEADROOM_SECONDS, "backend" => backend);
    for result in RESULTS {
        counter!(HEARTBEATS_TOTAL, "backend" => backend, "result" => result).increment(0);
        counter!(RENEWALS_TOTAL, "backend" => backend, "result" => result).increment(0);
    }
    for outcome in ACQUIRE_OUTCOMES {
        counter!(ACQUIRE_TOTAL, "backend" => backend, "outcome" => outcome).increment(0);
        if outcome != "reentrant" {
            // Registered without a sample (a reentrant acquire records no wait).
            let _ = histogram!(ACQUIRE_WAIT_SECONDS, "backend" => backend, "outcome" => outcome);
        }
    }
}
