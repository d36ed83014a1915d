//! The guard before every write and the write's log line: the guard is a clause that stops
//! the payout with the typed loss reason (never a boolean), and what it saw (the grant's
//! conservative deadline) rides on the write's `write` line for the campaign's checks.

use std::time::{Duration, SystemTime};

use lock_api::{FencingToken, LockHandle, LockLost};
use lock_client::LockClientSession;

use crate::loss::Watch;
use crate::services::{CallError, Refusal};

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
