//! Reading a fenced write's two headers, `X-Fencing-Token` and `X-Fencing-Proof`, and
//! verifying the proof offline against the lock service's public keys. Framework-free (the
//! `http` crate's `HeaderMap`); [`crate::FencedWrite`] is also an axum extractor with
//! feature `axum`.

use http::{HeaderMap, HeaderValue};
use lock_api::{
    FENCING_PROOF_HEADER, FenceVerifier, FencingToken, GrantId, GrantScope, LockKey, ProofError,
};

use crate::error::FenceError;

/// The header a fenced write carries its token in.
pub const FENCING_TOKEN_HEADER: &str = lock_api::FENCING_TOKEN_HEADER;

/// The one value of header `name`, `None` when absent; a header sent twice is refused
/// (naming `field`): a proxy and a service could each read a different copy.
pub fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
    field: &str,
) -> Result<Option<&'a HeaderValue>, FenceError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(FenceError::invalid(field, "header must be sent once"));
    }
    Ok(first)
}

/// The `X-Fencing-Token` header: required, sent once, ASCII digits (no sign) of a token in
/// the range lock stores issue (1 to `i64::MAX`).
pub fn fencing_token(headers: &HeaderMap) -> Result<FencingToken, FenceError> {
    let raw =
        single_header(headers, FENCING_TOKEN_HEADER, "X-Fencing-Token")?.ok_or_else(|| {
            FenceError::invalid("X-Fencing-Token", "header is required for a fenced write")
        })?;
    let token: u64 = raw
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            FenceError::invalid("X-Fencing-Token", "must be a decimal token (digits only)")
        })?;
    let token = FencingToken(token)
        .validate()
        .map_err(|e| FenceError::invalid("X-Fencing-Token", e.reason))?;
    if token.0 == 0 {
        return Err(FenceError::invalid("X-Fencing-Token", "tokens start at 1"));
    }
    Ok(token)
}

/// A fenced write's token and proof as sent, not yet verified: [`FencedWrite::verify`] needs
/// the lock key, which the resource derives from what is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedWrite {
    /// `X-Fencing-Token`.
    pub token: FencingToken,
    /// `X-Fencing-Proof`, trimmed; `None` when absent (refused by `verify`).
    pub proof: Option<String>,
}

impl FencedWrite {
    /// Reads both headers: the token must be well formed (400 otherwise); the proof is
    /// checked by [`Self::verify`] (403).
    pub fn from_headers(headers: &HeaderMap) -> Result<Self, FenceError> {
        let token = fencing_token(headers)?;
        let proof = single_header(headers, FENCING_PROOF_HEADER, "X-Fencing-Proof")?
            .map(|value| {
                value
                    .to_str()
                    .map(|v| v.trim().to_owned())
                    .map_err(|_| FenceError::proof("not ASCII"))
            })
            .transpose()?;
        Ok(Self { token, proof })
    }

    /// Whether the proof is a trusted key's signature of an exclusive grant of `lock_key`
    /// with this token: the proven write when it is. A missing, malformed, foreign-key,
    /// other-key, relabelled or forged proof is `PROOF_INVALID`, before any fence logic; so
    /// is a genuine proof of a permit or a share, which a resource written for a mutex must
    /// not take.
    pub fn verify(
        self,
        verifier: &FenceVerifier,
        lock_key: &LockKey,
    ) -> Result<ProvenFence, FenceError> {
        let token = self.token;
        match self.verify_scoped(verifier, lock_key)? {
            (proven, GrantScope::Exclusive) => Ok(proven),
            (_, scope) => {
                let err = ProofError::NotExclusive(scope.as_text());
                tracing::warn!(event = "proof_refused", lock_key = %lock_key, token = token.0, error = %err, "a fenced write without a valid proof");
                Err(FenceError::proof(err))
            }
        }
    }

    /// [`verify`](Self::verify) for a resource that also takes permits and shares (ADR
    /// 0007): the proven write and what its grant holds of the key. Fence a permit on
    /// `scope.fenced_resource(lock_key)` with the claim and holder rules, a reader's action
    /// with [`FenceRule::Shared`](crate::FenceRule::Shared).
    pub fn verify_scoped(
        self,
        verifier: &FenceVerifier,
        lock_key: &LockKey,
    ) -> Result<(ProvenFence, GrantScope), FenceError> {
        let proof = self.proof.ok_or_else(|| {
            FenceError::proof("header is required: the lock-server's proof of the grant")
        })?;
        let (grant, scope) = verifier
            .verify_scoped(lock_key, self.token, &proof)
            .map_err(|err| {
                tracing::warn!(event = "proof_refused", lock_key = %lock_key, token = self.token.0, error = %err, "a fenced write without a valid proof");
                FenceError::proof(err)
            })?;
        let proven = ProvenFence {
            token: self.token,
            grant,
            proof,
        };
        Ok((proven, scope))
    }
}

/// A fenced write's token and the grant it was issued to, proven.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenFence {
    /// `X-Fencing-Token`.
    pub token: FencingToken,
    /// The grant the proof names.
    pub grant: GrantId,
    /// `X-Fencing-Proof`, as sent (a proxy forwards it unchanged).
    pub proof: String,
}

impl ProvenFence {
    /// The token as a fence column holds it (tokens are validated within `i64`).
    pub fn token_i64(&self) -> i64 {
        self.token.as_i64()
    }
}

/// Reads and verifies a fenced write in one step (for frameworks other than axum):
/// [`FencedWrite::from_headers`] then [`FencedWrite::verify`].
pub fn proven_write(
    headers: &HeaderMap,
    verifier: &FenceVerifier,
    lock_key: &LockKey,
) -> Result<ProvenFence, FenceError> {
    FencedWrite::from_headers(headers)?.verify(verifier, lock_key)
}

#[cfg(feature = "axum")]
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for FencedWrite {
    type Rejection = FenceError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Self::from_headers(&parts.headers)
    }
}
