//! What this replica last wrote to a key, kept as a hint, so that a lock cycle on a key that
//! nobody else touched costs what etcd's own lock costs: an acquire is one transaction (no
//! read before it) and a release is one transaction (no read before it).
//!
//! A hint is never trusted. Every transaction built from one pins what the hint claims with
//! the same compares the read-decide-commit path pins after its read: the grant record's
//! `mod_revision` (0: absent), the fence's, the delay record's absence, no queue place
//! created since the queue was last known empty, and the acquiring session's marker. A hint
//! gone stale (another replica granted, a waiter queued, a revoke, the reaper, a lock-delay)
//! fails a compare, is forgotten, and costs one call: the caller then reads and decides as
//! it would have without it. Hints live in the replica's memory only; a restart starts with
//! none.

use std::collections::HashMap;
use std::sync::Mutex;

use lock_api::LockKey;

use super::codec::GrantValue;

/// Keys hinted per replica. Past it the hints start over: a hint only saves a read, and a
/// bound keeps a replica serving millions of keys from holding a record of each.
const HINTED_KEYS_MAX: usize = 16_384;

/// What this replica's own last write to a key left there.
#[derive(Debug, Clone)]
pub(super) enum KeyHint {
    /// A grant this replica committed, its record as written at `mod_revision`.
    Held {
        grant: GrantValue,
        mod_revision: i64,
        /// When the key's fence was last written (this grant's commit, or an earlier one).
        fence_revision: i64,
        /// The grant's commit, when the key's queue was empty then.
        queue_empty_since: Option<i64>,
    },
    /// That grant, released by this replica: the key free, its fence as the grant left it.
    Released {
        holder: GrantValue,
        fence_revision: i64,
        queue_empty_since: i64,
    },
}

/// The hints of one replica, by key.
#[derive(Default)]
pub(super) struct Hints {
    by_key: Mutex<HashMap<LockKey, KeyHint>>,
}

impl Hints {
    pub(super) fn get(&self, key: &LockKey) -> Option<KeyHint> {
        self.lock().get(key).cloned()
    }

    pub(super) fn set(&self, key: &LockKey, hint: KeyHint) {
        let mut hints = self.lock();
        if hints.len() >= HINTED_KEYS_MAX && !hints.contains_key(key) {
            hints.clear();
        }
        hints.insert(key.clone(), hint);
    }

    /// `grant`, committed by this replica in the transaction `header` answers (its revision
    /// is the record's and the fence's); the key's queue known empty since a revision, or not.
    /// No header, no revision to pin: no hint.
    pub(super) fn granted(
        &self,
        key: &LockKey,
        grant: &GrantValue,
        header: Option<&etcd_client::ResponseHeader>,
        queue_empty_since: Option<i64>,
    ) {
        let Some(revision) = header.map(|h| h.revision()).filter(|r| *r > 0) else {
            self.forget(key);
            return;
        };
        self.set(
            key,
            KeyHint::Held {
                grant: grant.clone(),
                mod_revision: revision,
                fence_revision: revision,
                queue_empty_since,
            },
        );
    }

    pub(super) fn forget(&self, key: &LockKey) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LockKey, KeyHint>> {
        self.by_key
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
