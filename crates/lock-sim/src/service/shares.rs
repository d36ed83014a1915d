//! Readers and permits at the lock service (ADR 0007): what the store holds of a semaphore
//! key, read back through its own L7 (`LockStore::get`, whose holders name each permit's
//! slot), for the check that the store never holds more live permits than the key has, nor
//! two in one slot. (A share's acquire reaches the store alone, never in a batch, as
//! lock-server's `Batched` sends it: `LockService::acquire_queued` is that call.)

use lock_api::{GrantScope, LockKey};
use lock_store::LockStore;

use super::{LockService, now_or_never};
use crate::sched::Nanos;

impl LockService {
    /// The scopes of `key`'s live grants held by shares in the store replica `replica`
    /// serves from, at `now`, as its L7 lists them (empty for a key held alone or free).
    pub fn live_shares(&self, now: Nanos, replica: usize, key: &LockKey) -> Vec<GrantScope> {
        // A checker's read: the store's clock is left where the last store call set it.
        let before = self.env.true_now();
        self.env.set_now(now);
        let info = now_or_never(self.stores[replica].get(key))
            .unwrap_or_else(|e| panic!("memory store failed: {e}"));
        self.env.set_now(before);
        info.map(|info| info.holders.into_iter().map(|h| h.scope).collect())
            .unwrap_or_default()
    }
}

/// What is wrong with a semaphore key of `permits` permits whose live grants hold `scopes`:
/// more grants than permits, a scope that is no permit of the key, or two in one slot.
pub fn permits_broken(permits: u32, scopes: &[GrantScope]) -> Option<String> {
    if scopes.len() > permits as usize {
        return Some(format!(
            "{} live permits of {permits}: {scopes:?}",
            scopes.len()
        ));
    }
    let mut slots = Vec::with_capacity(scopes.len());
    for scope in scopes {
        match scope {
            GrantScope::Permit { slot } if *slot < permits && !slots.contains(slot) => {
                slots.push(*slot);
            }
            _ => return Some(format!("live grants of {permits} permits hold {scopes:?}")),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_semaphore_key_holds_its_permits_one_a_slot() {
        let permit = |slot| GrantScope::Permit { slot };
        assert_eq!(permits_broken(2, &[]), None);
        assert_eq!(permits_broken(2, &[permit(1), permit(0)]), None);
        assert!(permits_broken(2, &[permit(0), permit(1), permit(1)]).is_some());
        assert!(permits_broken(3, &[permit(0), permit(0)]).is_some());
        assert!(permits_broken(2, &[permit(2)]).is_some());
        assert!(permits_broken(2, &[GrantScope::Shared]).is_some());
    }
}
