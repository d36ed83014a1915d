//! A key's shares (readers', permits': ADR 0007) outside an acquire: a record found by its
//! token (renew, release), a key read whole and inspected (L7: its grant, or every live
//! share), every live share revoked at once, and shares ended in one transaction with the
//! lock-delay their ends start (revoke, the reaper).

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp};
use lock_api::{FencingToken, HolderInfo, LockInfo, LockKey, SessionId};
use lock_store::{RevokeNote, StoreError};

use super::EtcdStore;
use super::codec::{DelayValue, Place, ReadGrant, after_ms, encode_revocation, read_grant};
use super::delay::shares_delay;
use super::round::ACQUIRE_ROUNDS_MAX;

/// Shares ended per transaction: each is a compare and two deletes, and etcd takes at most
/// `--max-txn-ops` (default 128) of each.
const SHARES_PER_TXN: usize = 40;

/// A key as one read saw it: its grant record, its shares' records (lowest token first) and
/// its queue places (arrival order, with their claims), live or not.
pub(super) struct KeyState {
    pub(super) grant: Option<ReadGrant>,
    pub(super) holds: Vec<ReadGrant>,
    pub(super) places: Vec<Place>,
    /// The key's value record (what its grant announces), read with the grant.
    pub(super) value: Option<KeyValue>,
}

/// How shares are ended, besides their records and markers going.
pub(super) struct Ending {
    /// The key's fence as read (`mod_revision`): compared, so that no share granted since
    /// the read outlives a revoke.
    pub(super) fence_revision: Option<i64>,
    /// The lock-delay to start, and the delay record's `mod_revision` as read (0: absent).
    pub(super) delay: Option<(DelayValue, i64)>,
    /// Another write of the first transaction (a revoke's note).
    pub(super) also: Option<TxnOp>,
}

impl EtcdStore {
    /// Of `records` (the key's grant record and its share record of `token`, as read), the
    /// one that `session` holds with `token`.
    pub(super) fn record_of(
        records: &[Option<KeyValue>],
        session: SessionId,
        token: FencingToken,
    ) -> Result<Option<ReadGrant>, StoreError> {
        for kv in records.iter().flatten() {
            let grant = read_grant(kv)?;
            if grant.value.session == session && grant.value.token == token {
                return Ok(Some(grant));
            }
        }
        Ok(None)
    }

    /// `key`'s grant record, shares, queue places and value record, in one read.
    pub(super) async fn key_state(&self, key: &LockKey) -> Result<KeyState, StoreError> {
        let all = || Some(GetOptions::new().with_prefix());
        let mut read = self
            .members
            .read(vec![
                TxnOp::get(self.keys.grant_key(key), None),
                TxnOp::get(self.keys.hold_prefix(key), all()),
                TxnOp::get(self.keys.queue_prefix(key), all()),
                TxnOp::get(self.keys.value_key(key), None),
            ])
            .await?;
        let value = read.pop().unwrap_or_default().pop();
        let places = self.keys.read_places(&read.pop().unwrap_or_default())?;
        let holds = read.pop().unwrap_or_default();
        let holds = holds.iter().map(read_grant).collect::<Result<_, _>>()?;
        let grant = read.pop().unwrap_or_default();
        let grant = grant.first().map(read_grant).transpose()?;
        Ok(KeyState {
            grant,
            holds,
            places,
            value,
        })
    }

    /// Whether each of `grants` is live (its lease's and its holder's session's markers
    /// both there), and after them whether each of `places`' sessions is: one read per
    /// [`super::members::TXN_OPS_MAX`] markers.
    pub(super) async fn live(
        &self,
        grants: &[&ReadGrant],
        places: &[Place],
    ) -> Result<(Vec<bool>, Vec<bool>), StoreError> {
        let mut checks = Vec::with_capacity(2 * grants.len() + places.len());
        for grant in grants {
            checks.push(self.keys.grant_marker(grant.value.lease));
            checks.push(self.keys.session_marker(grant.value.session));
        }
        checks.extend(places.iter().map(|p| self.keys.session_marker(p.session)));
        let mut found = self.members.exist(&checks).await?;
        let places_live = found.split_off(2 * grants.len());
        let grants_live = found.chunks(2).map(|m| m[0] && m[1]).collect();
        Ok((grants_live, places_live))
    }

    /// [`lock_store::LockStore::get`]: the live grant of the whole key, or else every live
    /// share (the top-level fields naming the newest), with the live waiters.
    pub(super) async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>, StoreError> {
        let state = self.key_state(key).await?;
        let grants: Vec<&ReadGrant> = state.grant.iter().chain(&state.holds).collect();
        let (live, places_live) = self.live(&grants, &state.places).await?;
        let waiters = places_live.iter().filter(|l| **l).count() as u64;
        let mut live = grants
            .into_iter()
            .zip(live)
            .filter(|(_, l)| *l)
            .map(|(g, _)| g);
        let Some(first) = live.next() else {
            return Ok(None);
        };
        let info = |grant: &ReadGrant, holders, permits| LockInfo {
            lock_key: key.clone(),
            fencing_token: grant.value.token,
            owner_id: grant.value.owner.clone(),
            expires_at: after_ms(grant.value.lease_ms),
            waiters,
            holders,
            permits,
            value: None,
        };
        if first.value.scope.is_exclusive() {
            let value = Self::value_of(state.value.as_ref(), first)?;
            return Ok(Some(LockInfo {
                value,
                ..info(first, Vec::new(), None)
            }));
        }
        let shares: Vec<&ReadGrant> = std::iter::once(first).chain(live).collect();
        let holders = (shares.iter())
            .map(|s| HolderInfo {
                fencing_token: s.value.token,
                owner_id: s.value.owner.clone(),
                expires_at: after_ms(s.value.lease_ms),
                scope: s.value.scope,
            })
            .collect();
        let newest = shares[shares.len() - 1];
        Ok(Some(info(newest, holders, first.value.permits)))
    }

    /// [`lock_store::LockStore::revoke`] of a key no grant holds: every live share ends at
    /// once (involuntarily: the longest lock-delay among them starts, exempting nobody), the
    /// note naming the newest, whose token is answered; `None` when no share is live. Pinned
    /// on the fence, so that a share granted meanwhile is read and revoked too.
    pub(super) async fn revoke_shares(
        &self,
        key: &LockKey,
        note: &RevokeNote,
    ) -> Result<Option<FencingToken>, StoreError> {
        for _ in 0..ACQUIRE_ROUNDS_MAX {
            let mut read = self
                .members
                .read(vec![
                    TxnOp::get(self.keys.fence_key(key), None),
                    TxnOp::get(self.keys.delay_key(key), None),
                    TxnOp::get(
                        self.keys.hold_prefix(key),
                        Some(GetOptions::new().with_prefix()),
                    ),
                ])
                .await?;
            let holds = read.pop().unwrap_or_default();
            let holds = holds
                .iter()
                .map(read_grant)
                .collect::<Result<Vec<_>, _>>()?;
            let (live, _) = self.live(&holds.iter().collect::<Vec<_>>(), &[]).await?;
            let live: Vec<ReadGrant> = (holds.into_iter().zip(live))
                .filter_map(|(h, live)| live.then_some(h))
                .collect();
            let Some(newest) = live.iter().map(|s| s.value.token).max() else {
                return Ok(None);
            };
            let delay_ms = live.iter().map(|s| s.value.lock_delay_ms).max();
            let delay = delay_ms.filter(|ms| *ms > 0).map(|ms| {
                let tokens = live.iter().map(|s| s.value.token).collect();
                let prior = read[1].first().map_or(0, KeyValue::mod_revision);
                (shares_delay(tokens, ms), prior)
            });
            let fence = read[0].first().map_or(0, KeyValue::mod_revision);
            let ending = Ending {
                fence_revision: Some(fence),
                delay,
                also: Some(TxnOp::put(
                    self.keys.revocation_key(key),
                    encode_revocation(newest, note)?,
                    None,
                )),
            };
            if self.end_shares(key, &live, ending).await? {
                return Ok(Some(newest));
            }
        }
        Err(StoreError::Unavailable(format!(
            "revoke of {key}'s shares lost {ACQUIRE_ROUNDS_MAX} races in a row"
        )))
    }

    /// Ends `shares` of `key` (their records and markers deleted, each pinned on its
    /// record as read), as `ending` says; their leases then go. `false` when a record or a
    /// pin changed since the read (those of earlier transactions, when there are several,
    /// stay ended).
    pub(super) async fn end_shares(
        &self,
        key: &LockKey,
        shares: &[ReadGrant],
        ending: Ending,
    ) -> Result<bool, StoreError> {
        let mut first = Some(ending.also);
        for chunk in shares.chunks(SHARES_PER_TXN) {
            let mut compares = Vec::with_capacity(chunk.len() + 2);
            let mut ops = Vec::with_capacity(2 * chunk.len() + 3);
            for share in chunk {
                let record = self.keys.record_key(key, &share.value);
                compares.push(Compare::mod_revision(
                    record.as_str(),
                    CompareOp::Equal,
                    share.mod_revision,
                ));
                ops.push(TxnOp::delete(record, None));
                ops.push(TxnOp::delete(
                    self.keys.grant_marker(share.value.lease),
                    None,
                ));
            }
            if let Some(revision) = ending.fence_revision {
                let fence = self.keys.fence_key(key);
                compares.push(Compare::mod_revision(fence, CompareOp::Equal, revision));
            }
            let mut delay_lease = None;
            if let Some(also) = first.take() {
                if let Some((value, prior)) = &ending.delay {
                    let (lease, writes) = self.delay_ops(key, value.clone()).await?;
                    let path = self.keys.delay_key(key);
                    compares.push(Compare::mod_revision(path, CompareOp::Equal, *prior));
                    ops.extend(writes);
                    delay_lease = Some(lease);
                }
                ops.extend(also);
            }
            let txn = Txn::new().when(compares).and_then(ops);
            if !self.members.txn("end shares", txn).await?.succeeded() {
                if let Some(lease) = delay_lease {
                    self.members.revoke_lease_later(lease);
                }
                return Ok(false);
            }
            for share in chunk {
                self.members.revoke_lease_later(share.value.lease);
            }
        }
        Ok(true)
    }
}
