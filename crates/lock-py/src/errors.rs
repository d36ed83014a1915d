//! The exceptions a Python user catches, one hierarchy under `LockServiceError`, and the
//! mapping from the SDK's and fence-kit's errors to them (the only place that knows it). The
//! refusals a resource sends (`InvalidArgument`, `ProofInvalid`, `FencedOut`) carry the wire's
//! `code` and `http_status` as class attributes, from `lock-api`'s `ErrorCode`.

use fence_kit::FenceError;
use lock_api::{ErrorCode, LockError};
use lock_client::ClientError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyType;

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
    FencedOut,
    LockServiceError,
    "A fenced write's grant no longer holds the resource's fence: a newer grant claimed it."
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
    add_refusal(
        m,
        "InvalidArgument",
        py.get_type::<InvalidArgument>(),
        ErrorCode::InvalidArgument,
    )?;
    m.add("LockContended", py.get_type::<LockContended>())?;
    m.add("LockLost", py.get_type::<LockLost>())?;
    add_refusal(
        m,
        "ProofInvalid",
        py.get_type::<ProofInvalid>(),
        ErrorCode::ProofInvalid,
    )?;
    add_refusal(
        m,
        "FencedOut",
        py.get_type::<FencedOut>(),
        ErrorCode::FencedOut,
    )?;
    m.add("SessionLost", py.get_type::<SessionLost>())?;
    m.add("Throttled", py.get_type::<Throttled>())?;
    m.add("Unavailable", py.get_type::<Unavailable>())?;
    Ok(())
}

/// Adds a refusal's exception with its wire `code` and `http_status` as class attributes, so
/// a web layer renders it as `{"code","message"}` with the status the Rust resources send.
fn add_refusal(
    m: &Bound<'_, PyModule>,
    name: &str,
    exception: Bound<'_, PyType>,
    code: ErrorCode,
) -> PyResult<()> {
    exception.setattr("code", code.as_str())?;
    exception.setattr("http_status", code.http_status())?;
    m.add(name, exception)
}

/// The exception for a fenced write's refusal: its message is fence-kit's (it names the
/// header, or the token and the fence).
pub(crate) fn fence_error(err: FenceError) -> PyErr {
    match err.code {
        ErrorCode::FencedOut => FencedOut::new_err(err.message),
        ErrorCode::ProofInvalid => ProofInvalid::new_err(err.message),
        _ => InvalidArgument::new_err(err.message),
    }
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
        LockError::FencedOut { .. } => FencedOut::new_err(message),
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
