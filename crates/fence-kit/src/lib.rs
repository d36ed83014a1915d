//! The resource side of fencing, for any service that writes on behalf of a lock holder.
//!
//! A lock alone does not protect a resource: a holder that freezes past its lease (a GC
//! pause, a SIGSTOP, a partition) wakes up still believing it holds the lock and writes.
//! The lock service hands every grant a rising fencing token and a signed proof of it; the
//! resource must do three things with them, and this crate does each:
//!
//! 1. **Verify the proof offline** ([`FencedWrite::verify`], [`FenceVerifier`]): the
//!    `X-Fencing-Proof` header is a lock-server's Ed25519 signature of the lock key, the
//!    token and the grant (ADR 0004). A token alone is a number anyone can make up; one
//!    forged `i64::MAX` would jam a resource that trusts numbers.
//! 2. **Apply the fence rule where it writes** ([`check_fence`], or the SQL function of
//!    [`postgres`] inside the writer's own transaction): a claim takes a token at or above
//!    the fence and raises it; later writes come only from the grant that claimed; a stale
//!    token is refused before the resource reports that it ended.
//! 3. **Refuse with a type** ([`FenceError`]): `INVALID_ARGUMENT` (400) for a missing or
//!    malformed header, `PROOF_INVALID` (403), `FENCED_OUT` (409), as `{"code","message"}`
//!    with feature `axum`.
//!
//! This crate depends on the lock service's wire types (`lock-api`) and nothing of the
//! lock-server. Where headers come from is the caller's: [`FencedWrite::from_headers`]
//! reads an `http::HeaderMap`, and with feature `axum` `FencedWrite` is an extractor.

mod error;
mod headers;
mod keys;
pub mod postgres;
mod rule;

pub use error::FenceError;
pub use headers::{
    FENCING_TOKEN_HEADER, FencedWrite, ProvenFence, fencing_token, proven_write, single_header,
};
pub use keys::TrustedKeys;
pub use lock_api::{
    FENCING_PROOF_HEADER, FenceVerifier, FencingToken, GrantId, GrantScope, LockKey, ProofError,
};
pub use rule::{
    Case, FenceRefusal, FenceRule, GrantFence, Lifecycle, Open, cases, check_fence, check_open,
};
