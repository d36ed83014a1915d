//! Prometheus metrics of the lock-server (names pinned in `docs/contracts/C4-observability.md`).

/// Grants handed out (new tokens and same-session re-grants).
pub const GRANTS_TOTAL: &str = "lock_grants_total";
/// Acquires answered `LOCK_HELD`.
pub const CONTENTION_TOTAL: &str = "lock_contention_total";
/// Grants that expired: removed by the reaper or replaced by a new grant (`reason`).
pub const EXPIRED_TOTAL: &str = "lock_expired_total";
/// Sessions removed by the reaper after expiring.
pub const SESSIONS_EXPIRED_TOTAL: &str = "lock_sessions_expired_total";
/// How long each reaper pass took, store call and logging (histogram, seconds).
pub const REAPER_PASS_SECONDS: &str = "lock_reaper_pass_seconds";
/// Writes per batch committed by group commit (histogram; PostgreSQL with group commit on).
pub use crate::store::STORE_BATCH_WRITES;
/// Sessions created.
pub const SESSIONS_CREATED_TOTAL: &str = "lock_sessions_created_total";
/// Counter: requests that presented another credential's session (answered as for an
/// unknown session), by route.
pub const SESSIONS_REFUSED_TOTAL: &str = "lock_sessions_refused_total";
/// Renewals refused with `LOCK_LOST`.
pub const RENEW_LOST_TOTAL: &str = "lock_renew_lost_total";
/// Releases, by `released` = true/false.
pub const RELEASES_TOTAL: &str = "lock_releases_total";
/// Revocations that removed a live grant.
pub const REVOKED_TOTAL: &str = "lock_revoked_total";
/// Mutations answered `NOT_LEADER`.
pub const NOT_LEADER_TOTAL: &str = "lock_not_leader_total";
/// Acquires parked waiting for their key on this replica (gauge).
pub const WAITERS: &str = "lock_waiters";
/// Acquires that waited (parked, or were refused a place), by how they ended (`outcome`,
/// [`WAIT_OUTCOMES`]); one granted by its first try did not wait and is not counted.
pub const WAITS_TOTAL: &str = "lock_waits_total";
/// Acquires refused because the key was in a lock-delay.
pub const LOCK_DELAYED_TOTAL: &str = "lock_delayed_total";

/// Acquire requests that ended while the store might hold a grant or a queue place for them
/// that their client was not told of (cancelled, a store error, a withheld grant).
pub const ACQUIRES_ABANDONED_TOTAL: &str = "lock_acquires_abandoned_total";
/// Grants released because the request they were made for had ended unanswered.
pub const ORPHANS_RELEASED_TOTAL: &str = "lock_orphan_grants_released_total";
/// The store-clock guard's two counters, incremented where the guard runs (`lock-store`).
pub use lock_store::{GRANTS_WITHHELD_TOTAL, STORE_CLOCK_STEPS_TOTAL};
/// Values of `lock_waits_total`'s `outcome` label.
pub const WAIT_OUTCOMES: [&str; 5] = [
    "granted",
    "handed_over",
    "timed_out",
    "draining",
    "too_many_waiters",
];

/// HTTP requests by route, method and status.
pub const HTTP_REQUESTS_TOTAL: &str = "lock_http_requests_total";
/// HTTP request latency by route and method.
pub const HTTP_REQUEST_SECONDS: &str = "lock_http_request_duration_seconds";

/// Every counter family and its HELP text.
const COUNTER_HELP: [(&str, &str); 16] = [
    (
        STORE_CLOCK_STEPS_TOTAL,
        "Steps of the store's clock seen by this replica, forward or back (each holds grants, for at most the longest lease).",
    ),
    (
        GRANTS_WITHHELD_TOTAL,
        "Acquires answered 503 STORE_UNAVAILABLE because the store's clock stepped.",
    ),
    (
        WAITS_TOTAL,
        "Acquires with wait_ms that waited (parked, or were refused a place) by outcome: granted, timed_out, draining, too_many_waiters. A grant at the first try is no wait.",
    ),
    (
        LOCK_DELAYED_TOTAL,
        "Acquires refused because the key was in the lock-delay of a grant that ended involuntarily.",
    ),
    (
        GRANTS_TOTAL,
        "Grants handed out: new tokens and same-session re-grants (L4 200).",
    ),
    (
        CONTENTION_TOTAL,
        "Acquires answered 409 LOCK_HELD (held, in a lock-delay, or waiters queued first).",
    ),
    (
        EXPIRED_TOTAL,
        "Grants that expired: reaped after their lease or session ended, or taken over.",
    ),
    (
        SESSIONS_EXPIRED_TOTAL,
        "Sessions removed by the reaper after expiring.",
    ),
    (SESSIONS_CREATED_TOTAL, "Sessions created (L1 201)."),
    (
        SESSIONS_REFUSED_TOTAL,
        "Requests that presented a session another credential opened, by route (answered as for an unknown session).",
    ),
    (RENEW_LOST_TOTAL, "Renewals refused with 409 LOCK_LOST."),
    (
        ACQUIRES_ABANDONED_TOTAL,
        "Acquires that ended while the store might hold a grant or queue place for them unknown to their client (cancelled, store error, withheld grant); each is abandoned in the store.",
    ),
    (
        ORPHANS_RELEASED_TOTAL,
        "Grants released because the acquire they were made for ended without telling its client.",
    ),
    (
        RELEASES_TOTAL,
        "Releases answered (L6 200), by whether they released.",
    ),
    (
        REVOKED_TOTAL,
        "Live grants revoked by an operator (L8), by the reason's first word (maintenance, incident, security, operator, test; other; none).",
    ),
    (
        NOT_LEADER_TOTAL,
        "Mutating requests answered 503 NOT_LEADER (draining, read-only store, etcd without a leader).",
    ),
];

/// HELP text of every family, and every series whose labels are known at start registered
/// at zero (an absent series is not a zero: `increase(...)` needs a first sample). Called
/// once the recorder is installed.
pub fn describe(backend: &'static str) {
    use metrics::{describe_counter, describe_gauge, describe_histogram, gauge, histogram};
    describe_histogram!(
        REAPER_PASS_SECONDS,
        metrics::Unit::Seconds,
        "Reaper passes, from the store call to the last lease_expired line logged."
    );
    describe_histogram!(
        STORE_BATCH_WRITES,
        "Writes (heartbeats, acquires, renews, releases) per batch committed in one transaction (group commit)."
    );
    // Registered without a sample: the series exists from start.
    let _ = histogram!(REAPER_PASS_SECONDS, "backend" => backend);
    let _ = histogram!(STORE_BATCH_WRITES, "backend" => backend);
    describe_gauge!(
        WAITERS,
        "Acquires with wait_ms parked on this replica, waiting for their key."
    );
    gauge!(WAITERS).set(0.0);
    for (name, help) in COUNTER_HELP {
        describe_counter!(name, help);
    }
    register_counters_at_zero(backend);
    // The request families are described by `service_kit::common_layers`.
}

/// Registers at zero every counter series whose labels are known at start.
fn register_counters_at_zero(backend: &'static str) {
    use metrics::counter;
    for name in [
        GRANTS_TOTAL,
        CONTENTION_TOTAL,
        SESSIONS_EXPIRED_TOTAL,
        SESSIONS_CREATED_TOTAL,
        RENEW_LOST_TOTAL,
        NOT_LEADER_TOTAL,
        LOCK_DELAYED_TOTAL,
        STORE_CLOCK_STEPS_TOTAL,
        GRANTS_WITHHELD_TOTAL,
        ACQUIRES_ABANDONED_TOTAL,
        ORPHANS_RELEASED_TOTAL,
    ] {
        counter!(name, "backend" => backend).increment(0);
    }
    for reason in EXPIRY_REASONS {
        counter!(EXPIRED_TOTAL, "backend" => backend, "reason" => reason).increment(0);
    }
    for outcome in WAIT_OUTCOMES {
        counter!(WAITS_TOTAL, "backend" => backend, "outcome" => outcome).increment(0);
    }
    for reason in lock_api::REVOKE_REASON_LABELS {
        counter!(REVOKED_TOTAL, "backend" => backend, "reason" => reason).increment(0);
    }
    for route in SESSION_ROUTES {
        counter!(SESSIONS_REFUSED_TOTAL, "route" => route).increment(0);
    }
    for released in ["true", "false"] {
        counter!(RELEASES_TOTAL, "backend" => backend, "released" => released).increment(0);
    }
}

/// Values of `lock_sessions_refused_total`'s `route` label: the routes that act on a session.
pub const SESSION_ROUTES: [&str; 6] = [
    "heartbeat",
    "close",
    "acquire",
    "renew",
    "release",
    "proclaim",
];

/// Values of `lock_expired_total`'s `reason` label.
pub const EXPIRY_REASONS: [&str; 3] = ["lease", "session", "takeover"];
