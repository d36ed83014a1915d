//! Extractors for headers the pipeline relies on.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use lock_api::{FENCING_TOKEN_HEADER, FencingToken};

use crate::error::ApiError;

/// The one value of header `name`, `None` when absent; a header sent twice is refused
/// (naming `field`): a proxy and a service could each read a different copy.
pub fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
    field: &str,
) -> Result<Option<&'a HeaderValue>, ApiError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(ApiError::invalid(field, "header must be sent once"));
    }
    Ok(first)
}

/// The `X-Fencing-Token` header of a fenced write: required, sent once, ASCII digits (no sign)
/// of a `u64` within the range stores issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FencingTokenHeader(pub FencingToken);

impl<S: Send + Sync> FromRequestParts<S> for FencingTokenHeader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let raw = single_header(&parts.headers, FENCING_TOKEN_HEADER, "X-Fencing-Token")?
            .ok_or_else(|| {
                ApiError::invalid("X-Fencing-Token", "header is required for a fenced write")
            })?;
        let token: u64 = raw
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                ApiError::invalid("X-Fencing-Token", "must be a decimal token (digits only)")
            })?;
        let token = FencingToken(token)
            .validate()
            .map_err(|e| ApiError::invalid("X-Fencing-Token", e.reason))?;
        if token.0 == 0 {
            return Err(ApiError::invalid("X-Fencing-Token", "tokens start at 1"));
        }
        Ok(Self(token))
    }
}
