//! Lock-delay: the record an involuntary end leaves, its remaining time, and ending a grant
//! with it.

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_api::{FencingToken, LockKey, SessionId};
use lock_store::StoreError;

use super::EtcdStore;
use super::codec::{
    DelayValue, LEASE_GRANULARITY_MS, NOBODY, ReadDelay, ReadGrant, decode, encode, read_grant,
};

/// A lock-delay that an acquire starts, having found what ended involuntarily.
#[derive(Debug, Clone)]
pub(super) enum DelayStart {
    /// A grant of the whole key: the delay exempts its holder's session.
    Grant(ReadGrant),
    /// Ended shares (every ended share read, so that none starts another), the longest
    /// delay any asked, read with the key's fence at `fence_revision`: the delay exempts
    /// nobody.
    Shares {
        tokens: Vec<FencingToken>,
        delay_ms: u64,
        fence_revision: i64,
    },
}

impl DelayStart {
    /// How long the delay runs.
    pub(super) fn delay_ms(&self) -> u64 {
        match self {
            Self::Grant(dead) => dead.value.lock_delay_ms,
            Self::Shares { delay_ms, .. } => *delay_ms,
        }
    }

    /// The record it leaves (its lease set by [`EtcdStore::delay_ops`]).
    fn value(&self) -> DelayValue {
        match self {
            Self::Grant(dead) => DelayValue {
                token: dead.value.token,
                exempt: dead.value.session,
                lease: 0,
                delay_ms: dead.value.lock_delay_ms,
                shares: Vec::new(),
            },
            Self::Shares {
                tokens, delay_ms, ..
            } => shares_delay(tokens.clone(), *delay_ms),
        }
    }
}

/// The record of a lock-delay of `delay_ms` that the ends of the shares `tokens` start: it
/// names them all and exempts nobody (its lease set by [`EtcdStore::delay_ops`]).
pub(super) fn shares_delay(tokens: Vec<FencingToken>, delay_ms: u64) -> DelayValue {
    DelayValue {
        token: tokens.iter().copied().max().unwrap_or(FencingToken(0)),
        exempt: NOBODY,
        lease: 0,
        delay_ms,
        shares: tokens,
    }
}

impl EtcdStore {
    /// Starts the lock-delay `start`, of what ended involuntarily and this acquire found
    /// (etcd does not say when a lease ended, so the delay runs from now). `false` when the
    /// delay record, or what ended (a grant's record; for shares, the fence: no grant since),
    /// changed since the read.
    pub(super) async fn start_delay(
        &self,
        key: &LockKey,
        start: &DelayStart,
        prior: Option<&ReadDelay>,
    ) -> Result<bool, StoreError> {
        let (lease, ops) = self.delay_ops(key, start.value()).await?;
        let unchanged = match start {
            DelayStart::Grant(dead) => Compare::mod_revision(
                self.keys.grant_key(key),
                CompareOp::Equal,
                dead.mod_revision,
            ),
            DelayStart::Shares { fence_revision, .. } => {
                Compare::mod_revision(self.keys.fence_key(key), CompareOp::Equal, *fence_revision)
            }
        };
        let started = self
            .members
            .txn(
                "start lock-delay",
                Txn::new()
                    .when([
                        unchanged,
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

    /// A new lease for the lock-delay `value` and the writes that start it: the delay record
    /// (naming the lease) and its marker.
    pub(super) async fn delay_ops(
        &self,
        key: &LockKey,
        value: DelayValue,
    ) -> Result<(i64, Vec<TxnOp>), StoreError> {
        let lease = self.members.grant_lease(value.delay_ms).await?;
        let value = DelayValue { lease, ..value };
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
        &self,
        lost: &etcd_client::TxnResponse,
        fence_revision: i64,
        session: SessionId,
    ) -> Result<Option<FencingToken>, StoreError> {
        let responses = lost.op_responses();
        let [
            TxnOpResponse::Get(fence),
            TxnOpResponse::Get(grant),
            TxnOpResponse::Get(newest_share),
        ] = responses.as_slice()
        else {
            return Err(StoreError::Internal(
                "etcd answered a failed acquire without its three reads".into(),
            ));
        };
        let Some(fence) = fence.kvs().first() else {
            return Ok(None);
        };
        if fence.mod_revision() == fence_revision {
            return Ok(None);
        }
        let token = FencingToken(decode::<u64>(fence.value(), "fence")?);
        // A share took the token: whether it keeps this acquire out (a reader) or conflicts
        // with it (permits) is the next round's to say.
        let newest_share = newest_share.kvs().first();
        let share_token = newest_share.and_then(|kv| self.keys.parse_hold_path(kv.key()));
        if share_token.is_some_and(|(_, share)| share == token) {
            return Ok(None);
        }
        if let Some(grant) = grant.kvs().first() {
            if read_grant(grant)?.value.session == session {
                return Ok(None);
            }
        }
        Ok(Some(token))
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
        let start = DelayStart::Grant(grant.clone());
        let (lease, mut ops) = self.delay_ops(key, start.value()).await?;
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
