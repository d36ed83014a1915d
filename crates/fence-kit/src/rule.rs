//! The fence rule, as one pure function. A resource runs it where it writes, under its own
//! lock on the fenced row (payment-resource inside the writing transaction under
//! `SELECT … FOR UPDATE`; the simulation against its model of the resource); the SQL
//! function in [`crate::postgres`] is the same rule for writers that fence inside
//! PostgreSQL, tested against this one on one table of cases.
//!
//! The three promises: a claim takes a token at or above the fence and raises the fence to
//! it; every later write comes only from the grant that claimed last; a stale token is
//! refused before the resource says it has ended, so a zombie always learns it was fenced.
//!
//! A read/write lock's readers (ADR 0007) act with [`FenceRule::Shared`]: the fence is the
//! last writer's claim, and a reader passes only with a token above it, so a reader granted
//! before the current writer is refused; it never moves the fence. A semaphore's permit is
//! fenced per slot by the claim and holder rules, on the resource its proof's scope names
//! (`GrantScope::fenced_resource`).

use crate::error::FenceError;

/// Which tokens a fenced write accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceRule {
    /// Claim: a token above the fence, or the fence's own grant again; it then sets the
    /// fence to itself.
    Claim,
    /// Every later write: only the grant that claimed last (the current fence holder).
    Holder,
    /// A reader's action: a token above the fence (the last writer's claim); the fence
    /// stays where it is.
    Shared,
}

/// A fence, or a write's claim to one: a token and the grant it was issued to (the grant id
/// of its proof, as text). A resource never claimed has token 0 and no grant; a fence set
/// before grants were named has an empty grant, which any grant of its token matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantFence<'a> {
    /// The fencing token.
    pub token: i64,
    /// The grant id's text, empty when not known.
    pub grant: &'a str,
}

impl GrantFence<'_> {
    /// A resource never claimed.
    pub const UNCLAIMED: GrantFence<'static> = GrantFence {
        token: 0,
        grant: "",
    };

    /// Whether this write's grant is the one that set `fence`: its token, and its grant id
    /// unless the fence predates grant ids.
    fn set(&self, fence: &GrantFence<'_>) -> bool {
        self.token == fence.token && (fence.grant.is_empty() || self.grant == fence.grant)
    }

    /// Whether this is a grant a write may present: a proof always names its grant, and a
    /// claim without one would store an empty grant that every grant of its token matches.
    fn named(&self) -> bool {
        !self.grant.is_empty()
    }
}

/// Whether a resource has ended: a write that passes the fence is still refused when it has.
pub trait Lifecycle: Copy {
    /// Whether no write may change the resource any more.
    fn is_terminal(&self) -> bool;
}

/// The state of a resource that never ends (a key-value entry, a file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Open;

impl Lifecycle for Open {
    fn is_terminal(&self) -> bool {
        false
    }
}

/// Why a fenced write is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceRefusal<S = Open> {
    /// The token is not one the rule accepts (`FENCED_OUT`).
    FencedOut {
        /// The resource's fence.
        fence: i64,
    },
    /// The token passes, but the resource has ended in this state.
    Terminal(S),
}

/// Whether a write presenting `presented` may touch a resource whose fence is `fence` and
/// whose state is `state`, under `rule`. A token equal to the fence passes only as the grant
/// that set it: a token issued twice (a restored lock store) is two grants, and the second
/// is fenced out. After a [`FenceRule::Claim`] passes, the resource's fence is `presented`.
pub fn check_fence<S: Lifecycle>(
    rule: FenceRule,
    presented: GrantFence<'_>,
    fence: GrantFence<'_>,
    state: S,
) -> Result<(), FenceRefusal<S>> {
    let allowed = presented.named()
        && match rule {
            FenceRule::Claim => presented.token > fence.token || presented.set(&fence),
            FenceRule::Holder => presented.set(&fence),
            FenceRule::Shared => presented.token > fence.token,
        };
    if !allowed {
        return Err(FenceRefusal::FencedOut { fence: fence.token });
    }
    if state.is_terminal() {
        return Err(FenceRefusal::Terminal(state));
    }
    // A write let through is never a superseded holder's: never below the fence, and at the
    // fence only with the grant that set it.
    debug_assert!(
        presented.token > fence.token || (presented.token == fence.token && presented.set(&fence)),
        "a write with token {} let through a fence at {}",
        presented.token,
        fence.token
    );
    Ok(())
}

/// [`check_fence`] for a resource that never ends (a key-value entry, a file), refusing
/// with the typed `FENCED_OUT` a handler answers with.
pub fn check_open(
    rule: FenceRule,
    presented: GrantFence<'_>,
    fence: GrantFence<'_>,
) -> Result<(), FenceError> {
    // An open resource never ends: every refusal is the fence's.
    check_fence(rule, presented, fence, Open)
        .map_err(|_| FenceError::fenced_out(presented.token, fence.token))
}

/// One row of the rule's table: a rule, a presented grant and a fence, and whether the rule
/// lets the write through. The Rust rule and the SQL function are both tested on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// The write's rule.
    pub rule: FenceRule,
    /// What the write presents.
    pub presented: GrantFence<'static>,
    /// The resource's fence before the write.
    pub fence: GrantFence<'static>,
    /// Whether the write passes.
    pub passes: bool,
}

/// Every combination of rule, tokens 0..=3 and grants "", "a", "b" that a resource can meet
/// (a presented token is at least 1), with the verdict the rule gives, stated from the
/// promises (not by calling [`check_fence`]). A presented grant that is empty never passes:
/// the Rust rule refuses it as fenced out, the SQL function as an invalid argument.
pub fn cases() -> Vec<Case> {
    const GRANTS: [&str; 3] = ["", "a", "b"];
    let mut cases = Vec::new();
    for rule in [FenceRule::Claim, FenceRule::Holder, FenceRule::Shared] {
        for fence_token in 0..=3 {
            for fence_grant in GRANTS {
                if fence_token == 0 && !fence_grant.is_empty() {
                    continue; // an unclaimed resource has no grant
                }
                for token in 1..=3 {
                    for grant in GRANTS {
                        let same_grant = fence_grant.is_empty() || fence_grant == grant;
                        let passes = !grant.is_empty()
                            && match rule {
                                FenceRule::Claim => {
                                    token > fence_token || (token == fence_token && same_grant)
                                }
                                FenceRule::Holder => token == fence_token && same_grant,
                                FenceRule::Shared => token > fence_token,
                            };
                        cases.push(Case {
                            rule,
                            presented: GrantFence { token, grant },
                            fence: GrantFence {
                                token: fence_token,
                                grant: fence_grant,
                            },
                            passes,
                        });
                    }
                }
            }
        }
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(token: i64, grant: &str) -> GrantFence<'_> {
        GrantFence { token, grant }
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Ended;
    impl Lifecycle for Ended {
        fn is_terminal(&self) -> bool {
            true
        }
    }

    #[test]
    fn the_rule_gives_every_case_of_its_table() {
        let cases = cases();
        assert!(cases.len() > 100, "{}", cases.len());
        for case in cases {
            let got = check_fence(case.rule, case.presented, case.fence, Open).is_ok();
            assert_eq!(got, case.passes, "{case:?}");
        }
    }

    #[test]
    fn claim_takes_above_or_its_own_grant_later_writes_only_the_holder() {
        let fence = at(5, "g5");
        assert_eq!(
            check_fence(FenceRule::Claim, at(5, "g5"), fence, Open),
            Ok(())
        );
        assert_eq!(
            check_fence(FenceRule::Claim, at(6, "g6"), fence, Open),
            Ok(())
        );
        assert_eq!(
            check_fence(FenceRule::Claim, at(4, "g4"), fence, Open),
            Err(FenceRefusal::FencedOut { fence: 5 })
        );
        assert_eq!(
            check_fence(FenceRule::Holder, at(5, "g5"), fence, Open),
            Ok(())
        );
        assert_eq!(
            check_fence(FenceRule::Holder, at(6, "g6"), fence, Open),
            Err(FenceRefusal::FencedOut { fence: 5 })
        );
        assert_eq!(
            check_fence(FenceRule::Claim, at(1, "g1"), GrantFence::UNCLAIMED, Open),
            Ok(()),
            "a resource never claimed"
        );
    }

    #[test]
    fn a_reader_passes_only_above_the_last_writers_claim_and_never_moves_it() {
        let writer = at(5, "w5");
        assert_eq!(
            check_fence(FenceRule::Shared, at(6, "r6"), writer, Open),
            Ok(())
        );
        assert_eq!(
            check_fence(FenceRule::Shared, at(4, "r4"), writer, Open),
            Err(FenceRefusal::FencedOut { fence: 5 }),
            "a reader granted before the writer"
        );
        assert_eq!(
            check_fence(FenceRule::Shared, at(5, "w5"), writer, Open),
            Err(FenceRefusal::FencedOut { fence: 5 }),
            "the writer's own grant is no reader's"
        );
        assert_eq!(
            check_fence(FenceRule::Shared, at(1, "r1"), GrantFence::UNCLAIMED, Open),
            Ok(()),
            "no writer yet"
        );
    }

    #[test]
    fn a_stale_token_learns_it_was_fenced_not_that_the_resource_ended() {
        let fence = at(5, "g5");
        assert_eq!(
            check_fence(FenceRule::Holder, at(4, "g4"), fence, Ended),
            Err(FenceRefusal::FencedOut { fence: 5 })
        );
        assert_eq!(
            check_fence(FenceRule::Claim, at(9, "g9"), fence, Ended),
            Err(FenceRefusal::Terminal(Ended))
        );
    }

    #[test]
    fn a_token_issued_twice_is_two_grants_and_only_the_one_that_claimed_writes() {
        let fence = at(5, "first");
        for rule in [FenceRule::Claim, FenceRule::Holder] {
            assert_eq!(
                check_fence(rule, at(5, "second"), fence, Open),
                Err(FenceRefusal::FencedOut { fence: 5 }),
                "{rule:?}"
            );
            assert_eq!(check_fence(rule, at(5, "first"), fence, Open), Ok(()));
        }
        // A fence set before grants were named: its token's grants all match it.
        assert_eq!(
            check_fence(FenceRule::Holder, at(5, "any"), at(5, ""), Open),
            Ok(())
        );
    }
}
