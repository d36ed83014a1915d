//! Bearer credentials, compared in constant time.

use axum::http::{HeaderMap, header};
use lock_api::ErrorCode;
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// Checks `Authorization: Bearer <expected>` (scheme case-insensitive). `None` expected means
/// the operation is disabled: 403 `FORBIDDEN`; a missing or wrong token is 401.
pub fn require_bearer(
    headers: &HeaderMap,
    expected: Option<&str>,
    what: &str,
) -> Result<(), ApiError> {
    let Some(expected) = expected.filter(|e| !e.is_empty()) else {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("{what} is disabled: no credential is configured"),
        ));
    };
    let presented = presented_bearer(headers)?.unwrap_or("");
    if bool::from(presented.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::Unauthenticated,
            format!("Authorization: a valid bearer token is required for {what}"),
        ))
    }
}

/// The secret of `Authorization: Bearer <secret>` (scheme in any case, trimmed), if one was
/// presented; 400 when the header is sent twice.
pub(crate) fn presented_bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    Ok(
        crate::extract::single_header(headers, header::AUTHORIZATION.as_str(), "Authorization")?
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, secret)| secret.trim())
            .filter(|secret| !secret.is_empty()),
    )
}
