//! The guard before every write and the write's log line: the guard is a clause that stops
//! the payout with the typed loss reason (never a boolean), and what it saw (the grant's
//! conservative deadline) rides on the write's `write` line for the campaign's checks, and
//! into the write's headroom histogram for operators.

use std::time::{Duration, SystemTime};

use lock_api::{FencingToken, LockLost};
use lock_client::LockClientSession;
use lock_client::LockHandle;

use crate::loss::Watch;
use crate::services::{CallError, Refusal};

/// `payout_write_headroom_seconds{step}`: the time left before the grant's conservative
/// deadline, as the guard before a write saw it, one sample per write.
pub const WRITE_HEADROOM_SECONDS: &str = "payout_write_headroom_seconds";
/// The writes, the values of `step` (on the metric and on the `write` line).
pub const WRITE_STEPS: [&str; 3] = ["claim", "submit", "post"];

/// HELP text of the write headroom, and its series for every step registered without a
/// sample (an absent series is not a zero).
pub(crate) fn describe() {
    metrics::describe_histogram!(
        WRITE_HEADROOM_SECONDS,
        metrics::Unit::Seconds,
        "Time left before the grant's conservative deadline at each write, as its guard saw it, by step."
    );
    for step in WRITE_STEPS {
        let _ = metrics::histogram!(WRITE_HEADROOM_SECONDS, "step" => step);
    }
}

/// Runs one write and logs it with its answer (`write`: payout, step, token, result, the
/// wall time it was sent, and the grant's deadline as the guard before it saw it): the fault
/// campaign's history reads these lines, and checks that each deadline never lies after the
/// lock-server's expiry of the grant.
pub(crate) async fn logged<T>(
    payout_id: i64,
    step: &'static str,
    token: FencingToken,
    belief: Belief,
    call: impl std::future::Future<Output = Result<T, CallError>>,
) -> Result<T, CallError> {
    debug_assert!(WRITE_STEPS.contains(&step), "unknown write step {step}");
    // Per write, not per guard: a guard that stops the payout (lease short) leads to no write.
    metrics::histogram!(WRITE_HEADROOM_SECONDS, "step" => step)
        .record(belief.remaining.as_secs_f64());
    let invoked_at = humantime::format_rfc3339_micros(SystemTime::now()).to_string();
    let deadline_at = humantime::format_rfc3339_micros(belief.deadline_at).to_string();
    let result = call.await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(err) => match err.code() {
            Some(Refusal::FencedOut) => "fenced",
            Some(Refusal::AlreadyTerminal) => "terminal",
            Some(Refusal::AlreadySubmitted) => "submitted",
            _ => "error",
        },
    };
    tracing::info!(event = "write", payout_id, step, token = token.0, result = outcome, invoked_at = %invoked_at, deadline_at = %deadline_at);
    result
}

/// The guard clause before every write: the listener has not reported the grant lost, and
/// the grant is within the SDK's conservative deadline. `Err` carries the typed reason; the
/// caller stops with `?`. `Ok` is no permission for a side effect: the fence is the safety.
pub fn guard(
    session: &LockClientSession,
    handle: &LockHandle,
    watch: &Watch,
) -> Result<Belief, LockLost> {
    watch.check()?;
    let remaining = session.remaining(handle)?;
    Ok(Belief {
        remaining,
        deadline_at: SystemTime::now() + remaining,
    })
}

/// What a passed guard saw: the time left before the grant's conservative deadline, and that
/// deadline in wall time (for the log; the SDK itself counts on its monotonic clock).
#[derive(Debug, Clone, Copy)]
pub struct Belief {
    /// Time left before the deadline.
    pub remaining: Duration,
    /// The deadline, wall time.
    pub deadline_at: SystemTime,
}
