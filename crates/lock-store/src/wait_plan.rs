//! The decisions of one waiting acquire, sans-IO: how long each queued store call keeps the
//! request's queue place, what `waited_ms` a grant reports, how long to nap before asking the
//! store again. lock-server's `waiting::acquire_waiting` drives it on tokio's clock; the
//! simulation drives the same plan on virtual time.

use std::time::Duration;

use crate::AcquireOutcome;

/// Longest a parked request sleeps without asking the store again: what a lost wake-up (a
/// listener reconnecting, a crashed replica's stale queue place) can cost at most.
pub const WAIT_RECHECK_MS: u64 = 1_000;
/// How long a queue place outlives its request's deadline, so that the last try at the
/// deadline still finds it; a place whose replica crashed lapses this soon after.
pub const QUEUE_PLACE_SLACK_MS: u64 = 1_000;

/// The decisions of one waiting acquire, sans-IO, on the replica's monotonic clock in nanoseconds:
/// how long each queued store call keeps the request's queue place, what `waited_ms` a grant
/// reports, and how long to nap before asking the store again. lock-server's `acquire_waiting` drives
/// it on tokio's clock; the simulation drives the same plan on virtual time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPlan {
    started_nanos: u64,
    deadline_nanos: u64,
}

/// What a waiting acquire does after a store call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStep {
    /// Answer the outcome, reporting this `waited_ms` (granted, or the wait is over: then
    /// leave the queue first).
    Answer {
        /// The time the request was held before its grant began (before the store call that
        /// answered it, or before a hand-over).
        waited_ms: u64,
        /// The wait is over without a grant: give up the queue place, then ask once more
        /// without one (a hand-over may have granted the key between the refusal and the
        /// leave; that try finds the grant) and answer what it says.
        leave: bool,
    },
    /// Park, and ask again after this long at the latest (sooner when woken).
    Nap(Duration),
}

impl WaitPlan {
    /// A wait of `wait_ms` for a request that arrived at `now_nanos`.
    pub fn new(now_nanos: u64, wait_ms: u64) -> Self {
        Self {
            started_nanos: now_nanos,
            deadline_nanos: now_nanos.saturating_add(wait_ms.saturating_mul(1_000_000)),
        }
    }

    /// What is left of the wait at `now_nanos`.
    pub fn remaining(&self, now_nanos: u64) -> Duration {
        Duration::from_nanos(self.deadline_nanos.saturating_sub(now_nanos))
    }

    /// The `queue_ms` of a store call made at `now_nanos`: the place outlives the wait by
    /// [`QUEUE_PLACE_SLACK_MS`], so the last try at the deadline still finds it.
    pub fn queue_ms(&self, now_nanos: u64) -> u64 {
        let remaining_ms = u64::try_from(self.remaining(now_nanos).as_millis()).unwrap_or(u64::MAX);
        remaining_ms.saturating_add(QUEUE_PLACE_SLACK_MS)
    }

    /// After a store call made at `called_nanos` answered `outcome`: answer (with the time
    /// the request waited before that call: the grant began after it), or nap until the
    /// store's hint, the recheck bound or the deadline, whichever comes first.
    pub fn after(&self, called_nanos: u64, outcome: &AcquireOutcome) -> WaitStep {
        let waited_ms = self.granted_by_call_at(called_nanos);
        // A grant began after the call that made it: the wait credited ends at that call.
        debug_assert!(
            waited_ms.saturating_mul(1_000_000) <= called_nanos.saturating_sub(self.started_nanos),
            "{waited_ms} ms credited for a call made {} ns into the wait",
            called_nanos.saturating_sub(self.started_nanos)
        );
        let remaining = self.remaining(called_nanos);
        let refusal = match outcome {
            AcquireOutcome::Refused(refusal) if !remaining.is_zero() => refusal,
            AcquireOutcome::Refused(_) => {
                return WaitStep::Answer {
                    waited_ms,
                    leave: true,
                };
            }
            AcquireOutcome::Granted { .. } => {
                return WaitStep::Answer {
                    waited_ms,
                    leave: false,
                };
            }
        };
        let hint_ms = refusal
            .recheck_in_ms()
            .map_or(WAIT_RECHECK_MS, |ms| ms.saturating_add(1));
        WaitStep::Nap(Duration::from_millis(hint_ms.min(WAIT_RECHECK_MS)).min(remaining))
    }
}

impl WaitPlan {
    /// The `waited_ms` to answer a grant handed over while the request was parked, its last
    /// store call (made at `last_called_nanos`) having been refused; `None`: do not answer it,
    /// ask the store again (which answers the grant afresh if it still stands).
    ///
    /// Normally the hand-over took the queue place that call renewed, so the grant began after
    /// the store saw the call, and `place_age_ms` later on the store's clock: the credit is the
    /// time before the call plus that age (crediting only the time before the call would be
    /// safe too, but a wait longer than the lease would then answer a grant whose deadline has
    /// passed). A notice can arrive late, though, carrying a grant made before that call, even
    /// before the request (a place an earlier request left): so the credit is also capped by
    /// the grant's start as the replica's clock guard proves it, `ran_at_most_nanos` before
    /// `now_nanos` at the longest, and a grant that may have begun before the request arrived,
    /// or whose start the guard cannot bound, is not answered. Never more than the request was
    /// held before its grant began (I4).
    pub fn handed_over(
        &self,
        last_called_nanos: u64,
        place_age_ms: u64,
        now_nanos: u64,
        ran_at_most_nanos: Option<u64>,
    ) -> Option<u64> {
        let began_after_nanos = now_nanos.checked_sub(ran_at_most_nanos?)?;
        let provable_ms = began_after_nanos.checked_sub(self.started_nanos)? / 1_000_000;
        let claimed_ms = self
            .granted_by_call_at(last_called_nanos)
            .saturating_add(place_age_ms);
        let waited_ms = claimed_ms.min(provable_ms);
        // Never more than the wait the replica can prove began before the grant did.
        debug_assert!(
            waited_ms.saturating_mul(1_000_000)
                <= began_after_nanos.saturating_sub(self.started_nanos),
            "a hand-over credited {waited_ms} ms, more than the grant can have waited"
        );
        Some(waited_ms)
    }

    /// The `waited_ms` of a grant answered by a store call made at `called_nanos`: the time
    /// before the call (the grant began after it).
    pub fn granted_by_call_at(&self, called_nanos: u64) -> u64 {
        called_nanos.saturating_sub(self.started_nanos) / 1_000_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Refusal;

    #[test]
    fn a_wait_plan_answers_a_grant_with_the_time_before_its_call_and_naps_until_hint_or_deadline() {
        const MS: u64 = 1_000_000;
        let plan = WaitPlan::new(10 * MS, 300);
        assert_eq!(plan.queue_ms(10 * MS), 300 + QUEUE_PLACE_SLACK_MS);
        let held = AcquireOutcome::Refused(Refusal::Held {
            holder_token: lock_api::FencingToken(1),
            free_in_ms: 40,
        });
        assert_eq!(
            plan.after(20 * MS, &held),
            WaitStep::Nap(Duration::from_millis(41)),
            "the holder's expiry, and a millisecond"
        );
        let queued = AcquireOutcome::Refused(Refusal::Queued { ahead: 1 });
        assert_eq!(
            plan.after(200 * MS, &queued),
            WaitStep::Nap(Duration::from_millis(110)),
            "no hint: the recheck bound, cut to the deadline"
        );
        assert_eq!(
            plan.after(310 * MS, &queued),
            WaitStep::Answer {
                waited_ms: 300,
                leave: true
            },
            "the deadline: leave the queue and answer"
        );
    }

    #[test]
    fn a_handed_over_grant_credits_the_time_before_the_last_call_and_the_place_age() {
        const MS: u64 = 1_000_000;
        let plan = WaitPlan::new(10 * MS, 5_000);
        // Began 1 160 ms after the request by the guard's bound: the claim stands.
        assert_eq!(
            plan.handed_over(910 * MS, 250, 1_200 * MS, Some(30 * MS)),
            Some(1_150)
        );
    }

    #[test]
    fn a_late_notice_is_credited_only_what_the_clock_guard_proves_and_an_older_grant_not_at_all() {
        const MS: u64 = 1_000_000;
        let plan = WaitPlan::new(10 * MS, 5_000);
        // The notice of a grant made 400 ms before the last call arrived after it: the guard
        // says it ran up to 700 ms by now, so it began 590 ms after the request at the earliest.
        assert_eq!(
            plan.handed_over(910 * MS, 250, 1_300 * MS, Some(700 * MS)),
            Some(590)
        );
        // A grant that may predate the request, or one the guard cannot bound: ask again.
        assert_eq!(
            plan.handed_over(910 * MS, 250, 1_300 * MS, Some(1_295 * MS)),
            None
        );
        assert_eq!(
            plan.handed_over(910 * MS, 250, 1_300 * MS, Some(5_000 * MS)),
            None
        );
        assert_eq!(plan.handed_over(910 * MS, 250, 1_300 * MS, None), None);
    }
}
