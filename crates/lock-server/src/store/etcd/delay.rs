//! Lock-delay: the record an involuntary end leaves, its remaining time, and ending a grant
//! with it.

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_api::{FencingToken, LockKey, SessionId};
use lock_store::StoreError;

use super::EtcdStore;
use super::codec::{
    DelayValue, GrantValue, LEASE_GRANULARITY_MS, ReadDelay, ReadGrant, decode, encode, read_grant,
};

impl EtcdStore {
    /// Starts the lock-delay of `dead`, a grant that ended involuntarily and that this
    /// acquire found (etcd does not say when its lease ended, so the delay runs from now).
    /// `false` when the grant record or the delay changed since the read.
    pub(super) async fn start_delay(
        &self,
        key: &LockKey,
        dead: &ReadGrant,
        prior: Option<&ReadDelay>,
    ) -> Result<bool, StoreError> {
        let (lease, ops) = self.delay_ops(key, &dead.value).await?;
        let started = self
            .members
            .txn(
                "start lock-delay",
                Txn::new()
                    .when([
                        Compare::mod_revision(
                            self.keys.grant_key(key),
                            CompareOp::Equal,
                            dead.mod_revision,
                        ),
                        Compare::mod_revision(
                            self.keys.delay_key(key),
                            CompareOp::Equal,
                            prior.map_or(0, |d| d.mod_revision),
                        ),
                    ])
                    .and_then(ops),
            )
            .await?
            .succeeded();
        if !started {
            self.members.revoke_lease_later(lease);
        } else if let Some(prior) = prior {
            self.members.revoke_lease_later(prior.value.lease);
        }
        Ok(started)
    }

    /// A new lease for `grant`'s lock-delay and the writes that start it: the delay record
    /// naming the grant and its exempt session, and its marker.
    pub(super) async fn delay_ops(
        &self,
        key: &LockKey,
        grant: &GrantValue,
    ) -> Result<(i64, Vec<TxnOp>), StoreError> {
        let lease = self.members.grant_lease(grant.lock_delay_ms).await?;
        let value = DelayValue {
            token: grant.token,
            exempt: grant.session,
            lease,
            delay_ms: grant.lock_delay_ms,
        };
        Ok((
            lease,
            vec![
                TxnOp::put(self.keys.delay_key(key), encode(&value)?, None),
                TxnOp::put(
                    self.keys.delay_marker(lease),
                    "",
                    Some(PutOptions::new().with_lease(lease)),
                ),
            ],
        ))
    }

    /// Milliseconds left of a delay in force: its lease's TTL (etcd answers whole seconds,
    /// rounded down, so one more), at most the delay asked; the delay asked when etcd cannot
    /// say.
    pub(super) async fn delay_remaining(&self, delay: &DelayValue) -> u64 {
        let lease = delay.lease;
        let ttl = self
            .members
            .call("lease time-to-live", |client| async move {
                client.lease_client().time_to_live(lease, None).await
            })
            .await;
        match ttl {
            Ok(answer) if answer.ttl() >= 0 => {
                let upper = u64::try_from(answer.ttl()).unwrap_or(0).saturating_add(1);
                upper
                    .saturating_mul(LEASE_GRANULARITY_MS)
                    .min(delay.delay_ms)
                    .max(1)
            }
            // The lease just ended: the next try is granted.
            Ok(_) => 1,
            Err(err) => {
                tracing::debug!(event = "etcd_lease_ttl_failed", lease, error = %err);
                delay.delay_ms.max(1)
            }
        }
    }

    /// After an acquire's lost race: the token another session was granted between this
    /// acquire's read (fence at `fence_revision`) and its commit, if one was. Such a grant
    /// held the key at an instant inside this request, so the request answers `LOCK_HELD`
    /// with that token (linearizable) instead of racing again: under a hot key, retrying
    /// every lost race let one acquire lose 16 in a row and answer 503. A grant to this very
    /// session (a concurrent retry of the same acquire) is left to the next round, which
    /// answers it as a re-grant.
    pub(super) fn granted_meanwhile(
        lost: &etcd_client::TxnResponse,
        fence_revision: i64,
        session: SessionId,
    ) -> Result<Option<FencingToken>, StoreError> {
        let responses = lost.op_responses();
        let [TxnOpResponse::Get(fence), TxnOpResponse::Get(grant)] = responses.as_slice() else {
            return Err(StoreError::Internal(
                "etcd answered a failed acquire without its two reads".into(),
            ));
        };
        let Some(fence) = fence.kvs().first() else {
            return Ok(None);
        };
        if fence.mod_revision() == fence_revision {
            return Ok(None);
        }
        if let Some(grant) = grant.kvs().first() {
            if read_grant(grant)?.value.session == session {
                return Ok(None);
            }
        }
        Ok(Some(FencingToken(decode::<u64>(fence.value(), "fence")?)))
    }

    /// Deletes `key`'s grant record (dead, or revoked) if it is unchanged since it was read,
    /// and starts its lock-delay in the same transaction; `prior_delay`: the revision of the
    /// delay record read with it (0: absent), compared when given. Whether this call deleted
    /// it.
    pub(super) async fn end_grant_with_delay(
        &self,
        key: &LockKey,
        grant: &ReadGrant,
        prior_delay: Option<i64>,
        also: Option<TxnOp>,
    ) -> Result<bool, StoreError> {
        let (lease, mut ops) = self.delay_ops(key, &grant.value).await?;
        ops.extend([
            TxnOp::delete(self.keys.grant_key(key), None),
            TxnOp::delete(self.keys.grant_marker(grant.value.lease), None),
        ]);
        ops.extend(also);
        let mut compares = vec![Compare::mod_revision(
            self.keys.grant_key(key),
            CompareOp::Equal,
            grant.mod_revision,
        )];
        if let Some(revision) = prior_delay {
            compares.push(Compare::mod_revision(
                self.keys.delay_key(key),
                CompareOp::Equal,
                revision,
            ));
        }
        let deleted = self
            .members
            .txn("end grant", Txn::new().when(compares).and_then(ops))
            .await?
            .succeeded();
        self.members
            .revoke_lease_later(if deleted { grant.value.lease } else { lease });
        Ok(deleted)
    }

    /// Deletes a grant record if it is unchanged since `mod_revision`, and its marker; whether
    /// this call deleted it. The grant's lease is then revoked, or, for a release (the holder
    /// let go: nobody renews it any more), kept for the next grant (`reuse` names its
    /// `lease_ms`).
    pub(super) async fn delete_grant_if_unchanged(
        &self,
        key_path: &str,
        mod_revision: i64,
        lease: i64,
        reuse: Option<u64>,
        also: Option<TxnOp>,
    ) -> Result<bool, StoreError> {
        let mut ops = vec![
            TxnOp::delete(key_path, None),
            TxnOp::delete(self.keys.grant_marker(lease), None),
        ];
        ops.extend(also);
        let deleted = self
            .members
            .txn(
                "delete grant",
                Txn::new()
                    .when([Compare::mod_revision(
                        key_path,
                        CompareOp::Equal,
                        mod_revision,
                    )])
                    .and_then(ops),
            )
            .await?
            .succeeded();
        match (deleted, reuse) {
            (false, _) => {}
            (true, Some(lease_ms)) => self.reuse_lease_later(lease_ms, lease),
            (true, None) => self.members.revoke_lease_later(lease),
        }
        Ok(deleted)
    }
}
