//! What the election's checkers witness, kept beside the model rather than read from it:
//! every value the store accepted from each term's proclaim, the highest term each observer
//! yielded, the last session elected, and the highest term the election's register accepted.
//! The only code that writes them; the checkers read them.

use std::collections::{BTreeMap, BTreeSet};

use lock_api::{FencingToken, LeaderValue, SessionId};

/// What the election's checkers witnessed.
#[derive(Debug, Default)]
pub(super) struct ElectWitness {
    /// Every value the store accepted a proclaim of, by the term that proclaimed it.
    proclaimed: BTreeMap<FencingToken, BTreeSet<String>>,
    /// Per observer: the highest term it yielded.
    yielded: BTreeMap<usize, FencingToken>,
    /// The session elected last, and its term.
    leader: Option<(SessionId, FencingToken)>,
    /// The highest term the register accepted a write of.
    register: i64,
}

impl ElectWitness {
    /// `session` won the election with `term`: whether another session led before it (a
    /// leadership change).
    pub(super) fn won(&mut self, session: SessionId, term: FencingToken) -> bool {
        let change = self.leader.is_some_and(|(s, _)| s != session);
        self.leader = Some((session, term));
        change
    }

    /// The store accepted `term`'s proclaim of `value`.
    pub(super) fn proclaimed(&mut self, term: FencingToken, value: &LeaderValue) {
        let values = self.proclaimed.entry(term).or_default();
        values.insert(value.as_str().to_owned());
    }

    /// Whether the store accepted a proclaim of `value` by `term`.
    pub(super) fn was_proclaimed(&self, term: FencingToken, value: &LeaderValue) -> bool {
        self.proclaimed
            .get(&term)
            .is_some_and(|values| values.contains(value.as_str()))
    }

    /// Observer `o` yielded `term`: the highest term it yielded before (0: none).
    pub(super) fn yielded(&mut self, o: usize, term: FencingToken) -> FencingToken {
        let highest = self.yielded.entry(o).or_insert(FencingToken(0));
        let before = *highest;
        *highest = before.max(term);
        before
    }

    /// The register accepted a write of `term`: the higher term it had accepted before, if
    /// this one is below it (a superseded leader's write accepted).
    pub(super) fn wrote(&mut self, term: i64) -> Option<i64> {
        let highest = self.register;
        self.register = highest.max(term);
        (term < highest).then_some(highest)
    }
}
