//! The bounded acquire loop's decisions, sans-IO: how long each attempt asks the server to
//! wait, when the instant a grant's deadline counts from was taken, what a failed attempt
//! means (retry after a full-jitter sleep, on the same or the next endpoint; stop as
//! contended; stop with the error), and what an error does to the session. Every driver
//! (`LockClientSession::acquire`, `LockClient::acquire_as`, the simulation) sends what this
//! decides and feeds back what came of it; none decides anything itself.

use std::time::Duration;

use lock_api::{ErrorCode, LossReason, RetryVerdict};

use crate::backoff;
use crate::deadline::usable_nanos;

/// What a waiting acquire leaves of the request timeout for the server's last store call and the
/// answer's way back.
pub const WAIT_REPLY_MARGIN_MS: u64 = 250;

/// The `wait_ms` of an acquire attempt with `remaining_nanos` of its budget left: the
/// server holds the request (FIFO with the key's other waiters) for at most this, which
/// leaves the request timeout [`WAIT_REPLY_MARGIN_MS`] to answer. `None` (a try) when
/// under a millisecond is left.
pub fn wait_ms_for(remaining_nanos: u64, request_timeout: Duration) -> Option<u64> {
    let timeout_ms = u64::try_from(request_timeout.as_millis()).unwrap_or(u64::MAX);
    let wait_ms =
        (remaining_nanos / 1_000_000).min(timeout_ms.saturating_sub(WAIT_REPLY_MARGIN_MS));
    (wait_ms > 0).then_some(wait_ms)
}

/// Most times opening a session is retried on a replica that answered it is over the
/// caller's rate or session quota (429); then the refusal is the answer.
pub const OPEN_THROTTLED_RETRIES_MAX: u32 = 5;
/// Backoff of a throttled open: attempt `n` sleeps in the upper half of `min(cap, base ·
/// 2^n)`, so the retries span at least 1.5 s (a session quota frees only when one closes or
/// runs out). The base is above the time a bucket refills one request at any sane rate.
const OPEN_THROTTLED_BASE_MS: u64 = 100;
/// Backoff cap of a throttled open.
const OPEN_THROTTLED_CAP_MS: u64 = 2_000;

/// After a session open failed with `verdict`, having been throttled `throttled_so_far` times:
/// how long to sleep before asking the same replica again, or `None` to go on as for any
/// other refusal (the next endpoint for `NextTick`, else stop with the error).
pub fn throttled_open_retry(
    verdict: RetryVerdict,
    throttled_so_far: u32,
    rng: &mut fastrand::Rng,
) -> Option<Duration> {
    (verdict == RetryVerdict::Throttled && throttled_so_far < OPEN_THROTTLED_RETRIES_MAX).then(
        || {
            backoff::equal_jitter(
                Duration::from_millis(OPEN_THROTTLED_BASE_MS),
                Duration::from_millis(OPEN_THROTTLED_CAP_MS),
                throttled_so_far,
                rng,
            )
        },
    )
}

/// The session loss a refusal means: the server no longer knows the session (404) or it
/// expired there (410). Either is final for every grant in it.
pub fn session_loss(code: ErrorCode) -> Option<LossReason> {
    match code {
        ErrorCode::SessionUnknown => Some(LossReason::SessionUnknown),
        ErrorCode::SessionExpired => Some(LossReason::SessionExpired),
        _ => None,
    }
}

/// Whether a call that failed with `code` (`None`: no answer) moves the session to the next
/// endpoint: no answer, `NOT_LEADER` and `STORE_UNAVAILABLE` say this replica cannot serve
/// now; any other answer came from a replica that can.
pub fn rotates(code: Option<ErrorCode>) -> bool {
    matches!(
        code,
        None | Some(ErrorCode::NotLeader | ErrorCode::StoreUnavailable)
    )
}

/// One attempt to send: the wait to ask for, and the instant it left on the caller's clock
/// (read before the request is written). Only the loop makes one, so no driver can date a
/// grant from anything but its send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    send_nanos: u64,
    wait_ms: Option<u64>,
}

impl Attempt {
    /// An attempt sent at `send_nanos`, for the core's own tests.
    #[cfg(test)]
    pub(crate) fn sent_at(send_nanos: u64) -> Self {
        Self {
            send_nanos,
            wait_ms: None,
        }
    }

    /// When the request left.
    pub fn send_nanos(self) -> u64 {
        self.send_nanos
    }

    /// The `wait_ms` to send: `None` is a try.
    pub fn wait_ms(self) -> Option<u64> {
        self.wait_ms
    }

    /// The instant a grant answered to this attempt counts from: the send, plus the time the
    /// server says it held the request before the store call that granted it
    /// (`LockGrant::waited_ms`), shrunk by the safety margin, and never more than this client
    /// measured between send and `received_nanos` (a server that overstates its wait cannot
    /// push a deadline past what physics allows). The grant began after this.
    pub fn grant_basis_nanos(self, received_nanos: u64, waited_ms: u64, safety_margin: f64) -> u64 {
        grant_basis_nanos(self.send_nanos, received_nanos, waited_ms, safety_margin)
    }
}

/// See [`Attempt::grant_basis_nanos`]. The server's `waited_ms` are its clock's; on this
/// client's clock, running slow by up to the margin the SDK allows for drift, they may have
/// lasted only `waited × (1 − margin)`, so that is all the credit a wait earns (crediting it
/// whole let a slow client's deadline lie after the server's expiry, as the simulation found).
pub fn grant_basis_nanos(
    send_nanos: u64,
    received_nanos: u64,
    waited_ms: u64,
    safety_margin: f64,
) -> u64 {
    let measured = received_nanos.wrapping_sub(send_nanos);
    let credit = usable_nanos(safety_margin, waited_ms);
    let basis = send_nanos.wrapping_add(credit.min(measured));
    // The basis lies between the send and the answer, and credits no more of the server's
    // wait than what is left of it after the margin.
    let credited = basis.wrapping_sub(send_nanos);
    debug_assert!(
        credited <= measured
            && credited as f64 <= waited_ms as f64 * 1e6 * (1.0 - safety_margin) + 1.0,
        "a grant's basis {credited} ns after its send: past the answer ({measured} ns) or more \
         than {waited_ms} ms less the margin {safety_margin}"
    );
    basis
}

/// What comes after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Sleep this long, then attempt again.
    Retry(Duration),
    /// Stop: the key stayed held by another session for the whole policy (`Ok(None)`).
    Contended,
    /// Stop with this attempt's error.
    Fail,
}

/// A failed attempt's consequences: whether the session moves to the next endpoint first,
/// and what comes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfterFailure {
    /// Move to the next endpoint before anything else.
    pub rotate: bool,
    /// Retry or stop.
    pub next: Next,
}

/// One call to `acquire`: its budget on the caller's clock, its attempts so far.
#[derive(Debug, Clone)]
pub struct AcquireLoop {
    policy: AcquirePolicy,
    request_timeout: Duration,
    started_nanos: u64,
    budget_nanos: u64,
    attempts: u32,
    /// The last attempt's outcome is unknown: no answer came, or the server could not say
    /// (503). The server may have granted it.
    unanswered: bool,
}

impl AcquireLoop {
    /// A loop under `policy`, started at `now_nanos`; each attempt's wait leaves room in
    /// `request_timeout` for the answer.
    pub fn new(policy: &AcquirePolicy, request_timeout: Duration, now_nanos: u64) -> Self {
        Self {
            policy: *policy,
            request_timeout,
            started_nanos: now_nanos,
            budget_nanos: u64::try_from(policy.budget.as_nanos()).unwrap_or(u64::MAX),
            attempts: 0,
            unanswered: false,
        }
    }

    /// When the loop started (for the wait the caller reports).
    pub fn started_nanos(&self) -> u64 {
        self.started_nanos
    }

    /// Attempts made so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether the loop's last attempt went unanswered (C2 §L4): the server may have granted
    /// it to a caller that has stopped listening. A driver that gives up then settles: one
    /// try without waiting answers such a grant again (same session, same token), and
    /// [`crate::SessionCore::settling`] says whether to release it at once.
    pub fn ended_unanswered(&self) -> bool {
        self.unanswered
    }

    fn remaining_nanos(&self, now_nanos: u64) -> u64 {
        self.budget_nanos
            .saturating_sub(now_nanos.wrapping_sub(self.started_nanos))
    }

    /// The next attempt, sent at `now_nanos`.
    pub fn attempt(&mut self, now_nanos: u64) -> Attempt {
        self.attempts = self.attempts.saturating_add(1);
        Attempt {
            send_nanos: now_nanos,
            wait_ms: wait_ms_for(self.remaining_nanos(now_nanos), self.request_timeout),
        }
    }

    /// The last attempt failed at `now_nanos` with `verdict` (`Backoff` for contention,
    /// and for a grant that could not be used); `rng` draws the jitter.
    pub fn failed(
        &mut self,
        now_nanos: u64,
        verdict: RetryVerdict,
        rng: &mut fastrand::Rng,
    ) -> AfterFailure {
        let rotate = verdict == RetryVerdict::NextTick;
        self.unanswered = rotate;
        let stop = match verdict {
            RetryVerdict::Never => Some(Next::Fail),
            _ => {
                let spent = self.attempts >= self.policy.max_attempts
                    || self.remaining_nanos(now_nanos) == 0;
                // Only contention ends as "still held"; a throttled caller's refusal stands.
                spent.then_some(if verdict == RetryVerdict::Backoff {
                    Next::Contended
                } else {
                    Next::Fail
                })
            }
        };
        let next = stop.unwrap_or_else(|| {
            let jitter = backoff::full_jitter(
                self.policy.base,
                self.policy.cap,
                self.attempts.saturating_sub(1),
                rng,
            );
            Next::Retry(jitter.min(Duration::from_nanos(self.remaining_nanos(now_nanos))))
        });
        AfterFailure { rotate, next }
    }
}

/// How `acquire` waits under contention: full-jitter exponential backoff within a budget.
/// The defaults are assumptions recorded in the task ledger (`tasks/README.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquirePolicy {
    /// Total time `acquire` may spend, measured on the SDK's `Clock`.
    pub budget: Duration,
    /// Backoff base: attempt `n` sleeps uniformly in `[0, min(cap, base · 2^n)]`.
    pub base: Duration,
    /// Backoff cap.
    pub cap: Duration,
    /// Most attempts, whatever the budget says.
    pub max_attempts: u32,
}

impl AcquirePolicy {
    /// Try once; never wait.
    pub const TRY_ONCE: Self = Self {
        budget: Duration::ZERO,
        base: Duration::ZERO,
        cap: Duration::ZERO,
        max_attempts: 1,
    };

    /// The defaults (assumptions in the task ledger): budget 2 s, base 25 ms, cap 500 ms, at
    /// most 32 attempts.
    pub const DEFAULT: Self = Self {
        budget: Duration::from_secs(2),
        base: Duration::from_millis(25),
        cap: Duration::from_millis(500),
        max_attempts: 32,
    };
}

impl Default for AcquirePolicy {
    /// [`AcquirePolicy::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// Close to `u64::MAX`: the budget arithmetic crosses the wrap-around.
    const START: u64 = u64::MAX - 500 * MS;

    fn policy(budget_ms: u64, max_attempts: u32) -> AcquirePolicy {
        AcquirePolicy {
            budget: Duration::from_millis(budget_ms),
            base: Duration::from_millis(25),
            cap: Duration::from_millis(500),
            max_attempts,
        }
    }

    #[test]
    fn a_wait_credits_its_usable_part_and_at_most_what_the_client_measured() {
        let mut lp = AcquireLoop::new(&policy(2_000, 32), Duration::from_secs(5), START);
        let attempt = lp.attempt(START);
        let received = START.wrapping_add(50 * MS);
        assert_eq!(attempt.grant_basis_nanos(received, 0, 0.3), START);
        // 30 ms of the server's clock are at least 21 ms of a clock slow by under the margin.
        assert_eq!(
            attempt.grant_basis_nanos(received, 30, 0.3),
            START.wrapping_add(21 * MS)
        );
        // Claims beyond the measured round trip are cut to it.
        assert_eq!(attempt.grant_basis_nanos(received, 80, 0.3), received);
        assert_eq!(attempt.grant_basis_nanos(received, u64::MAX, 0.3), received);
    }

    #[test]
    fn each_attempt_waits_what_is_left_of_the_budget_within_the_request_timeout() {
        let mut lp = AcquireLoop::new(&policy(2_000, 32), Duration::from_secs(1), START);
        assert_eq!(
            lp.attempt(START).wait_ms(),
            Some(750),
            "timeout − reply margin"
        );
        let late = START.wrapping_add(1_600 * MS);
        assert_eq!(
            lp.attempt(late).wait_ms(),
            Some(400),
            "what the budget has left"
        );
        assert_eq!(lp.attempt(START.wrapping_add(2_000 * MS)).wait_ms(), None);
        assert_eq!(lp.attempts(), 3);
    }

    #[test]
    fn contention_backs_off_within_the_budget_then_stops_as_contended() {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut lp = AcquireLoop::new(&policy(2_000, 32), Duration::from_secs(1), START);
        let _ = lp.attempt(START);
        let near_end = START.wrapping_add(1_990 * MS);
        match lp.failed(near_end, RetryVerdict::Backoff, &mut rng) {
            AfterFailure {
                rotate: false,
                next: Next::Retry(sleep),
            } => assert!(
                sleep <= Duration::from_millis(10),
                "cut to the budget: {sleep:?}"
            ),
            other => panic!("{other:?}"),
        }
        let _ = lp.attempt(near_end);
        let spent = START.wrapping_add(2_000 * MS);
        assert_eq!(
            lp.failed(spent, RetryVerdict::Backoff, &mut rng).next,
            Next::Contended
        );
    }

    #[test]
    fn no_answer_rotates_and_a_spent_loop_fails_with_it_while_a_refusal_fails_at_once() {
        let mut rng = fastrand::Rng::with_seed(2);
        let mut lp = AcquireLoop::new(&policy(2_000, 2), Duration::from_secs(1), START);
        let _ = lp.attempt(START);
        let after = lp.failed(START, RetryVerdict::NextTick, &mut rng);
        assert!(
            after.rotate && matches!(after.next, Next::Retry(_)),
            "{after:?}"
        );
        let _ = lp.attempt(START);
        assert_eq!(
            lp.failed(START, RetryVerdict::NextTick, &mut rng),
            AfterFailure {
                rotate: true,
                next: Next::Fail
            },
            "max attempts: the last error is the answer"
        );
        assert!(lp.ended_unanswered(), "given up on an unanswered attempt");
        let mut lp = AcquireLoop::new(&policy(2_000, 32), Duration::from_secs(1), START);
        let _ = lp.attempt(START);
        let _ = lp.failed(START, RetryVerdict::NextTick, &mut rng);
        let _ = lp.attempt(START);
        assert_eq!(
            lp.failed(START, RetryVerdict::Never, &mut rng).next,
            Next::Fail
        );
        assert!(
            !lp.ended_unanswered(),
            "a refusal after an unanswered attempt answers for both (the same session)"
        );
    }

    #[test]
    fn a_throttled_caller_backs_off_on_the_same_replica_and_ends_with_the_refusal() {
        let mut rng = fastrand::Rng::with_seed(4);
        let mut lp = AcquireLoop::new(&policy(2_000, 32), Duration::from_secs(1), START);
        let _ = lp.attempt(START);
        let after = lp.failed(START, RetryVerdict::Throttled, &mut rng);
        assert!(
            !after.rotate && matches!(after.next, Next::Retry(_)),
            "{after:?}"
        );
        let _ = lp.attempt(START);
        let spent = START.wrapping_add(2_000 * MS);
        assert_eq!(
            lp.failed(spent, RetryVerdict::Throttled, &mut rng).next,
            Next::Fail,
            "over its rate is not 'still held'"
        );
        let mut slept = Duration::ZERO;
        for n in 0..OPEN_THROTTLED_RETRIES_MAX {
            let sleep = throttled_open_retry(RetryVerdict::Throttled, n, &mut rng).unwrap();
            assert!(
                sleep <= Duration::from_millis(OPEN_THROTTLED_CAP_MS),
                "{sleep:?}"
            );
            slept += sleep;
        }
        assert!(slept >= Duration::from_millis(1_500), "{slept:?}");
        assert_eq!(
            throttled_open_retry(
                RetryVerdict::Throttled,
                OPEN_THROTTLED_RETRIES_MAX,
                &mut rng
            ),
            None
        );
        assert_eq!(
            throttled_open_retry(RetryVerdict::NextTick, 0, &mut rng),
            None
        );
        assert_eq!(
            throttled_open_retry(RetryVerdict::Backoff, 0, &mut rng),
            None
        );
    }

    #[test]
    fn a_try_once_policy_never_sleeps() {
        let mut rng = fastrand::Rng::with_seed(3);
        let mut lp = AcquireLoop::new(&AcquirePolicy::TRY_ONCE, Duration::from_secs(1), START);
        assert_eq!(lp.attempt(START).wait_ms(), None);
        assert_eq!(
            lp.failed(START, RetryVerdict::Backoff, &mut rng).next,
            Next::Contended
        );
    }

    #[test]
    fn session_codes_lose_the_session_and_unserving_replicas_rotate() {
        assert_eq!(
            session_loss(ErrorCode::SessionUnknown),
            Some(LossReason::SessionUnknown)
        );
        assert_eq!(
            session_loss(ErrorCode::SessionExpired),
            Some(LossReason::SessionExpired)
        );
        assert_eq!(session_loss(ErrorCode::LockHeld), None);
        assert!(rotates(None) && rotates(Some(ErrorCode::NotLeader)));
        assert!(rotates(Some(ErrorCode::StoreUnavailable)));
        assert!(!rotates(Some(ErrorCode::LockHeld)) && !rotates(Some(ErrorCode::LockLost)));
    }
}
