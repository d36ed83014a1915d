//! Watching: `Client.watch(prefix, after=)` answers a `Watcher`, an iterator of what happens
//! to the locks under a prefix, as the Rust SDK's `lock_client::admin::watch::Watcher` reads it
//! from the lock-server's stream (reconnecting on its own after its last position): a
//! `LockEvent` for each event, in the store's order, or a `WatchGap` when events the store
//! no longer keeps were skipped.
//!
//! Each `next()` waits with the GIL released and checks for a signal (Ctrl-C) every
//! [`SIGNAL_CHECK`]. The wait it cuts is not dropped but kept, and the next round (or the
//! next `next()` after a `KeyboardInterrupt`) resumes it. Dropping it would lose no bytes
//! over reqwest (its `chunk()` hands a chunk over in the poll that takes it from the
//! connection, and the watcher buffers it before it awaits again), but it would restart the
//! watcher's idle timer (a wait re-created every second never notices a dead stream) and
//! drop a reopen in flight (a reopen slower than a second never finishes). Keeping the
//! future, rather than running the watcher in a task on the runtime feeding a channel,
//! keeps the client's rule that nothing runs on its runtime between calls.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use lock_api::{LockError, LockKey};
use lock_client::admin::watch::{WatchItem, Watcher as Watching};
use pyo3::prelude::*;

use crate::errors::{InvalidArgument, lock_error};
use crate::slot::{ClientSlot, Runtime, SIGNAL_CHECK};

/// `raw` as a watch's prefix: empty (every key) or what a key may be, else `InvalidArgument`
/// (the lock-server's own rule, checked before any request).
pub(crate) fn watch_prefix(raw: &str) -> PyResult<()> {
    if raw.is_empty() {
        return Ok(());
    }
    LockKey::parse(raw)
        .map(drop)
        .map_err(|e| InvalidArgument::new_err(format!("prefix: {}", e.reason)))
}

/// `raw` as the position to resume after, else `InvalidArgument`.
pub(crate) fn watch_after(raw: Option<i64>) -> PyResult<Option<u64>> {
    raw.map(|after| {
        u64::try_from(after).map_err(|_| {
            InvalidArgument::new_err(format!("after: {after} is not a position (one is >= 0)"))
        })
    })
    .transpose()
}

/// One event of a watch: something happened to the grant of `key`.
#[pyclass(module = "fencedlock._native", frozen, get_all, eq)]
#[derive(PartialEq)]
pub(crate) struct LockEvent {
    /// Where it stands in the store's order: a watch `after` it sees only later events.
    position: u64,
    /// The key.
    key: String,
    /// What happened: `granted`, `released`, `expired`, `revoked` or `proclaimed`.
    kind: String,
    /// The grant's fencing token (an election's term).
    fencing_token: u64,
    /// The holder's owner (`granted`).
    owner_id: Option<String>,
    /// A share's scope (`granted`): `None` for the whole key.
    scope: Option<String>,
    /// What the grant announces (`proclaimed`: an election leader's value).
    value: Option<String>,
}

impl LockEvent {
    fn of(event: lock_api::LockEvent) -> Self {
        Self {
            position: event.position,
            key: event.lock_key.to_string(),
            kind: kind_name(event.kind).to_owned(),
            fencing_token: event.fencing_token.0,
            owner_id: event.owner_id.map(|o| o.to_string()),
            scope: (!event.scope.is_exclusive()).then(|| event.scope.as_text()),
            value: event.value.map(String::from),
        }
    }
}

/// The kind's name, as the wire spells it.
fn kind_name(kind: lock_api::EventKind) -> &'static str {
    use lock_api::EventKind as K;
    match kind {
        K::Granted => "granted",
        K::Released => "released",
        K::Expired => "expired",
        K::Revoked => "revoked",
        K::Proclaimed => "proclaimed",
    }
}

#[pymethods]
impl LockEvent {
    fn __repr__(&self) -> String {
        let text = |v: &Option<String>| v.as_ref().map_or("None".into(), |v| format!("{v:?}"));
        format!(
            "LockEvent(position={}, key={:?}, kind={:?}, fencing_token={}, owner_id={}, \
             scope={}, value={})",
            self.position,
            self.key,
            self.kind,
            self.fencing_token,
            text(&self.owner_id),
            text(&self.scope),
            text(&self.value),
        )
    }
}

/// Events after `after` up to `resume_from` are gone (the store keeps them only so long):
/// re-read the state you care about; the watch goes on after `resume_from`.
#[pyclass(module = "fencedlock._native", frozen, get_all, eq)]
#[derive(PartialEq)]
pub(crate) struct WatchGap {
    /// The position the watch asked to resume after.
    after: u64,
    /// The watch goes on after this position.
    resume_from: u64,
}

#[pymethods]
impl WatchGap {
    fn __repr__(&self) -> String {
        format!(
            "WatchGap(after={}, resume_from={})",
            self.after, self.resume_from
        )
    }
}

/// A wait of the Rust watcher's `next()`, owning the watcher until it answers.
type Next = Pin<Box<dyn Future<Output = (Watching, Result<WatchItem, LockError>)> + Send>>;

/// Where a watch stands between two rounds of a wait.
enum Step {
    /// No wait in flight.
    Ready(Watching),
    /// A wait cut at a signal check: the next round resumes it.
    Waiting(Next),
}

impl Step {
    /// The wait to run: the one in flight, else a new one.
    fn into_next(self) -> Next {
        match self {
            Step::Ready(mut watcher) => Box::pin(async move {
                let item = watcher.next().await;
                (watcher, item)
            }),
            Step::Waiting(next) => next,
        }
    }
}

/// What happens to the locks under a prefix, as an iterator of `LockEvent | WatchGap`: each
/// `next()` waits (the GIL released) for the next one. It ends only when closed (`close()`,
/// or leaving its `with` block): a lost stream is reopened after `position`; only a final
/// error (a refused credential) raises.
#[pyclass(module = "fencedlock._native")]
pub(crate) struct Watcher {
    client: Arc<ClientSlot>,
    runtime: Runtime,
    prefix: String,
    /// The watcher, or the wait holding it; `None` once closed (or after a panic in a wait).
    step: Mutex<Option<Step>>,
    /// The position of the last item answered (or the one the watch was asked to start
    /// after): apart from `step`, so reading it never waits for a `next()` in flight.
    position: Mutex<Option<u64>>,
}

impl Watcher {
    pub(crate) fn new(
        client: Arc<ClientSlot>,
        runtime: Runtime,
        prefix: String,
        watcher: Watching,
    ) -> Self {
        Self {
            client,
            runtime,
            prefix,
            position: Mutex::new(watcher.position()),
            step: Mutex::new(Some(Step::Ready(watcher))),
        }
    }

    /// One round of the wait: the item, or `None` when `SIGNAL_CHECK` passed first (the wait
    /// is kept for the next round); `Some(None)` once closed.
    fn round(&self) -> Option<Option<Result<WatchItem, LockError>>> {
        let mut step = self.step.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(mut next) = step.take().map(Step::into_next) else {
            return Some(None);
        };
        let waited = self
            .runtime
            .block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut next).await });
        match waited {
            Ok((watcher, item)) => {
                *self.position.lock().unwrap_or_else(PoisonError::into_inner) = watcher.position();
                *step = Some(Step::Ready(watcher));
                Some(Some(item))
            }
            Err(_elapsed) => {
                *step = Some(Step::Waiting(next));
                None
            }
        }
    }
}

#[pymethods]
impl Watcher {
    /// The position of the last event or gap answered (or the `after` the watch started
    /// from): a new watch `after` it misses nothing this one has not answered. `None` before
    /// the first answer of a watch started from "now".
    #[getter]
    fn position(&self) -> Option<u64> {
        *self.position.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The prefix watched (`""`: every key).
    #[getter]
    fn prefix(&self) -> &str {
        &self.prefix
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next event (`LockEvent`) or gap (`WatchGap`). A lost stream is reopened after
    /// `position` (unavailability is waited out); a closed client raises `ConfigError`, a
    /// final error (a refused credential) its exception; a closed watcher ends the iteration.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        loop {
            self.client.live()?;
            let item = match py.detach(|| self.round()) {
                None => {
                    py.check_signals()?;
                    continue;
                }
                Some(None) => return Ok(None),
                Some(Some(item)) => item.map_err(lock_error)?,
            };
            let item = match item {
                WatchItem::Event(event) => LockEvent::of(event).into_pyobject(py)?.into_any(),
                WatchItem::Gap(gap) => WatchGap {
                    after: gap.after,
                    resume_from: gap.resume_from,
                }
                .into_pyobject(py)?
                .into_any(),
            };
            return Ok(Some(item));
        }
    }

    /// Closes the stream (the lock-server's waiter place it holds is freed); a `next()` on
    /// another thread returns within a second, ending its iteration, as later ones do.
    /// Closing again does nothing.
    fn close(&self, py: Python<'_>) {
        py.detach(|| {
            // Taken under the lock, dropped (the stream closed) after it.
            let step = self
                .step
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            drop(step);
        });
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.close(py);
    }

    fn __repr__(&self) -> String {
        let position = self.position().map_or("None".into(), |p| p.to_string());
        format!("Watcher(prefix={:?}, position={position})", self.prefix)
    }
}
