//! What a session's Python objects share: the runtime the SDK's calls run on, and the
//! session while it is open. A `Session` and each of its `Lock`s hold the same slot; closing
//! the session empties it.

use std::sync::{Arc, Mutex, PoisonError};

use lock_client::LockClientSession;
use pyo3::PyResult;

use crate::errors::SessionLost;

/// The runtime a client's calls run on (current-thread: each call on its caller's thread).
pub(crate) type Runtime = Arc<tokio::runtime::Runtime>;

/// One session, shared by its Python objects.
pub(crate) struct SessionSlot {
    runtime: Runtime,
    session: Mutex<Option<Arc<LockClientSession>>>,
}

impl SessionSlot {
    pub(crate) fn new(session: LockClientSession, runtime: Runtime) -> Arc<Self> {
        Arc::new(Self {
            runtime,
            session: Mutex::new(Some(Arc::new(session))),
        })
    }

    /// The session, while it is open.
    pub(crate) fn live(&self) -> PyResult<Arc<LockClientSession>> {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| SessionLost::new_err("the session is closed"))
    }

    /// Empties the slot, and answers the session for the caller to close. While a call on
    /// another thread still uses it, that call holds the last reference: when it returns,
    /// the session is dropped, and the SDK then closes it in the background (its `Drop`).
    pub(crate) fn take(&self) -> Option<LockClientSession> {
        let session = self
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        session.and_then(|s| Arc::try_unwrap(s).ok())
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }
}
