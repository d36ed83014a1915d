//! `SessionLossHandler`: the executor's `on_lock_lost` listener. It runs on the SDK's
//! heartbeat thread, so it only flips the in-flight payout's flag and logs
//! `payout_abandoned`: no I/O, no compensating write (a lost lease is not evidence about the
//! rail). The `session_lost` line itself (owner, session, key, token, backend, reason) is
//! logged once per lost grant by the SDK that delivers the loss.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use lock_api::{LockKey, LockLost};
use lock_client::LockClientSession;

/// Per-payout "lock lost" flags.
#[derive(Debug, Clone, Default)]
pub struct SessionLossHandler {
    flags: Arc<Mutex<HashMap<LockKey, Arc<AtomicBool>>>>,
}

impl SessionLossHandler {
    /// Registers the handler on `session` (once per process).
    pub fn register(session: &LockClientSession, owner: String) -> Self {
        let handler = Self::default();
        let flags = handler.flags.clone();
        let session_id = session.id();
        let backend = session.backend().as_str();
        session.on_lock_lost(move |lost: &LockLost| {
            if let Some(flag) = flags
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&lost.lock_key)
            {
                flag.store(true, Ordering::SeqCst);
            }
            tracing::warn!(
                event = "payout_abandoned",
                owner = %owner,
                session = %session_id,
                key = %lost.lock_key,
                token = lost.fencing_token.0,
                backend,
                reason = lost.reason.as_str(),
                "payout abandoned by this worker: no write after the loss"
            );
        });
        handler
    }

    /// A flag that turns true if `key`'s grant is lost while watched.
    pub fn watch(&self, key: &LockKey) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        self.flags
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.clone(), flag.clone());
        flag
    }

    /// Stops watching `key`.
    pub fn unwatch(&self, key: &LockKey) {
        self.flags
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}
