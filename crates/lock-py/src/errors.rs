//! The exceptions a Python user catches, one hierarchy under `LockServiceError`, and the
//! mapping from the SDK's errors to them (the only place that knows it).

use lock_api::LockError;
use lock_client::ClientError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _native,
    LockServiceError,
    PyException,
    "Every error of the lock SDK."
);
create_exception!(
    _native,
    ConfigError,
    LockServiceError,
    "The client's settings are unusable (a bad endpoint, plain HTTP without the opt-in, a bad TTL)."
);
create_exception!(
    _native,
    InvalidArgument,
    LockServiceError,
    "The service refused the caller's input (a bad key, owner or TTL)."
);
create_exception!(
    _native,
    LockContended,
    LockServiceError,
    "Another session held the lock for the whole wait."
);
create_exception!(
    _native,
    LockLost,
    LockServiceError,
    "The lock may be lost: stop writing under it. `reason` says why; `key` and `fencing_token` name the grant."
);
create_exception!(
    _native,
    ProofInvalid,
    LockServiceError,
    "A write's fencing proof is missing, malformed, signed by an untrusted key, or names another key or token."
);
create_exception!(
    _native,
    SessionLost,
    LockServiceError,
    "The session is gone (expired, unknown, closed); open another."
);
create_exception!(
    _native,
    Throttled,
    LockServiceError,
    "This credential is over its request rate or its session quota; retry later."
);
create_exception!(
    _native,
    Unavailable,
    LockServiceError,
    "The service or the network failed; the call may or may not have been applied."
);

/// Adds the exceptions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("LockServiceError", py.get_type::<LockServiceError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("LockContended", py.get_type::<LockContended>())?;
    m.add("LockLost", py.get_type::<LockLost>())?;
    m.add("ProofInvalid", py.get_type::<ProofInvalid>())?;
    m.add("SessionLost", py.get_type::<SessionLost>())?;
    m.add("Throttled", py.get_type::<Throttled>())?;
    m.add("Unavailable", py.get_type::<Unavailable>())?;
    Ok(())
}

/// The exception for an SDK error.
pub(crate) fn lock_error(err: LockError) -> PyErr {
    let message = err.to_string();
    match err {
        LockError::Lost(lost) => lock_lost(&lost),
        LockError::Contention { .. } => LockContended::new_err(message),
        LockError::Throttled { .. } => Throttled::new_err(message),
        LockError::SessionUnknown { .. } | LockError::SessionExpired { .. } => {
            SessionLost::new_err(message)
        }
        LockError::InvalidArgument { .. } => InvalidArgument::new_err(message),
        _ => Unavailable::new_err(message),
    }
}

/// `LockLost`, with the grant and the reason as attributes.
pub(crate) fn lock_lost(lost: &lock_api::LockLost) -> PyErr {
    let err = LockLost::new_err(lost.to_string());
    Python::attach(|py| {
        let value = err.value(py);
        let _ = value.setattr("key", lost.lock_key.as_str());
        let _ = value.setattr("fencing_token", lost.fencing_token.0);
        let _ = value.setattr("reason", lost.reason.as_str());
        let _ = value.setattr("detail", lost.detail.clone());
    });
    err
}

/// The exception for a client that could not start.
pub(crate) fn client_error(err: ClientError) -> PyErr {
    let mut message = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    ConfigError::new_err(message)
}
