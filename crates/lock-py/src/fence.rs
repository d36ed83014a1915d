//! `TrustedKeys`: the resource side of fencing for Python, offline. A resource checks that a
//! write's token and proof are a trusted lock-server key's signature of a grant of the key it
//! writes under, by fence-kit's own rule (the same code the Rust resources run): from the
//! token and proof alone (`verify`), or from the request's header values (`verify_headers`,
//! fence-kit's header rule: each header sent once, the token decimal digits from 1).

use fence_kit::{FenceVerifier, FencedWrite, FencingToken, LockKey};
use http::{HeaderMap, HeaderName, HeaderValue};
use lock_api::{FENCING_PROOF_HEADER, FENCING_TOKEN_HEADER};
use pyo3::prelude::*;

use crate::errors::{ConfigError, InvalidArgument, ProofInvalid, fence_error};

/// The lock-servers' public keys a resource trusts (`FENCE_PUBLIC_KEYS`: `key_id=base64,...`).
#[pyclass(module = "fencedlock._native", frozen)]
pub(crate) struct TrustedKeys {
    verifier: FenceVerifier,
}

/// A fenced write whose proof verified: the lock key it writes under, its token and the
/// grant the proof names (what the resource's fence keeps).
#[pyclass(module = "fencedlock._native", frozen, get_all)]
pub(crate) struct ProvenWrite {
    key: String,
    token: u64,
    grant: String,
}

#[pymethods]
impl ProvenWrite {
    fn __repr__(&self) -> String {
        format!(
            "ProvenWrite(key={:?}, token={}, grant={:?})",
            self.key, self.token, self.grant
        )
    }
}

#[pymethods]
impl TrustedKeys {
    /// Trusts the keys of `spec`, as `lock-server --generate-signing-key` prints them.
    #[new]
    fn new(spec: &str) -> PyResult<Self> {
        let verifier = FenceVerifier::parse(spec)
            .map_err(|err| ConfigError::new_err(format!("trusted keys: {err}")))?;
        Ok(Self { verifier })
    }

    /// Checks that `proof` is a trusted key's signature of a grant of `key` with `token`;
    /// the grant's id when it is, `ProofInvalid` when it is missing, malformed, signed by
    /// another key, or names another key or token.
    #[pyo3(signature = (key, token, proof))]
    fn verify(&self, key: &str, token: u64, proof: Option<String>) -> PyResult<String> {
        let key = LockKey::parse(key).map_err(|e| ProofInvalid::new_err(e.to_string()))?;
        let write = FencedWrite {
            token: FencingToken(token),
            proof,
        };
        let proven = write
            .verify(&self.verifier, &key)
            .map_err(|err| ProofInvalid::new_err(err.to_string()))?;
        Ok(proven.grant.to_string())
    }

    /// `verify` for a resource that also takes permits and readers (ADR 0007): the grant's
    /// id and what it holds of the key (`exclusive`, `shared`, `permit-{slot}`), signed in
    /// the proof. Fence a permit's writes under `{key}#permit-{slot}`; refuse a reader's
    /// write (`fencedlock.psycopg.fence_check(shared=True)` checks a reader's action).
    #[pyo3(signature = (key, token, proof))]
    fn verify_scoped(
        &self,
        key: &str,
        token: u64,
        proof: Option<String>,
    ) -> PyResult<(String, String)> {
        let key = LockKey::parse(key).map_err(|e| ProofInvalid::new_err(e.to_string()))?;
        let write = FencedWrite {
            token: FencingToken(token),
            proof,
        };
        let (proven, scope) = write
            .verify_scoped(&self.verifier, &key)
            .map_err(|err| ProofInvalid::new_err(err.to_string()))?;
        Ok((proven.grant.to_string(), scope.as_text()))
    }

    /// Reads a write's `X-Fencing-Token` and `X-Fencing-Proof` (every value the request
    /// sent of each) by fence-kit's header rule, then verifies the proof for `key`.
    /// `InvalidArgument` for a bad key or a token header missing, repeated or malformed (or
    /// a repeated proof header); `ProofInvalid` for a proof that does not verify.
    #[pyo3(signature = (key, tokens, proofs))]
    fn verify_headers(
        &self,
        key: &str,
        tokens: Vec<String>,
        proofs: Vec<String>,
    ) -> PyResult<ProvenWrite> {
        let key =
            LockKey::parse(key).map_err(|e| InvalidArgument::new_err(format!("lock key: {e}")))?;
        let mut headers = HeaderMap::new();
        append(&mut headers, FENCING_TOKEN_HEADER, &tokens)?;
        append(&mut headers, FENCING_PROOF_HEADER, &proofs)?;
        let proven =
            fence_kit::proven_write(&headers, &self.verifier, &key).map_err(fence_error)?;
        Ok(ProvenWrite {
            key: key.as_str().to_owned(),
            token: proven.token.0,
            grant: proven.grant.to_string(),
        })
    }
}

/// Appends each of `values` as header `name`; a value no HTTP header can carry (a control
/// character) is `InvalidArgument`.
fn append(headers: &mut HeaderMap, name: &str, values: &[String]) -> PyResult<()> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|e| InvalidArgument::new_err(format!("{name}: {e}")))?;
    for value in values {
        let value = HeaderValue::from_str(value)
            .map_err(|_| InvalidArgument::new_err(format!("{name}: not a header value")))?;
        headers.append(header.clone(), value);
    }
    Ok(())
}
