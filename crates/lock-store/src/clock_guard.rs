//! The store-clock guard: decides, from readings of the store's clock against this
//! replica's monotonic clock, whether the store's clock stepped, and so whether a grant may
//! be answered.
//!
//! Why: PostgreSQL's `now()` is the database host's wall clock. A forward step of S ends
//! every lease and session S early by the store's judgement while each holder still holds by
//! its own monotonic deadline; the store then grants the key again and two clients believe
//! they hold it (ADR 0001). A backward step lengthens the leases already granted, but a lease
//! granted while the clock is back ends early when it returns, and a replica that took no
//! reading in between sees nothing of either step (the simulation found it: another replica
//! granted in the back frame, this one granted over it after the return). Rates are covered
//! by the SDK's margin; steps are what this catches.
//!
//! How: each reading brackets the store's clock between the replica's monotonic instants
//! `sent` and `received`, so `store − sent` is an upper bound of the clock offset. The guard
//! keeps the tightest such bound, aged by [`DRIFT_PPM`] for rate differences; a reading more
//! than [`STEP_TOLERANCE_NANOS`] ahead of `bound + received` is a forward step. A replica
//! with no reading yet compares the store's clock with its own host's wall clock instead
//! ([`START_TOLERANCE_NANOS`]): a step before it started is otherwise invisible to it.
//!
//! After a step the replica answers no grant for `hold_nanos` (the longest lease): a grant
//! made before the step has ended by its holder's own clock by then, and renewals are safe
//! throughout (a renewal after the step counts its lease from the stepped clock). The grant
//! that revealed the step is withheld: its session never learns it holds the key.
//!
//! A reading whose own bound lies more than the tolerance below the bound is a backward
//! step: no grant is answered while the clock stays back (the bound is kept), so no lease is
//! granted in a frame a return would cut. If the clock returns, that is a step (hold as
//! above: another replica may have granted in the back frame); if it stays back for the
//! hold, the back frame becomes the one watched and grants resume (a later return is then a
//! forward step like any other).
//!
//! Pure: time comes in as numbers, so lock-server's store wrapper and the simulation's
//! replicas drive the same decisions.

/// A reading may run this far ahead of the bound before it counts as a step. The bound
/// already allows the call's whole round trip; this covers rounding (PostgreSQL's clock has
/// microseconds) and stays well inside the smallest lease's margin.
pub const STEP_TOLERANCE_NANOS: u64 = 20_000_000;

/// The rate difference allowed between the store's clock and the replica's monotonic clock
/// (parts per million). NTP slews at most 500 ppm; a disciplined clock is within 100.
pub const DRIFT_PPM: u64 = 1_000;

/// A replica's first reading may run this far ahead of its own host's wall clock (hosts on
/// NTP agree within milliseconds). Further ahead, the store's clock may have stepped before
/// this replica started, and it holds grants as after a step.
pub const START_TOLERANCE_NANOS: u64 = 1_000_000_000;

/// One reading of the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReading {
    /// The store's clock, nanoseconds since the Unix epoch.
    pub store_nanos: i128,
    /// The replica's monotonic clock when the call that read it was sent.
    pub sent_nanos: u64,
    /// The replica's monotonic clock when its answer arrived.
    pub received_nanos: u64,
    /// The replica host's wall clock at `received_nanos`, nanoseconds since the Unix epoch.
    pub wall_nanos: i128,
}

/// What a reading showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The store's clock is where this replica expects it.
    Agrees,
    /// The store's clock is `behind_nanos` behind where it was: grants are held while it
    /// stays back (at most the hold).
    Behind {
        /// How far below the bound the reading's own bound was.
        behind_nanos: u64,
    },
    /// The store's clock ran ahead of every expectation by `ahead_nanos`: grants are held
    /// for the guard's hold from now.
    Stepped {
        /// How far ahead of the bound the reading was.
        ahead_nanos: u64,
        /// Whether this was the replica's first reading (compared with its host's wall clock).
        at_start: bool,
    },
}

/// The upper bound of (store clock − monotonic clock) and the monotonic instant it holds at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bound {
    offset_nanos: i128,
    at_nanos: u64,
    /// The round trip of the reading it came from: the offset was at most this much lower.
    slack_nanos: u64,
}

impl Bound {
    /// The bound at a later instant: it may have grown by the allowed drift meanwhile.
    fn at(self, nanos: u64) -> i128 {
        self.offset_nanos + self.drift(nanos)
    }

    /// The lowest the offset the bound was taken from may have drifted to by a later instant
    /// (the reading was taken anywhere inside its round trip).
    fn lowest_at(self, nanos: u64) -> i128 {
        self.offset_nanos - i128::from(self.slack_nanos) - self.drift(nanos)
    }

    fn drift(self, nanos: u64) -> i128 {
        let elapsed = nanos.saturating_sub(self.at_nanos);
        i128::from(elapsed) * i128::from(DRIFT_PPM) / 1_000_000
    }
}

/// A backward step in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Back {
    since_nanos: u64,
    most_nanos: u64,
    bound: Bound,
}

/// One replica's guard. See the module documentation.
#[derive(Debug, Clone)]
pub struct ClockGuard {
    hold_nanos: u64,
    bound: Option<Bound>,
    held_until_nanos: Option<u64>,
    /// The backward step in effect: since when, by how much at most, and the back frame's
    /// own bound (a reading ahead of it is a return, even one still behind `bound`).
    back: Option<Back>,
    back_reported: bool,
    steps: u64,
}

impl ClockGuard {
    /// A guard that holds grants for `hold_nanos` after a step (the longest lease).
    pub fn new(hold_nanos: u64) -> Self {
        Self {
            hold_nanos,
            bound: None,
            held_until_nanos: None,
            back: None,
            back_reported: false,
            steps: 0,
        }
    }

    /// Nanoseconds until grants may be answered again, if they are held at `now_nanos` (while
    /// the clock is back: until the back frame would be adopted, the longest it can take).
    pub fn held_for(&self, now_nanos: u64) -> Option<u64> {
        let back_until = self
            .back
            .map(|back| back.since_nanos.saturating_add(self.hold_nanos));
        self.held_until_nanos
            .max(back_until)
            .filter(|&until| until > now_nanos)
            .map(|until| until - now_nanos)
    }

    /// The longest a store-clock instant `store_nanos` may lie before `now_nanos` on this
    /// replica's monotonic clock: an event the store stamped `s` happened at or after
    /// `s − bound`, the bound being an upper bound of (store clock − monotonic clock), plus
    /// the drift allowance over that age (the event may predate the bound's reading, when the
    /// offset may have been larger by that much). `None` before the first reading.
    pub fn at_most_ago(&self, store_nanos: i128, now_nanos: u64) -> Option<u64> {
        let bound = self.bound?;
        let age = bound.at(now_nanos) + i128::from(now_nanos) - store_nanos;
        let age = age + age.max(0) * i128::from(DRIFT_PPM) / 1_000_000;
        Some(u64::try_from(age).unwrap_or(0))
    }

    /// Whether the backward step in effect was reported already (true from its second
    /// reading on): one log line a step, however long the clock stays back.
    pub fn reported_back(&mut self) -> bool {
        self.back.is_none() || std::mem::replace(&mut self.back_reported, true)
    }

    /// Steps seen so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Takes one reading: updates the bound and, on a step, holds grants.
    pub fn observe(&mut self, reading: ClockReading) -> Verdict {
        assert!(
            reading.sent_nanos <= reading.received_nanos,
            "a call is answered after it is sent"
        );
        let candidate = Bound {
            offset_nanos: reading.store_nanos - i128::from(reading.sent_nanos),
            at_nanos: reading.sent_nanos,
            slack_nanos: reading.received_nanos - reading.sent_nanos,
        };
        self.judge(reading, Some(candidate))
    }

    /// Judges a store time known only to lie before `received_nanos`, with no call's send
    /// bracketing it (a hand-over's start: the grant may predate the parked request's last
    /// call, its notice having arrived after that call was sent). It is held against the
    /// bound like any reading but never tightens it: a start older than the call would
    /// tighten the bound by the difference, and the next true reading would look like a step.
    pub fn judge_unbracketed(
        &mut self,
        store_nanos: i128,
        received_nanos: u64,
        wall_nanos: i128,
    ) -> Verdict {
        let reading = ClockReading {
            store_nanos,
            sent_nanos: received_nanos,
            received_nanos,
            wall_nanos,
        };
        self.judge(reading, None)
    }

    /// Judges `reading` (with its own bound, `candidate`, when a call brackets it), asserting
    /// what every verdict promises: a step or a backward step holds grants from the instant it
    /// is seen, and short of a forward step the bound never loosens (a loose bound would let a
    /// grant be answered that the store's clock has already ended).
    fn judge(&mut self, reading: ClockReading, candidate: Option<Bound>) -> Verdict {
        let bound_before = self.bound;
        let at = reading.received_nanos;
        let verdict = self.judge_reading(reading, candidate);
        debug_assert!(
            matches!(verdict, Verdict::Agrees)
                || self.hold_nanos == 0
                || self.held_for(at).is_some(),
            "{verdict:?} at {at} holds no grant"
        );
        if let (Some(before), Some(after)) = (bound_before, self.bound) {
            debug_assert!(
                matches!(verdict, Verdict::Stepped { .. }) || after.at(at) <= before.at(at) + 1,
                "{verdict:?} loosened the bound from {before:?} to {after:?}"
            );
        }
        verdict
    }

    fn judge_reading(&mut self, reading: ClockReading, candidate: Option<Bound>) -> Verdict {
        let (ahead, at_start) = match self.bound {
            None => (reading.store_nanos - reading.wall_nanos, true),
            Some(bound) => (
                reading.store_nanos
                    - (bound.at(reading.received_nanos) + i128::from(reading.received_nanos)),
                false,
            ),
        };
        let tolerance = if at_start {
            START_TOLERANCE_NANOS
        } else {
            STEP_TOLERANCE_NANOS
        };
        let stepped = ahead > i128::from(tolerance);
        // How far the reading's own bound lies below the lowest the offset could have drifted
        // to (a backward step), if it does.
        let behind = match (self.bound, candidate) {
            (Some(bound), Some(candidate)) if !stepped => {
                let below = bound.lowest_at(candidate.at_nanos) - candidate.offset_nanos;
                (below > i128::from(STEP_TOLERANCE_NANOS))
                    .then(|| u64::try_from(below).unwrap_or(u64::MAX))
            }
            _ => None,
        };
        if let (Some(behind_nanos), Some(candidate)) = (behind, candidate) {
            let Some(mut back) = self.back else {
                self.steps += 1;
                self.back_reported = false;
                self.back = Some(Back {
                    since_nanos: reading.received_nanos,
                    most_nanos: behind_nanos,
                    bound: candidate,
                });
                return Verdict::Behind { behind_nanos };
            };
            let ahead_of_back = reading.store_nanos
                - (back.bound.at(reading.received_nanos) + i128::from(reading.received_nanos));
            if ahead_of_back > i128::from(STEP_TOLERANCE_NANOS) {
                // Forward again, though not all the way: the back frame's leases were cut.
                // A step; what is left of the backward step starts again from here.
                self.steps += 1;
                let until = reading.received_nanos.saturating_add(self.hold_nanos);
                self.held_until_nanos = Some(self.held_until_nanos.map_or(until, |u| u.max(until)));
                self.back = Some(Back {
                    since_nanos: reading.received_nanos,
                    most_nanos: behind_nanos,
                    bound: candidate,
                });
                return Verdict::Stepped {
                    ahead_nanos: u64::try_from(ahead_of_back).unwrap_or(u64::MAX),
                    at_start: false,
                };
            }
            if back.bound.at(candidate.at_nanos) > candidate.offset_nanos {
                back.bound = candidate;
            }
            back.most_nanos = back.most_nanos.max(behind_nanos);
            if reading.received_nanos.saturating_sub(back.since_nanos) < self.hold_nanos {
                self.back = Some(back);
                return Verdict::Behind { behind_nanos };
            }
            // Back, and still, for the whole hold: any grant made before the step has ended;
            // the back frame is the one watched from now on.
            self.back = None;
            self.bound = Some(back.bound);
            return Verdict::Agrees;
        }
        // The clock came back from a backward step (or stepped forward past it): another
        // replica may have granted in the back frame, and the return cut those leases.
        let returned = (!stepped).then_some(self.back.take()).flatten();
        if let Some(candidate) = candidate {
            self.bound = match self.bound {
                // A step resets the bound: the stepped clock is the one to watch from now on.
                Some(bound)
                    if !stepped && bound.at(candidate.at_nanos) <= candidate.offset_nanos =>
                {
                    Some(bound)
                }
                _ => Some(candidate),
            };
        }
        let ahead_nanos = match (stepped, returned) {
            (true, _) => {
                self.back = None;
                u64::try_from(ahead).unwrap_or(u64::MAX)
            }
            (false, Some(back)) => back.most_nanos,
            (false, None) => return Verdict::Agrees,
        };
        self.steps += 1;
        let until = reading.received_nanos.saturating_add(self.hold_nanos);
        self.held_until_nanos = Some(self.held_until_nanos.map_or(until, |u| u.max(until)));
        Verdict::Stepped {
            ahead_nanos,
            at_start,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;
    /// The store's clock at the replica's monotonic zero.
    const EPOCH: i128 = 1_800_000_000 * S as i128;

    /// A reading taken `rtt_ms` after `sent`, the store's clock `offset_ms` from true time
    /// (read halfway), the replica host's wall clock true.
    fn reading(sent: u64, rtt_ms: u64, offset_ms: i64) -> ClockReading {
        let read_at = sent + rtt_ms * MS / 2;
        ClockReading {
            store_nanos: EPOCH + i128::from(read_at) + i128::from(offset_ms) * i128::from(MS),
            sent_nanos: sent,
            received_nanos: sent + rtt_ms * MS,
            wall_nanos: EPOCH + i128::from(sent + rtt_ms * MS),
        }
    }

    #[test]
    fn a_forward_step_past_the_tolerance_holds_grants_for_the_hold() {
        let mut guard = ClockGuard::new(60 * S);
        assert_eq!(guard.observe(reading(0, 2, 0)), Verdict::Agrees);
        // Slow answers, readings anywhere inside them, drift within the allowance: agree.
        assert_eq!(guard.observe(reading(S, 900, 0)), Verdict::Agrees);
        assert_eq!(guard.observe(reading(10 * S, 1, 5)), Verdict::Agrees);
        let verdict = guard.observe(reading(12 * S, 1, 30_000));
        assert!(
            matches!(verdict, Verdict::Stepped { ahead_nanos, at_start: false } if ahead_nanos > 29 * S),
            "{verdict:?}"
        );
        assert_eq!(guard.held_for(12 * S + MS), Some(60 * S));
        assert_eq!(guard.held_for(72 * S + MS), None, "the hold ends");
        assert_eq!(guard.steps(), 1);
        // After the step, the stepped clock is the one watched: no second alarm.
        assert_eq!(guard.observe(reading(13 * S, 1, 30_000)), Verdict::Agrees);
    }

    #[test]
    fn a_backward_step_holds_grants_while_it_lasts_and_its_return_is_a_step() {
        let mut guard = ClockGuard::new(60 * S);
        assert_eq!(guard.observe(reading(0, 2, 0)), Verdict::Agrees);
        // Back 2.5 s: no grant in a frame a return would cut.
        let verdict = guard.observe(reading(S, 1, -2_500));
        assert!(
            matches!(verdict, Verdict::Behind { behind_nanos } if behind_nanos > 2 * S),
            "{verdict:?}"
        );
        assert!(guard.held_for(S + 2 * MS).is_some());
        assert!(
            !guard.reported_back(),
            "the first reading of a step is reported"
        );
        assert!(guard.reported_back(), "and only the first");
        assert!(matches!(
            guard.observe(reading(2 * S, 1, -2_500)),
            Verdict::Behind { .. }
        ));
        // Back where it was: another replica may have granted in the back frame, and the
        // return cut those leases. A step: hold.
        let verdict = guard.observe(reading(3 * S, 1, 0));
        assert!(
            matches!(verdict, Verdict::Stepped { ahead_nanos, at_start: false } if ahead_nanos > 2 * S),
            "{verdict:?}"
        );
        assert_eq!(guard.held_for(3 * S + MS), Some(60 * S));
        assert_eq!(guard.steps(), 2);
        // Back for the whole hold: the back frame is adopted and grants resume.
        let mut stays = ClockGuard::new(10 * S);
        assert_eq!(stays.observe(reading(0, 2, 0)), Verdict::Agrees);
        assert!(matches!(
            stays.observe(reading(S, 1, -2_500)),
            Verdict::Behind { .. }
        ));
        assert!(matches!(
            stays.observe(reading(5 * S, 1, -2_500)),
            Verdict::Behind { .. }
        ));
        assert_eq!(stays.observe(reading(12 * S, 1, -2_500)), Verdict::Agrees);
        assert_eq!(stays.held_for(12 * S + MS), None);
        assert_eq!(stays.observe(reading(13 * S, 1, -2_500)), Verdict::Agrees);
        // A later return is a forward step of the adopted frame.
        assert!(matches!(
            stays.observe(reading(14 * S, 1, 0)),
            Verdict::Stepped { .. }
        ));
    }

    #[test]
    fn a_step_just_past_the_tolerance_is_seen_and_one_just_inside_is_not() {
        let tolerance_ms = i64::try_from(STEP_TOLERANCE_NANOS / MS).unwrap();
        let mut guard = ClockGuard::new(S);
        guard.observe(reading(0, 0, 0));
        assert_eq!(
            guard.observe(reading(MS, 0, tolerance_ms - 1)),
            Verdict::Agrees
        );
        let mut guard = ClockGuard::new(S);
        guard.observe(reading(0, 0, 0));
        assert!(matches!(
            guard.observe(reading(MS, 0, tolerance_ms + 1)),
            Verdict::Stepped { .. }
        ));
    }

    #[test]
    fn the_bound_keeps_the_tightest_reading_and_allows_only_the_drift_over_time() {
        let mut guard = ClockGuard::new(S);
        guard.observe(reading(0, 1, 0));
        // A loose reading (a 2 s round trip) must not loosen the bound: a 1 s step right
        // after it is still seen.
        assert_eq!(guard.observe(reading(S, 2_000, 0)), Verdict::Agrees);
        assert!(matches!(
            guard.observe(reading(4 * S, 1, 1_000)),
            Verdict::Stepped { .. }
        ));
        // A clock gaining 500 ppm over an hour stays within the allowance.
        let mut guard = ClockGuard::new(S);
        guard.observe(reading(0, 1, 0));
        assert_eq!(guard.observe(reading(3_600 * S, 1, 1_800)), Verdict::Agrees);
    }

    #[test]
    fn a_first_reading_ahead_of_the_hosts_wall_clock_holds_and_a_close_one_does_not() {
        let mut guard = ClockGuard::new(10 * S);
        assert_eq!(guard.observe(reading(0, 1, 300)), Verdict::Agrees);
        let mut guard = ClockGuard::new(10 * S);
        let verdict = guard.observe(reading(0, 1, 5_000));
        assert!(
            matches!(verdict, Verdict::Stepped { at_start: true, .. }),
            "{verdict:?}"
        );
        assert_eq!(guard.held_for(S), Some(9 * S + MS));
    }

    #[test]
    fn a_hand_over_older_than_the_last_call_is_judged_but_never_tightens_the_bound() {
        let mut guard = ClockGuard::new(60 * S);
        assert_eq!(guard.observe(reading(0, 2, 0)), Verdict::Agrees);
        // A grant handed over 200 ms before the parked request's last call was sent, its
        // notice arriving after: the store time is old, and harmless.
        let sent = 5 * S;
        let handed_at = EPOCH + i128::from(sent - 200 * MS);
        let wall = EPOCH + i128::from(sent + MS);
        assert_eq!(
            guard.judge_unbracketed(handed_at, sent + MS, wall),
            Verdict::Agrees
        );
        // Had it bracketed that call, the bound would sit 200 ms tight and this true
        // reading would count as a step.
        assert_eq!(guard.observe(reading(6 * S, 2, 0)), Verdict::Agrees);
        assert_eq!(guard.steps(), 0);
        let mut bracketed = guard.clone();
        let as_if_sent = ClockReading {
            store_nanos: handed_at,
            sent_nanos: 7 * S,
            received_nanos: 7 * S + MS,
            wall_nanos: wall,
        };
        assert!(matches!(
            bracketed.observe(as_if_sent),
            Verdict::Behind { .. }
        ));
        assert!(matches!(
            bracketed.observe(reading(8 * S, 2, 0)),
            Verdict::Stepped { .. }
        ));
        // A hand-over that did start past the bound is a step.
        let ahead = EPOCH + i128::from(9 * S) + i128::from(500 * MS);
        assert!(matches!(
            guard.judge_unbracketed(ahead, 9 * S, EPOCH + i128::from(9 * S)),
            Verdict::Stepped { ahead_nanos, at_start: false } if ahead_nanos > 400 * MS
        ));
    }

    #[test]
    fn the_age_of_a_store_instant_is_bounded_by_the_tightest_reading_and_the_drift() {
        let mut guard = ClockGuard::new(60 * S);
        assert_eq!(guard.at_most_ago(EPOCH, S), None, "no reading, no bound");
        // Read halfway through a 2 ms call: the bound is 1 ms above the true offset.
        assert_eq!(guard.observe(reading(0, 2, 0)), Verdict::Agrees);
        // A store instant 300 ms before a second later: at most 300 ms, the reading's 1 ms,
        // a second's drift allowance (1 ms) and the allowance over that age (0.302 ms) ago.
        let stamped = EPOCH + i128::from(700 * MS);
        assert_eq!(guard.at_most_ago(stamped, S), Some(302 * MS + 302_000));
        // Never less than it truly was; an instant after now is no age at all.
        assert!(guard.at_most_ago(stamped, S).unwrap() >= 300 * MS);
        assert_eq!(guard.at_most_ago(EPOCH + i128::from(2 * S), S), Some(0));
    }

    #[test]
    fn a_loose_reading_then_a_tight_one_is_no_backward_step() {
        let mut guard = ClockGuard::new(60 * S);
        // The first answer took 300 ms, the store read at its very end; the next took 1 ms.
        let loose = ClockReading {
            store_nanos: EPOCH + i128::from(300 * MS),
            sent_nanos: 0,
            received_nanos: 300 * MS,
            wall_nanos: EPOCH + i128::from(300 * MS),
        };
        assert_eq!(guard.observe(loose), Verdict::Agrees);
        let first = ClockReading {
            store_nanos: EPOCH,
            sent_nanos: 0,
            received_nanos: 300 * MS,
            wall_nanos: EPOCH + i128::from(300 * MS),
        };
        let mut early = ClockGuard::new(60 * S);
        assert_eq!(early.observe(first), Verdict::Agrees);
        // Read at the start of its round trip instead: the bound sits 300 ms loose, and a
        // tight reading 300 ms below it only tightens it.
        assert_eq!(early.observe(reading(S, 1, -1)), Verdict::Agrees);
        assert_eq!(guard.observe(reading(S, 1, 0)), Verdict::Agrees);
        assert_eq!(early.steps() + guard.steps(), 0);
    }
}
