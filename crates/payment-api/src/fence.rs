//! The fence rule, as one pure function: payment-resource runs it inside the writing
//! transaction (under `SELECT … FOR UPDATE`), and the simulation (`lock-sim`) runs the same
//! function against its model of the resource. A stale token is refused before terminality,
//! so a zombie always learns it was fenced.

use crate::PayoutState;

/// Which tokens a fenced write accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceRule {
    /// Claim: a token above the fence, or the fence's own grant again; it then sets
    /// the fence to itself.
    Claim,
    /// Every later write: only the grant that claimed last (the current fence holder).
    Holder,
}

/// A fence, or a write's claim to one: a token and the grant it was issued to (the grant id
/// of its proof, as text). A payout never claimed has token 0 and no grant; a fence set
/// before grants were named has an empty grant, which any grant of its token matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantFence<'a> {
    /// The fencing token.
    pub token: i64,
    /// The grant id's text, empty when not known.
    pub grant: &'a str,
}

impl GrantFence<'_> {
    /// Whether this write's grant is the one that set `fence`: its token, and its grant id
    /// unless the fence predates grant ids.
    fn set(&self, fence: &GrantFence<'_>) -> bool {
        self.token == fence.token && (fence.grant.is_empty() || self.grant == fence.grant)
    }
}

/// Why a fenced write is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceRefusal {
    /// The token is not one the rule accepts (`FENCED_OUT`).
    FencedOut {
        /// The payout's fence.
        fence: i64,
    },
    /// The token passes, but the payout is terminal (`ALREADY_TERMINAL`).
    Terminal(PayoutState),
}

/// Whether a write presenting `presented` may touch a payout whose fence is `fence` and
/// whose state is `state`, under `rule`. A token equal to the fence passes only as the grant
/// that set it: a token issued twice (a restored lock store) is two grants, and the second
/// is fenced out.
pub fn check_fence(
    rule: FenceRule,
    presented: GrantFence<'_>,
    fence: GrantFence<'_>,
    state: PayoutState,
) -> Result<(), FenceRefusal> {
    let allowed = match rule {
        FenceRule::Claim => presented.token > fence.token || presented.set(&fence),
        FenceRule::Holder => presented.set(&fence),
    };
    if !allowed {
        return Err(FenceRefusal::FencedOut { fence: fence.token });
    }
    if state.is_terminal() {
        return Err(FenceRefusal::Terminal(state));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(token: i64, grant: &str) -> GrantFence<'_> {
        GrantFence { token, grant }
    }

    #[test]
    fn claim_takes_above_or_its_own_grant_later_writes_only_the_holder_stale_before_terminal() {
        let open = PayoutState::Claimed;
        let fence = at(5, "g5");
        assert_eq!(
            check_fence(FenceRule::Claim, at(5, "g5"), fence, open),
            Ok(())
        );
        assert_eq!(
            check_fence(FenceRule::Claim, at(6, "g6"), fence, open),
            Ok(())
        );
        assert_eq!(
            check_fence(FenceRule::Claim, at(4, "g4"), fence, open),
            Err(FenceRefusal::FencedOut { fence: 5 })
        );
        assert_eq!(
            check_fence(FenceRule::Holder, at(5, "g5"), fence, open),
            Ok(())
        );
        assert_eq!(
            check_fence(FenceRule::Holder, at(6, "g6"), fence, open),
            Err(FenceRefusal::FencedOut { fence: 5 })
        );
        let done = PayoutState::RailAmbiguous;
        assert_eq!(
            check_fence(FenceRule::Holder, at(4, "g4"), fence, done),
            Err(FenceRefusal::FencedOut { fence: 5 }),
            "a stale token learns it was fenced, not that the payout ended"
        );
        assert_eq!(
            check_fence(FenceRule::Claim, at(9, "g9"), fence, done),
            Err(FenceRefusal::Terminal(done))
        );
        assert_eq!(
            check_fence(
                FenceRule::Claim,
                at(1, "g1"),
                at(0, ""),
                PayoutState::Pending
            ),
            Ok(()),
            "a payout never claimed"
        );
    }

    #[test]
    fn a_token_issued_twice_is_two_grants_and_only_the_one_that_claimed_writes() {
        let open = PayoutState::Claimed;
        let fence = at(5, "first");
        for rule in [FenceRule::Claim, FenceRule::Holder] {
            assert_eq!(
                check_fence(rule, at(5, "second"), fence, open),
                Err(FenceRefusal::FencedOut { fence: 5 }),
                "{rule:?}"
            );
            assert_eq!(check_fence(rule, at(5, "first"), fence, open), Ok(()));
        }
        // A fence set before grants were named: its token's grants all match it.
        assert_eq!(
            check_fence(FenceRule::Holder, at(5, "any"), at(5, ""), open),
            Ok(())
        );
    }
}
