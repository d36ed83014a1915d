//! Extractors for headers the pipeline relies on.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use lock_api::{FENCING_TOKEN_HEADER, FencingToken};

use crate::error::ApiError;

/// The `X-Fencing-Token` header of a fenced write: required, a decimal `u64` within the range
/// stores issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FencingTokenHeader(pub FencingToken);

impl<S: Send + Sync> FromRequestParts<S> for FencingTokenHeader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let raw = parts.headers.get(FENCING_TOKEN_HEADER).ok_or_else(|| {
            ApiError::invalid("X-Fencing-Token", "header is required for a fenced write")
        })?;
        let token: u64 = raw
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| ApiError::invalid("X-Fencing-Token", "must be a decimal token"))?;
        let token = FencingToken(token)
            .validate()
            .map_err(|e| ApiError::invalid("X-Fencing-Token", e.reason))?;
        if token.0 == 0 {
            return Err(ApiError::invalid("X-Fencing-Token", "tokens start at 1"));
        }
        Ok(Self(token))
    }
}
