//! `TrustedKeys`: the resource side of fencing for Python, offline. A resource checks that a
//! write's token and proof are a trusted lock-server key's signature of a grant of the key it
//! writes under, by fence-kit's own rule (the same code the Rust resources run).

use fence_kit::{FenceVerifier, FencedWrite, FencingToken, LockKey};
use pyo3::prelude::*;

use crate::errors::{ConfigError, ProofInvalid};

/// The lock-servers' public keys a resource trusts (`FENCE_PUBLIC_KEYS`: `key_id=base64,...`).
#[pyclass(module = "fencedlock._native", frozen)]
pub(crate) struct TrustedKeys {
    verifier: FenceVerifier,
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
}
