//! How store failures answer over HTTP.

use lock_api::ErrorCode;
use service_kit::ApiError;

use crate::store::StoreError;

/// The code a store failure answers with.
pub fn code(err: &StoreError) -> ErrorCode {
    match err {
        StoreError::SessionUnknown(_) => ErrorCode::SessionUnknown,
        StoreError::SessionExpired(_) => ErrorCode::SessionExpired,
        StoreError::LockLost { .. } => ErrorCode::LockLost,
        StoreError::KindConflict { .. } => ErrorCode::LockKindConflict,
        StoreError::NotLeader(_) => ErrorCode::NotLeader,
        StoreError::Unavailable(_) => ErrorCode::StoreUnavailable,
        StoreError::Internal(_) => ErrorCode::Internal,
    }
}

/// The answer to a store failure (`.map_err(api_error)?` in the handlers: both types are
/// other crates', so no `From` can join them here). An internal error is logged here, once.
pub fn api_error(err: StoreError) -> ApiError {
    let code = code(&err);
    if code == ErrorCode::Internal {
        tracing::error!(event = "store_error", error = %err, "store failed");
    }
    ApiError::new(code, err.to_string())
}
