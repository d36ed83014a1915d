//! The hinted path: an acquire or release on a key whose last write this replica made commits
//! without reading first, pinned by the compares of what the hint remembers (`hints.rs`).

use etcd_client::{Compare, CompareOp, Txn};
use lock_api::{FencingToken, GrantScope, LockKey, SessionId};
use lock_store::decide::{Decision, KeyView, decide};
use lock_store::{AcquireOutcome, AcquireSpec, StoreError};

use super::EtcdStore;
use super::codec::{GrantValue, grant_of};
use super::hints::KeyHint;

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
            scope: GrantScope::Exclusive,
            permits: None,
        };
        let committed = self
            .members
            .txn(
                "acquire (hinted)",
                Txn::new()
                    .when([
                        // No grant record: released, and nobody granted it since ...
                        Compare::mod_revision(self.keys.grant_key(key), CompareOp::Equal, 0),
                        // ... the fence as the released grant left it ...
                        Compare::mod_revision(
                            self.keys.fence_key(key),
                            CompareOp::Equal,
                            fence_revision,
                        ),
                        // ... no lock-delay ...
                        Compare::mod_revision(self.keys.delay_key(key), CompareOp::Equal, 0),
                        // ... nobody queued since the queue was last empty ...
                        Compare::create_revision(
                            self.keys.queue_prefix(key),
                            CompareOp::Less,
                            queue_empty_since + 1,
                        )
                        .with_prefix(),
                        // ... and the acquiring session is still live.
                        Compare::version(self.keys.session_marker(session), CompareOp::Greater, 0),
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
                &self.keys.grant_key(key),
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
