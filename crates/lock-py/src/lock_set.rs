//! `LockSet`: keys held together (a key set, acquired all or nothing, ADR 0007), each a
//! `Lock` with its own token and proof; its held-check covers every member.

use pyo3::prelude::*;

use crate::lock::{Lock, leave_releasing};

/// Keys held together. Send each member's `fencing_token` and `proof` with the writes it
/// guards, and call `ensure_held()` right before each: it raises `LockLost` if any member
/// may be lost.
#[pyclass(module = "fencedlock._native")]
pub(crate) struct LockSet {
    locks: Vec<Py<Lock>>,
}

impl LockSet {
    pub(crate) fn new(locks: Vec<Py<Lock>>) -> Self {
        Self { locks }
    }
}

#[pymethods]
impl LockSet {
    /// The members, sorted by key.
    #[getter]
    fn locks(&self, py: Python<'_>) -> Vec<Py<Lock>> {
        self.locks.iter().map(|lock| lock.clone_ref(py)).collect()
    }

    /// The keys, sorted.
    #[getter]
    fn keys(&self, py: Python<'_>) -> Vec<String> {
        let key = |lock: &Py<Lock>| lock.borrow(py).key().to_owned();
        self.locks.iter().map(key).collect()
    }

    /// Raises `LockLost` (the first member's) once any member may be lost.
    fn ensure_held(&self, py: Python<'_>) -> PyResult<()> {
        self.locks
            .iter()
            .try_for_each(|lock| lock.borrow(py).ensure_held())
    }

    /// Releases every member (once); raises the first member's `LockLost` if any was lost
    /// before its release (the others are released all the same).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let mut first_loss = None;
        for lock in &self.locks {
            if let Err(lost) = lock.borrow(py).release(py) {
                first_loss.get_or_insert(lost);
            }
        }
        first_loss.map_or(Ok(()), Err)
    }

    fn __len__(&self) -> usize {
        self.locks.len()
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
