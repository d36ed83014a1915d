//! What a session's Python objects share: the runtime the SDK's calls run on, and the
//! session while it is open. A `Session` and each of its `Lock`s hold the same slot; closing
//! the session empties it.

use std::sync::{Arc, Mutex, PoisonError};

use lock_client::{LockClient, LockClientSession};
use pyo3::PyResult;

use crate::errors::{ConfigError, SessionLost};

/// The runtime a client's calls run on (current-thread: each call on its caller's thread).
pub(crate) type Runtime = Arc<tokio::runtime::Runtime>;

/// How long one wait of an iterator (an observer, a watcher) runs with the GIL released
/// before it checks for a signal (Ctrl-C) and waits on.
pub(crate) const SIGNAL_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// A client's SDK client while it is open, shared by the iterators it made.
#[derive(Default)]
pub(crate) struct ClientSlot(Mutex<Option<Arc<LockClient>>>);

impl ClientSlot {
    pub(crate) fn new(client: LockClient) -> Arc<Self> {
        Arc::new(Self(Mutex::new(Some(Arc::new(client)))))
    }

    /// The client, while it is open.
    pub(crate) fn live(&self) -> PyResult<Arc<LockClient>> {
        (self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
        .ok_or_else(|| ConfigError::new_err("the client is closed"))
    }

    /// Closes it: the client, if it was open.
    pub(crate) fn take(&self) -> Option<Arc<LockClient>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

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
