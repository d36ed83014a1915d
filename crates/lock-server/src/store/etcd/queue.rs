//! Queue places: a refused caller's place in its key's FIFO queue, on a lease of its own.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use lock_api::{Claim, LockKey, SessionId};
use lock_store::StoreError;

use super::EtcdStore;
use super::codec::{Place, encode_place, lease_seconds};

impl EtcdStore {
    /// A refused caller with `queue_ms > 0` keeps its place in `key`'s queue, claiming
    /// `claim`, for `queue_ms` more (rounded up to whole seconds), so that a place lapses that
    /// long after the last call that renewed it, as on PostgreSQL: the place's lease kept
    /// alive when its TTL and claim are those, else the place put again on a lease of that
    /// TTL (the same key keeps its `create_revision`, so its turn; the earlier lease, now
    /// without a key, ends on its own), or a new place at the back of the queue. (Keeping a
    /// longer lease alive would let a crashed replica's place block its queue for up to the
    /// whole wait past its deadline.)
    ///
    /// A place's put also reads `pins` (what held the caller back: the grant record, the
    /// live shares, the places ahead) as they are once the place exists: a release or a leave committed after
    /// the caller's read but before its place existed woke nobody (the wake-up watch read the
    /// queue without it), so the caller must not sleep on its refusal. `false`: a pin moved,
    /// decide again (with the place, so the turn is kept). A place kept alive needs no pins:
    /// it existed at the read. A put again on a new lease may find its old place gone (the
    /// lease ended), so it is pinned too; at worst that costs one more round.
    pub(super) async fn hold_place(
        &self,
        key: &LockKey,
        session: SessionId,
        (queue_ms, claim): (u64, Claim),
        mine: Option<&Place>,
        pins: Vec<Pin>,
    ) -> Result<bool, StoreError> {
        if queue_ms == 0 {
            return Ok(true);
        }
        let ttl_s = lease_seconds(queue_ms);
        if let Some(place) = mine {
            let same = place.ttl_s == ttl_s && place.claim == claim;
            if same && self.keep_alive(place.lease).await? {
                return Ok(true);
            }
        }
        let lease = self.members.grant_lease(queue_ms).await?;
        let placed = self
            .members
            .txn(
                "queue",
                Txn::new()
                    .when([Compare::version(
                        self.keys.session_marker(session),
                        CompareOp::Greater,
                        0,
                    )])
                    .and_then(
                        [TxnOp::put(
                            self.keys.place_key(key, session),
                            encode_place(ttl_s, claim)?,
                            Some(PutOptions::new().with_lease(lease)),
                        )]
                        .into_iter()
                        .chain(pins.iter().map(Pin::read))
                        .collect::<Vec<_>>(),
                    ),
            )
            .await?;
        if !placed.succeeded() {
            // The session ended meanwhile: no place (it would not count anyway).
            self.members.revoke_lease_later(lease);
            return Ok(true);
        }
        // A place's earlier lease carries no key now; it ends at its TTL on its own.
        let now = placed.op_responses().into_iter().skip(1);
        Ok(pins.iter().zip(now).all(|(pin, now)| match now {
            TxnOpResponse::Get(get) => pin.holds(get.kvs()),
            _ => false,
        }))
    }
}

/// Something a refused caller read, pinned while it takes a new queue place.
pub(super) enum Pin {
    /// A grant record as read at this `mod_revision` (0: absent): not rewritten, deleted or
    /// created since.
    Record { key: String, mod_revision: i64 },
    /// The places ahead in a key's queue (`prefix`), by `create_revision`: all still there.
    Places { prefix: String, ahead: Vec<i64> },
}

impl Pin {
    /// The grant record `key`, as read at `mod_revision` (0: absent).
    pub(super) fn record(key: String, mod_revision: i64) -> Self {
        Self::Record { key, mod_revision }
    }

    /// The places created at `ahead` under the queue `prefix`.
    pub(super) fn places(prefix: String, ahead: Vec<i64>) -> Self {
        Self::Places { prefix, ahead }
    }

    /// The read, in the place's transaction, of what is pinned.
    fn read(&self) -> TxnOp {
        match self {
            Self::Record { key, .. } => TxnOp::get(key.as_str(), None),
            Self::Places { prefix, .. } => TxnOp::get(
                prefix.as_str(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            ),
        }
    }

    /// Whether what is pinned is as read, `kvs` being [`Self::read`]'s answer.
    fn holds(&self, kvs: &[KeyValue]) -> bool {
        match self {
            Self::Record { mod_revision, .. } => {
                kvs.first().map_or(0, KeyValue::mod_revision) == *mod_revision
            }
            Self::Places { ahead, .. } => ahead
                .iter()
                .all(|created| kvs.iter().any(|kv| kv.create_revision() == *created)),
        }
    }
}
