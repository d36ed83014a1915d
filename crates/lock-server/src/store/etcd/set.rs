//! An acquire of a key set (ADR 0007): each key read and judged as a single acquire's round
//! reads and judges it (`round.rs`), the set decided at once ([`decide_set`]), and every new
//! grant written in one transaction whose compares pin what was read of every key; a lost
//! race is read and decided again. A waiting set's places are put in one transaction before
//! the read, so they share one `create_revision` (one ticket), and a release after that put
//! wakes the set's waiter (no place is handed a key on etcd: wake-ups name the head).

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_api::{GrantScope, LockGrant, LockKey, SessionId};
use lock_store::key_set::{SetDecision, decide_set};
use lock_store::{AcquireSpec, Refusal, RequestId, SetOutcome, StoreError};

use super::EtcdStore;
use super::codec::{GrantValue, encode, grant_of, lease_seconds};
use super::round::{ACQUIRE_ROUNDS_MAX, KeyRead};

impl EtcdStore {
    /// [`lock_store::LockStore::acquire_set`]: rounds of read, decide, commit until one
    /// decides.
    pub(super) async fn acquire_set_rounds(
        &self,
        keys: &[LockKey],
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<SetOutcome, StoreError> {
        if spec.queue_ms > 0 {
            self.hold_set_places(keys, session, spec.queue_ms).await?;
        }
        for _ in 0..ACQUIRE_ROUNDS_MAX {
            match self.set_round(keys, session, spec).await {
                Ok(Some(decided)) => return Ok(decided),
                Ok(None) => {}
                Err(err @ StoreError::KindConflict { .. }) => {
                    // The caller's mistake: nothing is queued for it (its places would keep
                    // others waiting behind them until they lapse).
                    if spec.queue_ms > 0 {
                        self.leave_set_places(keys, session).await?;
                    }
                    return Err(err);
                }
                Err(err) => return Err(err),
            }
        }
        Err(StoreError::Unavailable(format!(
            "acquire of a set of {} keys lost {ACQUIRE_ROUNDS_MAX} races in a row",
            keys.len()
        )))
    }

    /// The set's places, all put (or put again, keeping their turn) in one transaction on
    /// one lease of `queue_ms`; none when the session ended meanwhile.
    async fn hold_set_places(
        &self,
        keys: &[LockKey],
        session: SessionId,
        queue_ms: u64,
    ) -> Result<(), StoreError> {
        let lease = self.members.grant_lease(queue_ms).await?;
        let ttl_s = encode(&lease_seconds(queue_ms))?;
        let puts: Vec<TxnOp> = keys
            .iter()
            .map(|key| {
                let on_lease = Some(PutOptions::new().with_lease(lease));
                TxnOp::put(self.keys.place_key(key, session), ttl_s.clone(), on_lease)
            })
            .collect();
        let live = Compare::version(self.keys.session_marker(session), CompareOp::Greater, 0);
        let placed = self
            .members
            .txn("queue set", Txn::new().when([live]).and_then(puts))
            .await?;
        if !placed.succeeded() {
            self.members.revoke_lease_later(lease);
        }
        Ok(())
    }

    /// Deletes the set's places, in one transaction.
    async fn leave_set_places(
        &self,
        keys: &[LockKey],
        session: SessionId,
    ) -> Result<(), StoreError> {
        let deletes: Vec<TxnOp> = (keys.iter())
            .map(|key| TxnOp::delete(self.keys.place_key(key, session), None))
            .collect();
        let txn = Txn::new().and_then(deletes);
        self.members.txn("leave set queues", txn).await.map(|_| ())
    }

    /// One round: read and judge every key, decide the set, commit. `None` when a write lost
    /// a race.
    async fn set_round(
        &self,
        keys: &[LockKey],
        session: SessionId,
        spec: AcquireSpec,
    ) -> Result<Option<SetOutcome>, StoreError> {
        // Each key read and judged at once: the reads are independent, the commit pins each.
        let reads = futures_util::future::try_join_all(keys.iter().map(|key| async move {
            let read = self.read_for_acquire(key, session).await?;
            let judged = self.judge(&read, session).await?;
            Ok::<_, StoreError>((read, judged))
        }))
        .await?;
        // A member's live readers keep the set out as a holder does; its live permits, or
        // the caller reading it, refuse the set outright.
        let views = (keys.iter().zip(&reads))
            .map(|(key, (_, judged))| Ok((key.clone(), judged.exclusive_view(key, session)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        match decide_set(&views, session) {
            SetDecision::Refuse { member, refusal } => {
                let (read, judged) = &reads[member];
                let key = &keys[member];
                if let (Refusal::Delayed { .. } | Refusal::Queued { .. }, Some(dead)) =
                    (refusal, judged.delay_to_start.as_ref())
                    && !self.start_delay(key, dead, read.delay.as_ref()).await?
                {
                    return Ok(None);
                }
                let key = key.clone();
                Ok(Some(SetOutcome::Refused { key, refusal }))
            }
            SetDecision::Grant(tokens) => {
                let tokens = tokens.into_iter().map(|(token, _)| token);
                let members: Vec<Member> = keys
                    .iter()
                    .zip(reads)
                    .zip(tokens)
                    .map(|((key, (read, judged)), token)| Member {
                        key,
                        held: judged.view.holder.is_some(),
                        read,
                        token,
                    })
                    .collect();
                self.commit_set(session, spec, members).await
            }
        }
    }

    /// Commits the set's grants in one transaction: a new grant on a lease of its own for a
    /// key the session does not hold, the same grant (its lease kept alive, its record
    /// pinned) for one it does.
    async fn commit_set(
        &self,
        session: SessionId,
        spec: AcquireSpec,
        members: Vec<Member<'_>>,
    ) -> Result<Option<SetOutcome>, StoreError> {
        let mut compares = Vec::new();
        let mut ops = Vec::new();
        let mut values = Vec::with_capacity(members.len());
        let mut new_leases = Vec::new();
        // The leases of the grant records read: a pooled lease among them was released since
        // its record was read (a stale read, whose compare fails), and its marker would be
        // both put and deleted in one transaction, which etcd refuses outright.
        let read_leases: Vec<i64> = (members.iter())
            .filter_map(|m| m.read.current.as_ref().map(|c| c.value.lease))
            .collect();
        for member in &members {
            let value = if member.held {
                let Some((pins, writes, value)) = self.held_parts(member, spec).await? else {
                    for lease in new_leases {
                        self.reuse_lease_later(spec.lease_ms, lease);
                    }
                    return Ok(None);
                };
                compares.extend(pins);
                ops.extend(writes);
                value
            } else {
                let (etcd, keep_alives) = (&self.members, &self.keep_alives);
                let lease = (self.leases)
                    .grant_lease_for(etcd, keep_alives, spec.lease_ms)
                    .await?;
                new_leases.push(lease);
                if read_leases.contains(&lease) {
                    for lease in new_leases {
                        self.reuse_lease_later(spec.lease_ms, lease);
                    }
                    return Ok(None);
                }
                let value = GrantValue {
                    token: member.token,
                    session,
                    owner: member.read.me.owner.clone(),
                    lease,
                    lease_ms: spec.lease_ms,
                    lock_delay_ms: spec.lock_delay_ms,
                    request: spec.request.0,
                    scope: GrantScope::Exclusive,
                    permits: None,
                };
                let (pins, writes) = self.grant_parts(member.key, session, &member.read, &value)?;
                compares.extend(pins);
                ops.extend(writes);
                value
            };
            values.push(value);
        }
        let committed = self
            .members
            .txn("acquire set", Txn::new().when(compares).and_then(ops))
            .await?;
        if !committed.succeeded() {
            // Lost to another grantor: no record names these leases; the next grants' own.
            for lease in new_leases {
                self.reuse_lease_later(spec.lease_ms, lease);
            }
            return Ok(None);
        }
        Ok(Some(self.set_granted(members, &values)))
    }

    /// A member the session holds already: the same grant again, its lease kept alive (a
    /// longer lease asked for is not granted here: the answer tells the lease the grant has),
    /// its record rewritten without a request when another request asks (either may have told
    /// its client, so neither may abandon it), its queue place gone; pinned on the record as
    /// read and on its and its session's markers. `None` when its lease ended meanwhile.
    async fn held_parts(
        &self,
        member: &Member<'_>,
        spec: AcquireSpec,
    ) -> Result<Option<(Vec<Compare>, Vec<TxnOp>, GrantValue)>, StoreError> {
        let Some(current) = member.read.current.as_ref() else {
            return Ok(None);
        };
        if !self.keep_alive(current.value.lease).await? {
            return Ok(None);
        }
        let old = &current.value;
        let value = GrantValue {
            request: RequestId(old.request).after_regrant(spec.request).0,
            ..old.clone()
        };
        let keys = &self.keys;
        let compares = self.regrant_pins(member.key, current).to_vec();
        let ops = vec![
            TxnOp::put(keys.grant_key(member.key), encode(&value)?, None),
            // Absent when the session has no place: a no-op.
            TxnOp::delete(keys.place_key(member.key, old.session), None),
        ];
        Ok(Some((compares, ops, value)))
    }

    /// After a set's commit: the old leases of grants taken over and of delays ended go, and
    /// no key keeps a hint (the commit's revisions were not read for them).
    fn set_granted(&self, members: Vec<Member<'_>>, values: &[GrantValue]) -> SetOutcome {
        let mut grants: Vec<LockGrant> = Vec::with_capacity(values.len());
        for (member, value) in members.into_iter().zip(values) {
            self.hints.forget(member.key);
            if !member.held {
                let delay = member.read.ended_delay().map(|d| d.value.lease);
                let ended = member.read.current.map(|old| old.value.lease);
                for lease in ended.into_iter().chain(delay) {
                    self.members.revoke_lease_later(lease);
                }
            }
            grants.push(grant_of(member.key, value, value.lease_ms));
        }
        SetOutcome::Granted {
            grants,
            store_now: None,
        }
    }
}

/// One key of a set the round decided to grant.
struct Member<'a> {
    key: &'a LockKey,
    /// The session holds it already: the same grant again.
    held: bool,
    read: KeyRead,
    token: lock_api::FencingToken,
}
