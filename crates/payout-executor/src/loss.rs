//! `SessionLossHandler`: the executor's `on_lock_lost` listener. It runs on the SDK's
//! heartbeat thread, so it only marks the in-flight payout abandoned (its [`Watch`]) and logs
//! `payout_abandoned`: no I/O, no compensating write (a lost lease is not evidence about the
//! rail). The `session_lost` line itself (owner, session, key, token, backend, reason) is
//! logged once per lost grant by the SDK that delivers the loss.
//!
//! The executor's guard before every write asks the watch first (the listener's verdict),
//! then `check_still_held` (the SDK's conservative clock): see `guard::guard`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use lock_api::{LockKey, LockLost};
use lock_client::LockClientSession;
use lock_client::LockHandle;

/// The in-flight payout of one grant: abandoned once the listener hears its grant is lost.
#[derive(Debug, Clone)]
pub struct Watch {
    payout_id: i64,
    handle_token: u64,
    lost: Arc<OnceLock<LockLost>>,
}

impl Watch {
    /// `Err` with the listener's reason once the watched grant was lost.
    pub fn check(&self) -> Result<(), LockLost> {
        match self.lost.get() {
            Some(lost) => Err(lost.clone()),
            None => Ok(()),
        }
    }
}

/// The in-flight payouts by lock key.
#[derive(Debug, Clone, Default)]
pub struct SessionLossHandler {
    watches: Arc<Mutex<HashMap<LockKey, Watch>>>,
}

impl SessionLossHandler {
    /// Registers the handler on `session` (once per session).
    pub fn register(session: &LockClientSession, owner: String) -> Self {
        let handler = Self::default();
        let watches = handler.watches.clone();
        let session_id = session.id();
        let backend = session.backend();
        session.on_lock_lost(move |lost: &LockLost| {
            let watch = watches
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&lost.lock_key)
                .filter(|w| w.handle_token == lost.fencing_token.0)
                .cloned();
            // A loss of a grant no payout is using (released, or an older token) abandons nothing.
            let Some(watch) = watch else { return };
            let _ = watch.lost.set(lost.clone());
            tracing::warn!(
                event = "payout_abandoned",
                payout_id = watch.payout_id,
                owner = %owner,
                session = %session_id.tag(),
                key = %lost.lock_key,
                token = lost.fencing_token.0,
                backend,
                reason = lost.reason.as_str(),
                "payout abandoned by this worker: no write after the loss"
            );
        });
        handler
    }

    /// Watches `handle`'s grant while `payout_id` is in flight under it.
    pub fn watch(&self, payout_id: i64, handle: &LockHandle) -> Watch {
        let watch = Watch {
            payout_id,
            handle_token: handle.fencing_token().0,
            lost: Arc::new(OnceLock::new()),
        };
        self.watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(handle.lock_key().clone(), watch.clone());
        watch
    }

    /// Stops watching `key`.
    pub fn unwatch(&self, key: &LockKey) {
        self.watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}
