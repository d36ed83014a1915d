//! Grant leases, reused. A grant needs a lease of its own (its `lease_ms`, apart from its
//! session's TTL); granting one is a Raft proposal (a WAL fsync on a majority) and revoking
//! it another, which doubled the proposals of a lock cycle. A released grant's lease, which
//! its release transaction left carrying no key, goes back to this replica's pool by TTL; the
//! next grant of that TTL keeps it alive (a keep-alive is answered by the etcd leader alone,
//! no proposal) and puts its marker on it. A kept-alive lease ends its TTL after the
//! keep-alive, which follows the request's arrival, so the grant lasts at least `lease_ms`
//! from then, as a new lease would (I4).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lock_store::StoreError;

use super::codec::lease_seconds;
use super::keep_alive::KeepAlives;
use super::members::Members;

/// Leases kept per TTL (whole seconds) per replica; a release finding the pool full revokes.
const POOLED_LEASES_MAX_PER_TTL: usize = 256;

/// Released grants' leases, by TTL in whole seconds.
#[derive(Default)]
pub(super) struct LeasePool {
    by_ttl_s: Mutex<HashMap<i64, Vec<i64>>>,
}

impl LeasePool {
    fn take(&self, ttl_s: i64) -> Option<i64> {
        self.lock().get_mut(&ttl_s)?.pop()
    }

    /// Whether the pool had room for `lease`.
    fn put(&self, ttl_s: i64, lease: i64) -> bool {
        let mut pool = self.lock();
        let leases = pool.entry(ttl_s).or_default();
        if leases.len() >= POOLED_LEASES_MAX_PER_TTL {
            return false;
        }
        leases.push(lease);
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Vec<i64>>> {
        self.by_ttl_s
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl LeasePool {
    /// The lease an acquire's grant goes on: `spare` (taken earlier by a round that lost its
    /// race), or one from [`Self::grant_lease_for`], kept in `spare` until a commit uses it.
    pub(super) async fn lease_for(
        &self,
        members: &Members,
        keep_alives: &KeepAlives,
        lease_ms: u64,
        spare: &mut Option<i64>,
    ) -> Result<i64, StoreError> {
        if let Some(lease) = *spare {
            return Ok(lease);
        }
        let lease = self.grant_lease_for(members, keep_alives, lease_ms).await?;
        *spare = Some(lease);
        Ok(lease)
    }

    /// A lease for a grant of `lease_ms`, its TTL counted from now: a pooled one kept alive,
    /// or a new one.
    pub(super) async fn grant_lease_for(
        &self,
        members: &Members,
        keep_alives: &KeepAlives,
        lease_ms: u64,
    ) -> Result<i64, StoreError> {
        let ttl_s = lease_seconds(lease_ms);
        while let Some(lease) = self.take(ttl_s) {
            // Ended meanwhile (unused past its TTL): drop it, try the next.
            if keep_alives.keep_alive(members, lease).await? {
                return Ok(lease);
            }
        }
        members.grant_lease(lease_ms).await
    }

    /// `lease`, of a grant of `lease_ms` that a transaction just ended, carrying no key any
    /// more: kept for the next grant, or revoked when the pool is full.
    pub(super) fn reuse_lease_later(&self, members: &Arc<Members>, lease_ms: u64, lease: i64) {
        if !self.put(lease_seconds(lease_ms), lease) {
            members.revoke_lease_later(lease);
        }
    }
}
