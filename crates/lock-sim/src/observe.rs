//! The SDK observer's rule, copied: lock-client's `election::Observer` yields a read of an
//! election's leader when it differs from the last read it yielded, and skips a read naming
//! a term below the highest it yielded (a read that lagged another). lock-client is async and
//! HTTP-bound, and the simulation runs no lock-client code, so the rule is copied here (the
//! one part of the election the simulation models instead of running); its cases below are
//! the SDK's. What differs: the SDK compares its whole `Leader` (owner and `expires_at` too,
//! so a renewal is a change), the copy compares term and value, as the SDK's docs say.

use lock_api::{FencingToken, LeaderValue};

/// One read of the election's leader, as L7 answers it: the term and what it announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRead {
    /// The leader's term (its grant's token).
    pub term: FencingToken,
    /// What it announces (`None` before its first announcement).
    pub value: Option<LeaderValue>,
}

/// The observer's state: the last read it yielded and the highest term among them.
#[derive(Debug, Clone)]
pub struct TermWatch {
    last: Option<Option<LeaderRead>>,
    highest: FencingToken,
}

impl Default for TermWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl TermWatch {
    /// A watch that has yielded nothing.
    pub fn new() -> Self {
        Self {
            last: None,
            highest: FencingToken(0),
        }
    }

    /// Offers `read` (`None`: no leader now): `true` when the observer yields it, as the
    /// SDK's `Observer::next` returns it.
    pub fn offer(&mut self, read: &Option<LeaderRead>) -> bool {
        let moved = self.last.as_ref() != Some(read);
        let backwards = read.as_ref().is_some_and(|l| l.term < self.highest);
        if !moved || backwards {
            return false;
        }
        if let Some(leader) = read {
            self.highest = leader.term;
        }
        self.last = Some(read.clone());
        true
    }

    /// Whether `read` names a term below the highest yielded (what the rule skips).
    pub fn lags(&self, read: &Option<LeaderRead>) -> bool {
        read.as_ref().is_some_and(|l| l.term < self.highest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(term: u64, value: Option<&str>) -> Option<LeaderRead> {
        Some(LeaderRead {
            term: FencingToken(term),
            value: value.map(|v| LeaderValue::parse(v).unwrap_or_else(|e| panic!("{e}"))),
        })
    }

    #[test]
    fn the_first_read_is_yielded_then_only_changes() {
        let mut watch = TermWatch::new();
        assert!(
            watch.offer(&None),
            "the first call answers the current leader"
        );
        assert!(!watch.offer(&None));
        assert!(watch.offer(&read(3, None)));
        assert!(!watch.offer(&read(3, None)));
        assert!(
            watch.offer(&read(3, Some("a"))),
            "a new value under the term"
        );
        assert!(watch.offer(&None), "no leader is a change");
        assert!(watch.offer(&read(5, Some("b"))));
    }

    #[test]
    fn a_term_below_the_highest_yielded_is_skipped() {
        let mut watch = TermWatch::new();
        assert!(watch.offer(&read(5, Some("b"))));
        assert!(watch.lags(&read(3, Some("a"))));
        assert!(!watch.offer(&read(3, Some("a"))), "a lagging read");
        assert!(watch.offer(&None));
        assert!(
            !watch.offer(&read(4, None)),
            "still below the highest after none"
        );
        assert!(watch.offer(&read(5, Some("c"))));
    }
}
