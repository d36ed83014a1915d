//! How one payout attempt ended: the `outcome` tag of the executor's metrics and logs.

/// How one payout attempt ended (the `outcome` tag, pinned in the observability contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The rail accepted; the payout is `SETTLED`.
    Acked,
    /// The rail refused; the payout is `REJECTED`.
    Rejected,
    /// The rail's answer is unknown; the payout is `RAIL_AMBIGUOUS`.
    Ambiguous,
    /// Another worker holds the lock: no state change, no failure.
    Contended,
    /// The payout was already terminal.
    AlreadyTerminal,
    /// A claim or submit was refused by the fence: never re-acquired in this attempt.
    Fenced,
    /// The remaining lease does not cover a worst-case submit: released for a fresh token.
    LeaseShort,
    /// The lock was lost: abandoned by this worker, no write after the loss.
    Lost,
    /// A service was unreachable or answered unexpectedly; retried on a later scan.
    Error,
}

impl Outcome {
    /// Whether the attempt changed the payout (or must be retried at once, as a short
    /// lease is): a fenced, contended, terminal or failed attempt is no progress, so a
    /// worker facing only such payouts sleeps instead of spinning.
    pub fn is_progress(self) -> bool {
        matches!(
            self,
            Self::Acked | Self::Rejected | Self::Ambiguous | Self::LeaseShort
        )
    }

    /// Every outcome, so each series is exported from start (at zero).
    pub const ALL: [Self; 9] = [
        Self::Acked,
        Self::Rejected,
        Self::Ambiguous,
        Self::Contended,
        Self::AlreadyTerminal,
        Self::Fenced,
        Self::LeaseShort,
        Self::Lost,
        Self::Error,
    ];

    /// The tag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acked => "acked",
            Self::Rejected => "rejected",
            Self::Ambiguous => "ambiguous",
            Self::Contended => "contended",
            Self::AlreadyTerminal => "already_terminal",
            Self::Fenced => "fenced",
            Self::LeaseShort => "lease_short",
            Self::Lost => "lost",
            Self::Error => "error",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_changed_payout_is_progress() {
        let progress: Vec<_> = Outcome::ALL
            .into_iter()
            .filter(|o| o.is_progress())
            .collect();
        assert_eq!(
            progress,
            [
                Outcome::Acked,
                Outcome::Rejected,
                Outcome::Ambiguous,
                Outcome::LeaseShort
            ]
        );
    }
}
