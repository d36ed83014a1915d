//! Which claims a key's live grants leave open (ADR 0007), pure: one key, one kind. While
//! any grant of a key is live, its grants are all of one kind: locks and writers (exclusive)
//! beside readers (shared), or permits of one count. An acquire of another kind is the
//! caller's mistake, answered with what the key is held as and never converted; once the
//! key's grants end, any kind may start it anew. Every store asks [`conflict`] before it
//! decides (PostgreSQL's copy is `lock_claim_conflict`, held to the same answers by the
//! conformance suite).

use lock_api::{Claim, LockKey};

use crate::StoreError;
use crate::permits::MAX_PERMITS;

/// What a key's live grants are, as a conflict needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldAs {
    /// A lock or a writer: the key alone.
    Exclusive,
    /// Readers.
    Shared,
    /// Permits, granted with this count.
    Permits(u32),
}

impl HeldAs {
    /// How the answer names it.
    pub fn describe(self) -> String {
        match self {
            Self::Exclusive => "a lock (exclusive)".to_owned(),
            Self::Shared => "a read/write lock's readers (shared)".to_owned(),
            Self::Permits(permits) => format!("a semaphore of {permits} permits"),
        }
    }
}

/// How the answer names a claim.
pub fn describe(claim: Claim) -> String {
    match claim {
        Claim::Exclusive => "the key alone".to_owned(),
        Claim::Shared => "a reader's share".to_owned(),
        Claim::Permit { permits } => format!("one of {permits} permits"),
    }
}

/// Whether `claim` cannot be decided on a key whose live grants are `held` (`None`: none is
/// live): a lock or a reader beside permits, a permit beside a lock or readers, or a permit
/// of another count. A writer beside readers, and a reader beside a writer, is no conflict:
/// the decision makes them wait.
pub fn conflict(claim: Claim, held: Option<HeldAs>) -> bool {
    match (claim, held) {
        (_, None) => false,
        (Claim::Exclusive | Claim::Shared, Some(held)) => matches!(held, HeldAs::Permits(_)),
        (Claim::Permit { permits }, Some(held)) => held != HeldAs::Permits(permits),
    }
}

/// What a store answers an acquire that [`conflict`]s with `held`, or that asks for the
/// other mode of a key its session holds.
pub fn conflict_error(key: &LockKey, claim: Claim, held: HeldAs) -> StoreError {
    StoreError::KindConflict {
        lock_key: key.clone(),
        held: held.describe(),
        asked: describe(claim),
    }
}

/// Refuses a permit count outside 1 to [`MAX_PERMITS`] (the edges check it; a store called
/// directly answers rather than panics).
pub fn check_count(key: &LockKey, claim: Claim) -> Result<(), StoreError> {
    match claim {
        Claim::Permit { permits } if !(1..=MAX_PERMITS).contains(&permits) => {
            Err(StoreError::Internal(format!(
                "{key}: a semaphore has 1 to {MAX_PERMITS} permits, asked {permits}"
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole table: three claims against a free key and the four kinds a key is held as.
    #[test]
    fn one_key_one_kind() {
        let three = Claim::Permit { permits: 3 };
        let rows = [
            (Claim::Exclusive, None, false),
            (Claim::Exclusive, Some(HeldAs::Exclusive), false),
            (Claim::Exclusive, Some(HeldAs::Shared), false),
            (Claim::Exclusive, Some(HeldAs::Permits(3)), true),
            (Claim::Shared, None, false),
            (Claim::Shared, Some(HeldAs::Exclusive), false),
            (Claim::Shared, Some(HeldAs::Shared), false),
            (Claim::Shared, Some(HeldAs::Permits(1)), true),
            (three, None, false),
            (three, Some(HeldAs::Exclusive), true),
            (three, Some(HeldAs::Shared), true),
            (three, Some(HeldAs::Permits(3)), false),
            (three, Some(HeldAs::Permits(4)), true),
        ];
        for (claim, held, answer) in rows {
            assert_eq!(conflict(claim, held), answer, "{claim:?} on {held:?}");
        }
    }
}
