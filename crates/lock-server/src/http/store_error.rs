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
        StoreError::NotLeader(_) => ErrorCode::NotLeader,
        StoreError::Unavailable(_) => ErrorCode::StoreUnavailable,
        StoreError::Internal(_) => ErrorCode::Internal,
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        let code = code(&err);
        if code == ErrorCode::Internal {
            tracing::error!(event = "store_error", error = %err, "store failed");
        }
        Self::new(code, err.to_string())
    }
}
