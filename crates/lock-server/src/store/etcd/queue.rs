//! Queue places: a refused caller's place in its key's FIFO queue, on a lease of its own.

use super::*;

impl EtcdStore {
    /// A refused caller with `queue_ms > 0` keeps its place in `key`'s queue for `queue_ms`
    /// more (rounded up to whole seconds), so that a place lapses that long after the last
    /// call that renewed it, as on PostgreSQL: the place's lease kept alive when its TTL is
    /// that, else the place put again on a lease of that TTL (the same key keeps its
    /// `create_revision`, so its turn; the earlier lease, now without a key, ends on its
    /// own), or a new place at the back of the queue. (Keeping a longer lease alive would let
    /// a crashed replica's place block its queue for up to the whole wait past its deadline.)
    pub(super) async fn hold_place(
        &self,
        key: &LockKey,
        session: SessionId,
        queue_ms: u64,
        mine: Option<&Place>,
    ) -> Result<(), StoreError> {
        if queue_ms == 0 {
            return Ok(());
        }
        let ttl_s = lease_seconds(queue_ms);
        if let Some(place) = mine {
            if place.ttl_s == ttl_s && self.keep_alive(place.lease).await? {
                return Ok(());
            }
        }
        let lease = self.grant_lease(queue_ms).await?;
        let placed = self
            .txn(
                "queue",
                Txn::new()
                    .when([Compare::version(
                        self.session_marker(session),
                        CompareOp::Greater,
                        0,
                    )])
                    .and_then([TxnOp::put(
                        self.place_key(key, session),
                        encode(&ttl_s)?,
                        Some(PutOptions::new().with_lease(lease)),
                    )]),
            )
            .await?
            .succeeded();
        if !placed {
            // The session ended meanwhile: no place (it would not count anyway).
            self.revoke_lease_later(lease);
        }
        // A place's earlier lease carries no key now; it ends at its TTL on its own.
        Ok(())
    }
}
