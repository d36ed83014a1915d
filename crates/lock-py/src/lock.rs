//! `Lock`: one held grant, its fencing token and proof, and the held-check a caller runs
//! before each write it guards.

use std::sync::{Arc, Mutex, PoisonError};

use lock_client::LockClientSession;
use lock_client::LockHandle;
use pyo3::prelude::*;

use crate::errors::{LockLost, lock_lost};
use crate::slot::SessionSlot;

/// A held lock. Send `fencing_token` and `proof` with every write it guards, and call
/// `ensure_held()` right before each.
#[pyclass(module = "fencedlock._native")]
pub(crate) struct Lock {
    slot: Arc<SessionSlot>,
    key: String,
    fencing_token: u64,
    proof: Option<String>,
    scope: String,
    fenced_resource: String,
    handle: Mutex<Option<LockHandle>>,
}

impl Lock {
    pub(crate) fn new(
        slot: Arc<SessionSlot>,
        live: &LockClientSession,
        handle: LockHandle,
    ) -> Self {
        Self {
            slot,
            key: handle.lock_key().to_string(),
            fencing_token: handle.fencing_token().0,
            proof: live.fence_proof(&handle),
            scope: handle.scope().as_text(),
            fenced_resource: handle.fenced_resource(),
            handle: Mutex::new(Some(handle)),
        }
    }

    /// Runs `check` on the handle and its session while the lock is unreleased.
    fn with_handle<T>(
        &self,
        check: impl FnOnce(&LockClientSession, &LockHandle) -> Result<T, lock_api::LockLost>,
    ) -> PyResult<T> {
        let handle = self.handle.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(handle) = handle.as_ref() else {
            return Err(LockLost::new_err(format!("{} was released", self.key)));
        };
        let session = self.slot.live()?;
        check(&session, handle).map_err(|lost| lock_lost(&lost))
    }
}

#[pymethods]
impl Lock {
    /// The key.
    #[getter]
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// The grant's fencing token: send it with every write the lock guards.
    #[getter]
    fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The lock-server's signed proof of the grant (`X-Fencing-Proof`), when it signs.
    #[getter]
    fn proof(&self) -> Option<&str> {
        self.proof.as_deref()
    }

    /// What the lock holds of its key: `exclusive` (a lock, a writer), `shared` (a reader),
    /// or `permit-{slot}` (one of a semaphore's permits).
    #[getter]
    fn scope(&self) -> &str {
        &self.scope
    }

    /// The name a resource fences this lock's writes under: the key, or for a permit
    /// `{key}#permit-{slot}` (each slot fenced as a lock is).
    #[getter]
    fn fenced_resource(&self) -> &str {
        &self.fenced_resource
    }

    /// Raises `LockLost` once the lock may be lost (its conservative deadline passed, the
    /// session is gone, the server said so): call it right before each write.
    pub(crate) fn ensure_held(&self) -> PyResult<()> {
        self.with_handle(|session, handle| session.check_still_held(handle))
    }

    /// Seconds the lock is certainly still held for; raises `LockLost` when none.
    fn remaining(&self) -> PyResult<f64> {
        let left = self.with_handle(|session, handle| session.remaining(handle))?;
        Ok(left.as_secs_f64())
    }

    /// Releases the lock (once; later calls do nothing). Raises `LockLost` when it was lost
    /// before the release: whatever ran under it since may have run without it.
    pub(crate) fn release(&self, py: Python<'_>) -> PyResult<()> {
        let handle = self
            .handle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(handle) = handle else { return Ok(()) };
        let (session, runtime) = (self.slot.live()?, Arc::clone(self.slot.runtime()));
        let released = py.detach(|| runtime.block_on(session.release(handle)));
        released.map_err(|lost| lock_lost(&lost))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Releases; a loss is raised only when no other exception is on its way out.
    #[pyo3(signature = (exc_type, _exc_value, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        leave_releasing(self.release(py), exc_type)
    }
}

/// A `with` block's exit after its release answered `released`: the loss is raised only when
/// no other exception (`exc_type`) is on its way out; the exception is never suppressed.
pub(crate) fn leave_releasing(
    released: PyResult<()>,
    exc_type: Option<&Bound<'_, PyAny>>,
) -> PyResult<bool> {
    match released {
        Err(lost) if exc_type.is_none_or(|t| t.is_none()) => Err(lost),
        _ => Ok(false),
    }
}
