//! Wire and domain types of the lock service.
//!
//! Everything a client and a server must agree on lives here and nowhere else: the validated
//! [`LockKey`], the ordered [`FencingToken`], the JSON bodies of the lock surface
//! (`docs/contracts/C3-http-surfaces.md`), the error codes with their HTTP statuses, the
//! typed errors an SDK caller sees ([`LockError`], [`LockLost`]), and the log [`Throttle`]
//! the services and the executor share. This crate does no I/O.

mod credentials;
mod error;
mod events;
mod ids;
mod limits;
#[cfg(feature = "openapi")]
mod openapi;
mod proof;
mod revoke;
mod text;
mod throttle;
mod validation;
mod wire;

pub use credentials::{
    CREDENTIAL_NAME_MAX_BYTES, CREDENTIAL_SECRET_BYTES, CallerProof, CredentialEntry,
    CredentialsError, LOCK_CREDENTIAL_ROLES, LimitOverrides, OwnerRule, PAYMENT_CREDENTIAL_ROLES,
    parse_credentials, secret_sha256,
};
pub use error::{ErrorBody, ErrorCode, LockError, LockLost, LossReason, RetryVerdict, WireCode};
pub use events::{EventKind, LockEvent, WatchFrame, WatchGap, WatchOpen, watched};
pub use ids::{FencingToken, LeaderValue, LockKey, OwnerId, SessionId, SessionTag};
pub use limits::*;
pub use proof::{
    FENCING_PROOF_HEADER, FenceSigner, FenceVerifier, GRANT_ID_BYTES, GrantId, GrantScope,
    KEY_ID_MAX_BYTES, PROOF_VERSION, ProofError, SCOPED_PROOF_VERSION, signed_message,
    signed_scoped_message,
};
pub use revoke::{REVOKE_REASON_LABELS, REVOKE_REASON_MAX_BYTES, RevokeReason, RevokeRequest};
pub use text::{Unreadable, is_hidden_char, unreadable};
pub use throttle::Throttle;
pub use validation::{ValidationError, check_readable};
pub use wire::*;
