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

use super::*;
use crate::store::decide::{Decision, KeyView, decide};

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
    fn get(&self, key: &LockKey) -> Option<KeyHint> {
        self.lock().get(key).cloned()
    }

    fn set(&self, key: &LockKey, hint: KeyHint) {
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

impl EtcdStore {
    /// An acquire by the session that last released `key` through this replica, when nobody
    /// queued since: decided on the hint, committed in one transaction. `None` when no hint
    /// applies or its compares failed: the caller reads and decides.
    pub(super) async fn acquire_hinted(
        &self,
        key: &LockKey,
        session: SessionId,
        spec: AcquireSpec,
        spare_lease: &mut Option<i64>,
    ) -> Result<Option<AcquireOutcome>, StoreError> {
        let Some(KeyHint::Released {
            holder,
            fence_revision,
            queue_empty_since,
        }) = self.hints.get(key)
        else {
            return Ok(None);
        };
        if holder.session != session {
            return Ok(None);
        }
        // The view the hint claims, decided by the same rule as a read one.
        let view = KeyView {
            holder: None,
            delay_left_ms: 0,
            ahead: 0,
            last_token: holder.token.0,
        };
        let Decision::Grant { token } = decide(&view, session) else {
            return Ok(None);
        };
        let lease = self.lease_for(spec.lease_ms, spare_lease).await?;
        let value = GrantValue {
            token,
            session,
            owner: holder.owner,
            lease,
            lease_ms: spec.lease_ms,
            lock_delay_ms: spec.lock_delay_ms,
            request: spec.request.0,
        };
        let committed = self
            .txn(
                "acquire (hinted)",
                Txn::new()
                    .when([
                        // No grant record: released, and nobody granted it since ...
                        Compare::mod_revision(self.grant_key(key), CompareOp::Equal, 0),
                        // ... the fence as the released grant left it ...
                        Compare::mod_revision(
                            self.fence_key(key),
                            CompareOp::Equal,
                            fence_revision,
                        ),
                        // ... no lock-delay ...
                        Compare::mod_revision(self.delay_key(key), CompareOp::Equal, 0),
                        // ... nobody queued since the queue was last empty ...
                        Compare::create_revision(
                            self.queue_prefix(key),
                            CompareOp::Less,
                            queue_empty_since + 1,
                        )
                        .with_prefix(),
                        // ... and the acquiring session is still live.
                        Compare::version(self.session_marker(session), CompareOp::Greater, 0),
                    ])
                    .and_then(self.grant_ops(key, &value)?),
            )
            .await;
        let committed = match committed {
            Ok(committed) => committed,
            Err(err) => {
                self.hints.forget(key);
                return Err(err);
            }
        };
        if !committed.succeeded() {
            self.hints.forget(key);
            return Ok(None);
        }
        *spare_lease = None;
        // Nobody queued up to the commit (the compare), and this session had no place.
        let revision = committed.header().map(|h| h.revision());
        self.hints
            .granted(key, &value, committed.header(), revision);
        Ok(Some(AcquireOutcome::Granted {
            grant: grant_of(key, &value, spec.lease_ms),
            took_over_expired: false,
            store_now: None,
        }))
    }

    /// A release of the grant this replica committed on `key`, in one transaction pinned on
    /// its record's `mod_revision`. `None` when no hint applies or the record changed: the
    /// caller reads and decides.
    pub(super) async fn release_hinted(
        &self,
        key: &LockKey,
        session: SessionId,
        token: FencingToken,
    ) -> Result<Option<bool>, StoreError> {
        let Some(KeyHint::Held {
            grant,
            mod_revision,
            fence_revision,
            queue_empty_since,
        }) = self.hints.get(key)
        else {
            return Ok(None);
        };
        if grant.session != session || grant.token != token {
            return Ok(None);
        }
        self.hints.forget(key);
        let deleted = self
            .delete_grant_if_unchanged(
                &self.grant_key(key),
                mod_revision,
                grant.lease,
                Some(grant.lease_ms),
                None,
            )
            .await?;
        if !deleted {
            return Ok(None);
        }
        if let Some(since) = queue_empty_since {
            self.hints.set(
                key,
                KeyHint::Released {
                    holder: grant,
                    fence_revision,
                    queue_empty_since: since,
                },
            );
        }
        Ok(Some(true))
    }
}
