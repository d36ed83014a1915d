//! `LockHandle`: the record of one grant as a client holds it.
//!
//! The handle carries the grant (key, token, lease, session, the server's signed proof) and the client's conservative
//! deadline in monotonic nanoseconds, shared with the SDK that renews it. The SDK attaches
//! itself as the handle's [`HandleOwner`] so a handle dropped without release is released in
//! the background. This type does no I/O.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lock_api::{FencingToken, GrantScope, LockKey, SessionId};

/// Told when a handle is dropped without having been released (the SDK releases it).
pub(crate) trait HandleOwner: Send + Sync + fmt::Debug {
    /// `key` with `token` was dropped unreleased.
    fn dropped_unreleased(&self, key: &LockKey, token: FencingToken);
}

/// One held grant, as [`LockClientSession::acquire`](crate::LockClientSession::acquire)
/// returns it. Not `Clone`: each acquire returns its own handle, and each handle is released
/// once (by [`LockClientSession::release`](crate::LockClientSession::release), or in the
/// background when dropped).
pub struct LockHandle {
    lock_key: LockKey,
    fencing_token: FencingToken,
    lease_ms: u64,
    session_id: SessionId,
    proof: Option<String>,
    scope: GrantScope,
    client_deadline_nanos: Arc<AtomicU64>,
    owner: Option<Arc<dyn HandleOwner>>,
}

impl LockHandle {
    /// A handle over a grant. `client_deadline_nanos` is shared with whoever renews it.
    pub(crate) fn new(
        lock_key: LockKey,
        fencing_token: FencingToken,
        lease_ms: u64,
        session_id: SessionId,
        client_deadline_nanos: Arc<AtomicU64>,
        owner: Option<Arc<dyn HandleOwner>>,
    ) -> Self {
        Self {
            lock_key,
            fencing_token,
            lease_ms,
            session_id,
            proof: None,
            scope: GrantScope::Exclusive,
            client_deadline_nanos,
            owner,
        }
    }

    /// The same handle carrying the lock-server's proof of the grant.
    pub(crate) fn with_proof(mut self, proof: Option<String>) -> Self {
        self.proof = proof;
        self
    }

    /// The same handle over a share of its key (a reader's, a permit: ADR 0007).
    pub(crate) fn with_scope(mut self, scope: GrantScope) -> Self {
        self.scope = scope;
        self
    }

    /// What the grant holds of its key: the whole key (a lock, a writer), a reader's share,
    /// or a permit with its slot. A resource fences a permit per slot
    /// ([`GrantScope::fenced_resource`]); the proof signs the scope.
    pub fn scope(&self) -> GrantScope {
        self.scope
    }

    /// The name a resource fences this grant under: the key, or for a permit
    /// `{key}#permit-{slot}` (each slot fenced as a lock is).
    pub fn fenced_resource(&self) -> String {
        self.scope.fenced_resource(&self.lock_key)
    }

    /// The lock-server's signed proof of this grant (`X-Fencing-Proof`), when it signs
    /// grants: send it, unchanged, next to the token with every write it guards.
    pub fn fence_proof(&self) -> Option<&str> {
        self.proof.as_deref()
    }

    /// The key held.
    pub fn lock_key(&self) -> &LockKey {
        &self.lock_key
    }

    /// The grant's fencing token: pass it, unchanged, with every write it guards.
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing_token
    }

    /// The lease the server granted (after clamping).
    pub fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    /// The holding session.
    pub fn session_id(&self) -> SessionId {
        self.session_id
    }

    /// The client's current conservative deadline on its monotonic clock: the send time of
    /// the last successful grant or renew plus `lease × (1 − safety margin)`.
    pub fn client_deadline_nanos(&self) -> u64 {
        self.client_deadline_nanos.load(Ordering::Acquire)
    }

    /// Detaches the owner: the handle is being released explicitly.
    pub(crate) fn disarm(mut self) -> (LockKey, FencingToken) {
        self.owner = None;
        (self.lock_key.clone(), self.fencing_token)
    }
}

impl fmt::Debug for LockHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockHandle")
            .field("lock_key", &self.lock_key)
            .field("fencing_token", &self.fencing_token)
            .field("lease_ms", &self.lease_ms)
            .field("scope", &self.scope)
            .field("session_id", &self.session_id)
            .field("client_deadline_nanos", &self.client_deadline_nanos())
            .finish()
    }
}

impl Drop for LockHandle {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            owner.dropped_unreleased(&self.lock_key, self.fencing_token);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<(LockKey, FencingToken)>>);

    impl HandleOwner for Recorder {
        fn dropped_unreleased(&self, key: &LockKey, token: FencingToken) {
            self.0.lock().unwrap().push((key.clone(), token));
        }
    }

    fn handle(owner: &Arc<Recorder>) -> LockHandle {
        let owner: Arc<dyn HandleOwner> = owner.clone();
        LockHandle::new(
            LockKey::parse("k").unwrap(),
            FencingToken(4),
            1000,
            SessionId::random(),
            Arc::new(AtomicU64::new(77)),
            Some(owner),
        )
    }

    #[test]
    fn dropped_handles_tell_their_owner_and_disarmed_ones_do_not() {
        let owner = Arc::new(Recorder::default());
        drop(handle(&owner));
        let (key, token) = handle(&owner).disarm();
        assert_eq!((key.as_str(), token), ("k", FencingToken(4)));
        let seen = owner.0.lock().unwrap();
        assert_eq!(seen.len(), 1, "only the dropped handle was reported");
        assert_eq!(seen[0].1, FencingToken(4));
    }

    #[test]
    fn deadline_is_shared_live() {
        let owner = Arc::new(Recorder::default());
        let h = handle(&owner);
        assert_eq!(h.client_deadline_nanos(), 77);
        h.client_deadline_nanos.store(99, Ordering::Release);
        assert_eq!(h.client_deadline_nanos(), 99);
        let _ = h.disarm();
    }
}
