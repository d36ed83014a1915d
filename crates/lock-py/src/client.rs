//! `Client`: one lock client (its heartbeat thread, its HTTP pool) and the tokio runtime the
//! SDK's calls run on. Settings come from keyword arguments, else from the environment
//! spellings lockctl and the Rust SDK read (`LOCK_ENDPOINTS`, `LOCK_CLIENT_TOKEN`,
//! `TLS_CA_FILE`, `UNSAFE_PLAINTEXT_HTTP`, ...), through the Rust SDK's own parser.
//!
//! The runtime is a current-thread one: a call runs on the Python thread that makes it (GIL
//! released), which drives its HTTP connection itself, so a request and its answer cost no
//! hand-off to a worker thread and back (about 3 context switches per lock cycle instead of
//! 12, and a third less CPU). Threads of one client share the runtime: whichever is in a call
//! drives the connections of the others. Nothing else runs on it between calls: the heartbeat
//! has its own thread, runtime and connections; an idle pooled connection is not watched
//! between calls, and one idle past the SDK's pool timeout is not reused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use lock_api::{LockKey, RevokeReason};
use lock_client::admin::Credential;
use lock_client::{ClientBuilder, LockClient};
use pyo3::prelude::*;

use crate::election::{Leader, election_name};
use crate::errors::{ConfigError, InvalidArgument, client_error, lock_error};
use crate::session::Session;
use crate::slot::{ClientSlot, Runtime, SIGNAL_CHECK};
use crate::watch::{Watcher, watch_after, watch_prefix};

/// A lock client. Close it (or use it as a context manager) to stop its heartbeat thread.
#[pyclass(module = "fencedlock._native")]
pub(crate) struct Client {
    runtime: Runtime,
    client: Arc<ClientSlot>,
}

#[pymethods]
impl Client {
    /// A client of the lock-servers at `endpoints` (else `LOCK_ENDPOINTS`), presenting
    /// `token` (else `LOCK_CLIENT_TOKEN`). Plain `http://` endpoints are refused unless
    /// `unsafe_plaintext_http` (else `UNSAFE_PLAINTEXT_HTTP`) says otherwise.
    #[new]
    #[pyo3(signature = (endpoints=None, *, token=None, ca_file=None, unsafe_plaintext_http=None, session_ttl=None, request_timeout=None))]
    fn new(
        endpoints: Option<Vec<String>>,
        token: Option<String>,
        ca_file: Option<String>,
        unsafe_plaintext_http: Option<bool>,
        session_ttl: Option<f64>,
        request_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let mut given = HashMap::new();
        if let Some(endpoints) = endpoints {
            given.insert("LOCK_ENDPOINTS", endpoints.join(","));
        }
        for (key, value) in [("LOCK_CLIENT_TOKEN", token), ("TLS_CA_FILE", ca_file)] {
            if let Some(value) = value {
                given.insert(key, value);
            }
        }
        if let Some(plain) = unsafe_plaintext_http {
            given.insert("UNSAFE_PLAINTEXT_HTTP", plain.to_string());
        }
        for (key, seconds) in [
            ("LOCK_SESSION_TTL", session_ttl),
            ("LOCK_CLIENT_REQUEST_TIMEOUT", request_timeout),
        ] {
            if let Some(seconds) = seconds {
                given.insert(key, duration_setting(key, seconds)?);
            }
        }
        let lookup = |key: &str| given.get(key).cloned().or_else(|| std::env::var(key).ok());
        let builder =
            ClientBuilder::from_env(lookup).map_err(|err| ConfigError::new_err(err.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| ConfigError::new_err(format!("cannot start the runtime: {err}")))?;
        let client = {
            let _entered = runtime.enter();
            builder.build().map_err(client_error)?
        };
        Ok(Self {
            runtime: Arc::new(runtime),
            client: ClientSlot::new(client),
        })
    }

    /// Opens a session owned by `owner` (default `python:{host}:{pid}`): it heartbeats on the
    /// client's thread until closed.
    #[pyo3(signature = (owner=None))]
    fn session(&self, py: Python<'_>, owner: Option<String>) -> PyResult<Session> {
        let client = self.live()?;
        let owner = owner.unwrap_or_else(default_owner);
        let runtime = Arc::clone(&self.runtime);
        let opened = py.detach(|| runtime.block_on(client.open_session(&owner)));
        Ok(Session::new(opened.map_err(lock_error)?, runtime))
    }

    /// An operator's revoke of `key`, presenting `admin_token` (the lock-server's
    /// `LOCK_ADMIN_TOKEN`), with `reason` for the holder to read (`maintenance: ...`,
    /// `incident: ...`): the revoked grant's fencing token, or `None` when nothing was held.
    #[pyo3(signature = (key, *, admin_token, reason=None))]
    fn revoke(
        &self,
        py: Python<'_>,
        key: &str,
        admin_token: String,
        reason: Option<String>,
    ) -> PyResult<Option<u64>> {
        let client = self.live()?;
        let key = LockKey::parse(key).map_err(|e| InvalidArgument::new_err(e.to_string()))?;
        let reason = reason
            .map(RevokeReason::parse)
            .transpose()
            .map_err(|e| InvalidArgument::new_err(e.to_string()))?;
        let admin = Credential::new(admin_token);
        let runtime = Arc::clone(&self.runtime);
        let revoked =
            py.detach(|| runtime.block_on(client.admin().revoke(&key, &admin, reason.as_ref())));
        Ok(revoked.map_err(lock_error)?.fencing_token.map(|t| t.0))
    }

    /// The leader of the election `name`: its `term`, `value`, `owner_id` and `expires_at`,
    /// or `None` when no candidate leads. For routing and display; the term fences writes.
    fn leader(&self, py: Python<'_>, name: &str) -> PyResult<Option<Leader>> {
        let client = self.live()?;
        let name = election_name(name)?;
        let admin = client.admin();
        let runtime = Arc::clone(&self.runtime);
        let leader = py.detach(|| runtime.block_on(admin.leader(&name)));
        Ok(leader.map_err(lock_error)?.map(Leader::of))
    }

    /// The election `name`'s leader changes, as an iterator of `Leader | None`: each step
    /// waits (the GIL released, asking every 200 ms) for the term or the value to change;
    /// the first answers the current leader. Terms never go backwards.
    fn observe(slf: Py<Self>, py: Python<'_>, name: &str) -> PyResult<Observer> {
        let name = election_name(name)?;
        let (admin, runtime) = {
            let this = slf.borrow(py);
            (this.live()?.admin(), Arc::clone(&this.runtime))
        };
        Ok(Observer::new(slf, runtime, admin.observe(&name)))
    }

    /// What happens to the locks under `prefix` (`""`: every key), as an iterator of
    /// `LockEvent | WatchGap`: every event after position `after` (`None`: from this call on),
    /// in the store's order. The stream is open when this returns; each step waits (the GIL
    /// released) for the next event, reconnecting after the watcher's `position` on its own.
    #[pyo3(signature = (prefix="", *, after=None))]
    fn watch(slf: Py<Self>, py: Python<'_>, prefix: &str, after: Option<i64>) -> PyResult<Watcher> {
        watch_prefix(prefix)?;
        let after = watch_after(after)?;
        let this = slf.borrow(py);
        let (admin, runtime) = (this.live()?.admin(), Arc::clone(&this.runtime));
        let opened = py.detach(|| runtime.block_on(admin.watch(prefix, after)));
        let watcher = opened.map_err(lock_error)?;
        let slot = Arc::clone(&this.client);
        Ok(Watcher::new(slot, runtime, prefix.to_owned(), watcher))
    }

    /// Stops the heartbeat thread; sessions still open stop heartbeating and expire. A call on
    /// another thread still in flight (opening a session, a revoke) holds the client: the
    /// thread is stopped when that call returns (the SDK's `Drop`).
    fn close(&self, py: Python<'_>) {
        let client = self.client.take();
        if let Some(client) = client.and_then(|c| Arc::try_unwrap(c).ok()) {
            py.detach(|| client.close());
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

impl Client {
    /// The client, while it is open.
    pub(crate) fn live(&self) -> PyResult<Arc<LockClient>> {
        self.client.live()
    }
}

/// `seconds` as the duration spelling `key` takes (`"1500ms"`); a clear error for a
/// negative, infinite or NaN value.
fn duration_setting(key: &str, seconds: f64) -> PyResult<String> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(ConfigError::new_err(format!(
            "{key}: {seconds} is not a positive number of seconds"
        )));
    }
    Ok(format!("{}ms", (seconds * 1_000.0).ceil()))
}

/// `python:{host}:{pid}`: who holds a lock, as `lockctl inspect` shows it.
fn default_owner() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
    format!("python:{host}:{}", std::process::id())
}

/// An election's leader changes, as an iterator: each `next()` waits (the GIL released) for
/// the term or its value to differ from the last answer, and answers the `Leader` or `None`
/// (no leader now); the first answers the current leader. Terms never go backwards.
#[pyclass(module = "fencedlock._native")]
pub(crate) struct Observer {
    client: Py<Client>,
    runtime: Runtime,
    observer: Mutex<lock_client::election::Observer>,
}

impl Observer {
    pub(crate) fn new(
        client: Py<Client>,
        runtime: Runtime,
        observer: lock_client::election::Observer,
    ) -> Self {
        Self {
            client,
            runtime,
            observer: Mutex::new(observer),
        }
    }
}

#[pymethods]
impl Observer {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next leader change: a `Leader`, or `None` (a Python `None`, never the end of the
    /// iteration: the stream has none). Unavailability is waited out; a closed client raises
    /// `ConfigError`, a final error (a refused credential) its exception.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        loop {
            self.client.borrow(py).live()?;
            let runtime = Arc::clone(&self.runtime);
            // A wait cut at `SIGNAL_CHECK` loses nothing: the observer's state changes only
            // when it answers.
            let next = py.detach(|| {
                let mut observer = self.observer.lock().unwrap_or_else(PoisonError::into_inner);
                runtime
                    .block_on(async { tokio::time::timeout(SIGNAL_CHECK, observer.next()).await })
            });
            match next {
                Ok(answer) => {
                    let leader = answer.map_err(lock_error)?.map(Leader::of);
                    return Ok(leader.into_pyobject(py)?.into_any());
                }
                Err(_elapsed) => py.check_signals()?,
            }
        }
    }
}
