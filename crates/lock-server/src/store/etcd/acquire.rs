//! What an acquire needs besides its round (`round.rs`): whether a grant and a session are
//! live, a regrant to the holder, the operations that write a grant, and the ends of an
//! acquire without a grant (a place left, a grant abandoned).

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp};
use lock_api::{LockGrant, LockKey, SessionId};
use lock_store::{AcquireSpec, RequestId, StoreError};

use super::EtcdStore;
use super::codec::{
    GrantValue, Liveness, Place, ReadGrant, SessionValue, decode, encode, grant_of, read_grant,
};

impl EtcdStore {
    /// Whether `grant` is live: its own marker and its holder's session marker exist.
    pub(super) async fn liveness(&self, grant: &GrantValue) -> Result<Liveness, StoreError> {
        let markers = self
            .members
            .read_keys(&[
                self.keys.grant_marker(grant.lease),
                self.keys.session_marker(grant.session),
            ])
            .await?;
        Ok(match (&markers[0], &markers[1]) {
            (None, _) => Liveness::LeaseEnded,
            (Some(_), None) => Liveness::SessionEnded,
            (Some(_), Some(_)) => Liveness::Live,
        })
    }

    /// The live grant of `key` with its record's revision, if any.
    pub(super) async fn live_grant(&self, key: &LockKey) -> Result<Option<ReadGrant>, StoreError> {
        let record = self
            .members
            .read_keys(&[self.keys.grant_key(key)])
            .await?
            .remove(0);
        let Some(grant) = record.map(|kv| read_grant(&kv)).transpose()? else {
            return Ok(None);
        };
        Ok((self.liveness(&grant.value).await? == Liveness::Live).then_some(grant))
    }

    /// The session's record, or the error that heartbeat, acquire and renew answer for a
    /// session that is not live.
    pub(super) fn live_session(
        session: SessionId,
        record: Option<&KeyValue>,
        marker: Option<&KeyValue>,
    ) -> Result<SessionValue, StoreError> {
        let Some(record) = record else {
            return Err(StoreError::SessionUnknown(session));
        };
        if marker.is_none() {
            return Err(StoreError::SessionExpired(session));
        }
        decode(record.value(), "session record")
    }

    /// Same session again (a grant's or a share's): the same token; the lease only grows (so the client's deadline
    /// never lies after the server's expiry). Re-granted to another request than the one it
    /// records, the grant records none (either may have told its client: neither abandons
    /// it). The session's queue place, if it has one, goes.
    pub(super) async fn regrant(
        &self,
        key: &LockKey,
        current: ReadGrant,
        spec: AcquireSpec,
        place: Option<&Place>,
    ) -> Result<Option<LockGrant>, StoreError> {
        let pins = self.regrant_pins(key, &current);
        let old = current.value;
        let grows = spec.lease_ms > old.lease_ms;
        let request = RequestId(old.request).after_regrant(spec.request).0;
        if !grows {
            if !self.keep_alive(old.lease).await? {
                return Ok(None);
            }
            if old.request == request {
                if place.is_some() {
                    self.leave_place(key, old.session).await?;
                }
                return Ok(Some(grant_of(key, &old, old.lease_ms)));
            }
        }
        // A longer lease than the grant has moves the grant onto a new, longer lease; another
        // request's re-grant rewrites the record without a request.
        let lease = if grows {
            self.members.grant_lease(spec.lease_ms).await?
        } else {
            old.lease
        };
        let grown = GrantValue {
            lease,
            lease_ms: spec.lease_ms.max(old.lease_ms),
            request,
            ..old.clone()
        };
        let committed = self
            .members
            .txn(
                "regrant",
                Txn::new().when(pins).and_then(
                    [
                        TxnOp::put(self.keys.record_key(key, &grown), encode(&grown)?, None),
                        // Absent when the session has no place: a no-op.
                        TxnOp::delete(self.keys.place_key(key, old.session), None),
                    ]
                    .into_iter()
                    .chain(
                        grows
                            .then(|| self.move_marker_ops(old.lease, lease))
                            .into_iter()
                            .flatten(),
                    )
                    .collect::<Vec<_>>(),
                ),
            )
            .await?
            .succeeded();
        match (committed, grows) {
            (true, grown_lease) => {
                // Its fence's revision was not read here: no hint for the next cycle.
                self.hints.forget(key);
                if grown_lease {
                    self.members.revoke_lease_later(old.lease);
                }
                Ok(Some(grant_of(key, &grown, grown.lease_ms)))
            }
            (false, true) => {
                self.members.revoke_lease_later(lease);
                Ok(None)
            }
            (false, false) => Ok(None),
        }
    }

    /// What a re-grant of the live grant or share `current` of `key` pins: its record as
    /// read, its lease's marker and its holder's session marker.
    pub(super) fn regrant_pins(&self, key: &LockKey, current: &ReadGrant) -> [Compare; 3] {
        let old = &current.value;
        [
            Compare::mod_revision(
                self.keys.record_key(key, old),
                CompareOp::Equal,
                current.mod_revision,
            ),
            Compare::version(self.keys.grant_marker(old.lease), CompareOp::Greater, 0),
            Compare::version(self.keys.session_marker(old.session), CompareOp::Greater, 0),
        ]
    }

    /// A grant's marker moved from lease `from` to lease `to`.
    fn move_marker_ops(&self, from: i64, to: i64) -> [TxnOp; 2] {
        [
            TxnOp::put(
                self.keys.grant_marker(to),
                "",
                Some(PutOptions::new().with_lease(to)),
            ),
            TxnOp::delete(self.keys.grant_marker(from), None),
        ]
    }

    /// Leaves `session`'s place in `key`'s queue. The place's lease, now without a key, ends
    /// at its TTL on its own.
    pub(super) async fn leave_place(
        &self,
        key: &LockKey,
        session: SessionId,
    ) -> Result<(), StoreError> {
        self.members
            .txn(
                "leave queue",
                Txn::new().and_then([TxnOp::delete(self.keys.place_key(key, session), None)]),
            )
            .await
            .map(|_| ())
    }

    /// [`LockStore::abandon`]: a place carries no request here, so `leave` removes the
    /// session's place; the grant or share goes only while its record names `request`,
    /// pinned on the record's revision (a later request's re-grant rewrites it).
    pub(super) async fn abandon_grant(
        &self,
        key: &LockKey,
        session: SessionId,
        request: RequestId,
        leave: bool,
    ) -> Result<bool, StoreError> {
        if request == RequestId::NONE {
            return Ok(false);
        }
        if leave {
            self.leave_place(key, session).await?;
        }
        let read = self
            .members
            .read(vec![
                TxnOp::get(self.keys.grant_key(key), None),
                TxnOp::get(
                    self.keys.hold_prefix(key),
                    Some(GetOptions::new().with_prefix()),
                ),
            ])
            .await?;
        let records = read.iter().flatten().map(read_grant);
        for grant in records {
            let grant = grant?;
            if grant.value.session != session || grant.value.request != request.0 {
                continue;
            }
            return self
                .delete_grant_if_unchanged(
                    &self.keys.record_key(key, &grant.value),
                    grant.mod_revision,
                    grant.value.lease,
                    Some(grant.value.lease_ms),
                    None,
                )
                .await;
        }
        Ok(false)
    }

    /// A grant's writes (a share's too): its record, the key's fence raised to its token,
    /// its lease's marker.
    pub(super) fn grant_ops(
        &self,
        key: &LockKey,
        grant: &GrantValue,
    ) -> Result<Vec<TxnOp>, StoreError> {
        Ok(vec![
            TxnOp::put(self.keys.record_key(key, grant), encode(grant)?, None),
            TxnOp::put(self.keys.fence_key(key), encode(&grant.token.0)?, None),
            TxnOp::put(
                self.keys.grant_marker(grant.lease),
                "",
                Some(PutOptions::new().with_lease(grant.lease)),
            ),
        ])
    }
}
