//! Leader election: `Leadership` (a term this session holds, with what it announces), `Leader`
//! (an election's leader as anyone reads it) and `Observer` (an iterator of leader changes).
//! A term is a lock's grant of the election's key: its held-check, proof and loss are a
//! `Lock`'s, and its term is the fencing token a resource fences the leader's writes with.

use std::sync::{Arc, Mutex, PoisonError, TryLockError};

use chrono::{DateTime, Utc};
use lock_api::{LeaderValue, LockKey};
use lock_client::LockClientSession;
use lock_client::election::{self, Leadership as Held};
use pyo3::prelude::*;

use crate::errors::{InvalidArgument, LockLost, lock_error, lock_lost};
use crate::lock::leave_releasing;
use crate::slot::SessionSlot;

/// `raw` as a leader's value (at most 4096 bytes, no NUL), else `InvalidArgument`.
pub(crate) fn leader_value(raw: &str) -> PyResult<LeaderValue> {
    LeaderValue::parse(raw).map_err(|e| InvalidArgument::new_err(e.to_string()))
}

/// `raw` as an election's name (a lock key), else `InvalidArgument`.
pub(crate) fn election_name(raw: &str) -> PyResult<LockKey> {
    LockKey::parse(raw).map_err(|e| InvalidArgument::new_err(e.to_string()))
}

/// A term of leadership this session holds. Send `term` (its `fencing_token`) and `proof`
/// with every write the leader makes, and call `ensure_held()` right before each.
#[pyclass(module = "fencedlock._native")]
pub(crate) struct Leadership {
    slot: Arc<SessionSlot>,
    name: String,
    term: u64,
    proof: Option<String>,
    /// What it announces: the last value the service took.
    value: Mutex<String>,
    /// The term until it is resigned. A proclaim holds it while it waits (the GIL released).
    held: Mutex<Option<Held>>,
}

impl Leadership {
    pub(crate) fn new(slot: Arc<SessionSlot>, live: &LockClientSession, held: Held) -> Self {
        Self {
            slot,
            name: held.name().to_string(),
            term: held.term().0,
            proof: live.fence_proof(held.handle()),
            value: Mutex::new(held.value().as_str().to_owned()),
            held: Mutex::new(Some(held)),
        }
    }

    /// Runs `check` on the term's handle and its session while the term is not resigned; a
    /// proclaim on another thread is waited for with the GIL released.
    fn with_held<T: Send>(
        &self,
        py: Python<'_>,
        check: impl FnOnce(&LockClientSession, &Held) -> Result<T, lock_api::LockLost> + Send,
    ) -> PyResult<T> {
        // A resigned term says so before a closed session does, as a released lock does.
        let session = self.slot.live().ok();
        let run = |held: &Option<Held>| {
            let held = held.as_ref()?;
            Some(session.as_ref().map(|session| check(session, held)))
        };
        let checked = match self.held.try_lock() {
            Ok(held) => run(&held),
            Err(TryLockError::Poisoned(held)) => run(&held.into_inner()),
            Err(TryLockError::WouldBlock) => {
                py.detach(|| run(&self.held.lock().unwrap_or_else(PoisonError::into_inner)))
            }
        };
        match checked {
            Some(Some(checked)) => checked.map_err(|lost| lock_lost(&lost)),
            Some(None) => Err(self.slot.live().err().unwrap_or_else(|| self.resigned())),
            None => Err(self.resigned()),
        }
    }

    fn resigned(&self) -> PyErr {
        LockLost::new_err(format!("the leadership of {} was resigned", self.name))
    }
}

#[pymethods]
impl Leadership {
    /// The election's name (its key).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The term: the grant's fencing token, above every earlier leader's.
    #[getter]
    fn term(&self) -> u64 {
        self.term
    }

    /// The term, by the name a `Lock` gives it: send it with every write the leader makes.
    #[getter]
    fn fencing_token(&self) -> u64 {
        self.term
    }

    /// The lock-server's signed proof of the term's grant (`X-Fencing-Proof`), when it signs.
    #[getter]
    fn proof(&self) -> Option<&str> {
        self.proof.as_deref()
    }

    /// What this leader announces (the last value the service took).
    #[getter]
    fn value(&self) -> String {
        self.value
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Raises `LockLost` once the term may be lost (its conservative deadline passed, the
    /// session is gone, the server said so) or was resigned: call it right before each write.
    fn ensure_held(&self, py: Python<'_>) -> PyResult<()> {
        self.with_held(py, |session, held| session.check_still_held(held.handle()))
    }

    /// Seconds the term is certainly still held for; raises `LockLost` when none.
    fn remaining(&self, py: Python<'_>) -> PyResult<f64> {
        let left = self.with_held(py, |session, held| session.remaining(held.handle()))?;
        Ok(left.as_secs_f64())
    }

    /// Announces `value` in place of what this leader announced, keeping its term. Raises
    /// `LockLost` when the term was lost or resigned (the service never lets a stale term
    /// overwrite a successor's value), `InvalidArgument` for a value over 4096 bytes or with
    /// a NUL.
    fn proclaim(&self, py: Python<'_>, value: &str) -> PyResult<()> {
        let text = value;
        let value = leader_value(text)?;
        let (session, runtime) = (self.slot.live()?, Arc::clone(self.slot.runtime()));
        let proclaimed = py.detach(|| {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            let held = held.as_mut()?;
            Some(runtime.block_on(session.proclaim(held, value)))
        });
        match proclaimed {
            Some(Ok(())) => {
                *self.value.lock().unwrap_or_else(PoisonError::into_inner) = text.to_owned();
                Ok(())
            }
            Some(Err(err)) => Err(lock_error(err)),
            None => Err(self.resigned()),
        }
    }

    /// Gives the term up (once; later calls do nothing): the election's key goes to the next
    /// candidate at once. Raises `LockLost` when the term was lost before: whatever the
    /// leader did since may have been done without it.
    fn resign(&self, py: Python<'_>) -> PyResult<()> {
        let held = py.detach(|| {
            (self.held.lock())
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        });
        let Some(held) = held else { return Ok(()) };
        let (session, runtime) = (self.slot.live()?, Arc::clone(self.slot.runtime()));
        let resigned = py.detach(|| runtime.block_on(session.resign(held)));
        resigned.map_err(|lost| lock_lost(&lost))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Resigns; a loss is raised only when no other exception is on its way out.
    #[pyo3(signature = (exc_type, _exc_value, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        leave_releasing(self.resign(py), exc_type)
    }

    fn __repr__(&self) -> String {
        format!("Leadership(name={:?}, term={})", self.name, self.term)
    }
}

/// An election's leader as the lock service answers it: for routing and display, never a
/// safety decision (the term fences writes).
#[pyclass(module = "fencedlock._native", frozen, get_all, eq)]
#[derive(PartialEq)]
pub(crate) struct Leader {
    /// The term: the leader's fencing token.
    term: u64,
    /// What it announces; `None` for a key held as a plain lock.
    value: Option<String>,
    /// Its session's owner.
    owner_id: String,
    /// When its grant ends unless renewed (display only), in UTC.
    expires_at: DateTime<Utc>,
}

impl Leader {
    pub(crate) fn of(leader: election::Leader) -> Self {
        Self {
            term: leader.term.0,
            value: leader.value.map(String::from),
            owner_id: leader.owner_id.to_string(),
            expires_at: leader.expires_at,
        }
    }
}

#[pymethods]
impl Leader {
    fn __repr__(&self) -> String {
        let value = (self.value.as_ref()).map_or_else(|| "None".to_owned(), |v| format!("{v:?}"));
        format!(
            "Leader(term={}, value={value}, owner_id={:?}, expires_at={:?})",
            self.term,
            self.owner_id,
            self.expires_at.to_rfc3339()
        )
    }
}
