//! The fence rule, as one pure function: payment-resource runs it inside the writing
//! transaction (under `SELECT … FOR UPDATE`), and the simulation (`lock-sim`) runs the same
//! function against its model of the resource. A stale token is refused before terminality,
//! so a zombie always learns it was fenced.

use crate::PayoutState;

/// Which tokens a fenced write accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceRule {
    /// Claim (P2): a token at or above the fence, which it then raises.
    Claim,
    /// Every later write: only the token that claimed last (the current fence holder).
    Holder,
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
/// whose state is `state`, under `rule`.
pub fn check_fence(
    rule: FenceRule,
    presented: i64,
    fence: i64,
    state: PayoutState,
) -> Result<(), FenceRefusal> {
    let allowed = match rule {
        FenceRule::Claim => presented >= fence,
        FenceRule::Holder => presented == fence,
    };
    if !allowed {
        return Err(FenceRefusal::FencedOut { fence });
    }
    if state.is_terminal() {
        return Err(FenceRefusal::Terminal(state));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_takes_at_or_above_later_writes_only_the_holder_stale_before_terminal() {
        let open = PayoutState::Claimed;
        assert_eq!(check_fence(FenceRule::Claim, 5, 5, open), Ok(()));
        assert_eq!(check_fence(FenceRule::Claim, 6, 5, open), Ok(()));
        assert_eq!(
            check_fence(FenceRule::Claim, 4, 5, open),
            Err(FenceRefusal::FencedOut { fence: 5 })
        );
        assert_eq!(check_fence(FenceRule::Holder, 5, 5, open), Ok(()));
        assert_eq!(
            check_fence(FenceRule::Holder, 6, 5, open),
            Err(FenceRefusal::FencedOut { fence: 5 })
        );
        let done = PayoutState::RailAmbiguous;
        assert_eq!(
            check_fence(FenceRule::Holder, 4, 5, done),
            Err(FenceRefusal::FencedOut { fence: 5 }),
            "a stale token learns it was fenced, not that the payout ended"
        );
        assert_eq!(
            check_fence(FenceRule::Claim, 9, 5, done),
            Err(FenceRefusal::Terminal(done))
        );
    }
}
