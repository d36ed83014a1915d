//! Extractors and readers for headers the pipeline relies on: the fencing token and its
//! signed proof, and headers that must be sent once.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use lock_api::{
    ErrorCode, FENCING_PROOF_HEADER, FENCING_TOKEN_HEADER, FenceVerifier, FencingToken, GrantId,
    LockKey,
};

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
        fencing_token(&parts.headers).map(Self)
    }
}

/// The `X-Fencing-Token` header: required, sent once, ASCII digits (no sign) of a token in
/// the range stores issue.
pub fn fencing_token(headers: &HeaderMap) -> Result<FencingToken, ApiError> {
    let raw =
        single_header(headers, FENCING_TOKEN_HEADER, "X-Fencing-Token")?.ok_or_else(|| {
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
    Ok(token)
}

/// A fenced write's token and the grant it was issued to, proven.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenFence {
    /// `X-Fencing-Token`.
    pub token: FencingToken,
    /// The grant the proof names.
    pub grant: GrantId,
    /// `X-Fencing-Proof`, as sent.
    pub proof: String,
}

/// A fenced write's token, proven: `X-Fencing-Token` as [`fencing_token`] reads it, and
/// `X-Fencing-Proof` verified offline against the lock service's public keys for
/// `lock_key`, before any fence logic. A missing, malformed, foreign-key or forged proof is
/// 403 `PROOF_INVALID`; nothing is written.
pub fn proven_fencing_token(
    headers: &HeaderMap,
    verifier: &FenceVerifier,
    lock_key: &LockKey,
) -> Result<ProvenFence, ApiError> {
    let token = fencing_token(headers)?;
    let proof = single_header(headers, FENCING_PROOF_HEADER, "X-Fencing-Proof")?
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::ProofInvalid,
                "X-Fencing-Proof: header is required: the lock-server's proof of the grant",
            )
        })?
        .to_str()
        .map_err(|_| ApiError::new(ErrorCode::ProofInvalid, "X-Fencing-Proof: not ASCII"))?
        .trim()
        .to_owned();
    let grant = verifier.verify(lock_key, token, &proof).map_err(|err| {
        tracing::warn!(event = "proof_refused", lock_key = %lock_key, token = token.0, error = %err, "a fenced write without a valid proof");
        ApiError::new(ErrorCode::ProofInvalid, format!("X-Fencing-Proof: {err}"))
    })?;
    Ok(ProvenFence {
        token,
        grant,
        proof,
    })
}
