//! `Session`: one lock-service session, heartbeated by its client's thread, and the locks
//! taken under it.

use std::sync::Arc;
use std::time::Duration;

use lock_api::{Claim, LockKey, LockMode};
use lock_client::{AcquirePolicy, LockClientSession};
use pyo3::prelude::*;

use crate::election::{Leadership, election_name, leader_value};
use crate::errors::{InvalidArgument, LockContended, lock_error, lock_lost};
use crate::lock::Lock;
use crate::lock_set::LockSet;
use crate::slot::{Runtime, SessionSlot};

/// An open session. Close it (or use it as a context manager) to release what it holds.
#[pyclass(module = "fencedlock._native")]
pub(crate) struct Session {
    slot: Arc<SessionSlot>,
}

impl Session {
    pub(crate) fn new(session: LockClientSession, runtime: Runtime) -> Self {
        Self {
            slot: SessionSlot::new(session, runtime),
        }
    }
}

#[pymethods]
impl Session {
    /// Acquires `key` for a lease of `ttl` seconds, waiting up to `wait` seconds in the
    /// server's FIFO queue (0: try once). Raises `LockContended` when another session held
    /// it for the whole wait. Use the lock as a context manager to release it on exit.
    /// `permits=N` takes one of the key's N permits (a semaphore); `shared=True` holds it as
    /// a reader beside other readers (a read/write lock; without it, the writer). The lock's
    /// `scope` says what it holds. A key held as another kind, or by this session in the
    /// other mode, raises `InvalidArgument`.
    #[pyo3(signature = (key, *, ttl=10.0, wait=0.0, permits=None, shared=false))]
    fn lock(
        &self,
        py: Python<'_>,
        key: &str,
        ttl: f64,
        wait: f64,
        permits: Option<i64>,
        shared: bool,
    ) -> PyResult<Lock> {
        let key = LockKey::parse(key).map_err(|e| InvalidArgument::new_err(e.to_string()))?;
        let (ttl, wait, policy) = acquire_terms(ttl, wait)?;
        // A count no u32 holds is out of range as 0 is: `Claim::of` says so.
        let permits = permits.map(|n| u32::try_from(n).unwrap_or(0));
        let claim = Claim::of(shared.then_some(LockMode::Shared), permits)
            .map_err(|e| InvalidArgument::new_err(e.to_string()))?;
        let (session, runtime) = (self.slot.live()?, Arc::clone(self.slot.runtime()));
        let acquired =
            py.detach(|| runtime.block_on(session.acquire_claim(&key, claim, ttl, &policy)));
        match acquired.map_err(lock_error)? {
            Some(handle) => Ok(Lock::new(Arc::clone(&self.slot), &session, handle)),
            None => Err(contended(&key.to_string(), wait)),
        }
    }

    /// Acquires every key of `keys` (1 to 16, each once) together or none: a payout between
    /// two accounts takes both at once and never holds one while waiting for the other.
    /// `ttl` and `wait` as for `lock`; a waiting set holds no key. Raises `LockContended`
    /// when a key was held by another session for the whole wait. Use the set as a context
    /// manager to release every member on exit.
    #[pyo3(signature = (keys, *, ttl=10.0, wait=0.0))]
    fn lock_set(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        ttl: f64,
        wait: f64,
    ) -> PyResult<LockSet> {
        let keys = keys
            .iter()
            .map(|key| LockKey::parse(key.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| InvalidArgument::new_err(e.to_string()))?;
        let (ttl, wait, policy) = acquire_terms(ttl, wait)?;
        let (session, runtime) = (self.slot.live()?, Arc::clone(self.slot.runtime()));
        let acquired = py.detach(|| runtime.block_on(session.acquire_set(&keys, ttl, &policy)));
        let Some(set) = acquired.map_err(lock_error)? else {
            let named: Vec<&str> = keys.iter().map(LockKey::as_str).collect();
            return Err(contended(&named.join(", "), wait));
        };
        let locks = set
            .into_handles()
            .into_iter()
            .map(|handle| Py::new(py, Lock::new(Arc::clone(&self.slot), &session, handle)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(LockSet::new(locks))
    }

    /// Campaigns in the election `name`: acquires its key exclusively for a lease of `ttl`
    /// seconds, announcing `value` (at most 4096 bytes, no NUL), waiting up to `wait` seconds
    /// behind earlier candidates in the server's FIFO queue (0: try once). Raises
    /// `LockContended` when another candidate led for the whole wait. The leadership's
    /// `term` is its fencing token; use it as a context manager to resign on exit. A session
    /// that leads already keeps its term and announces `value`.
    #[pyo3(signature = (name, value, *, ttl=10.0, wait=0.0))]
    fn campaign(
        &self,
        py: Python<'_>,
        name: &str,
        value: &str,
        ttl: f64,
        wait: f64,
    ) -> PyResult<Leadership> {
        let name = election_name(name)?;
        let value = leader_value(value)?;
        let (ttl, wait, policy) = acquire_terms(ttl, wait)?;
        let (session, runtime) = (self.slot.live()?, Arc::clone(self.slot.runtime()));
        let campaigned =
            py.detach(|| runtime.block_on(session.campaign(&name, value, ttl, &policy)));
        match campaigned.map_err(lock_error)? {
            Some(held) => Ok(Leadership::new(Arc::clone(&self.slot), &session, held)),
            None => Err(contended(&name.to_string(), wait)),
        }
    }

    /// Calls `listener(lost)` once for each lock of this session that may be lost, on the
    /// client's heartbeat thread, with a `LockLost` exception describing it. It must return
    /// quickly; what it raises is printed and dropped.
    fn on_lock_lost(&self, listener: Py<PyAny>) -> PyResult<()> {
        let session = self.slot.live()?;
        session.on_lock_lost(move |lost| {
            Python::attach(|py| {
                let err = lock_lost(lost);
                if let Err(raised) = listener.call1(py, (err.value(py),)) {
                    raised.print(py);
                }
            });
        });
        Ok(())
    }

    /// Closes the session: the server releases what it still holds.
    fn close(&self, py: Python<'_>) {
        if let Some(session) = self.slot.take() {
            let runtime = self.slot.runtime();
            py.detach(|| runtime.block_on(session.close()));
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.close(py);
    }
}

/// A lease of `ttl` seconds and a wait of `wait` (0: try once), checked, with the acquire
/// policy that waits that long.
fn acquire_terms(ttl: f64, wait: f64) -> PyResult<(Duration, Duration, AcquirePolicy)> {
    let ttl = seconds("ttl", ttl, false)?;
    let wait = seconds("wait", wait, true)?;
    let policy = if wait.is_zero() {
        AcquirePolicy::TRY_ONCE
    } else {
        // The SDK's backoff between attempts, within the caller's `wait`.
        AcquirePolicy {
            budget: wait,
            ..AcquirePolicy::DEFAULT
        }
    };
    Ok((ttl, wait, policy))
}

/// `LockContended` for `what` (a key, or a set's keys) after `wait`.
fn contended(what: &str, wait: Duration) -> PyErr {
    LockContended::new_err(format!(
        "{what} was held by another session for the whole wait ({} s)",
        wait.as_secs_f64()
    ))
}

/// `value` seconds as a duration: positive (or zero when `zero_ok`) and finite, else
/// `InvalidArgument` naming `what`.
fn seconds(what: &str, value: f64, zero_ok: bool) -> PyResult<Duration> {
    let fits = value.is_finite() && (value > 0.0 || (zero_ok && value == 0.0));
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|_| fits)
        .ok_or_else(|| {
            InvalidArgument::new_err(format!("{what}: {value} is not a valid number of seconds"))
        })
}
