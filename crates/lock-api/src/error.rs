//! Error codes of the lock surface and of HTTP plumbing every service shares, and the typed
//! errors SDK callers see.
//!
//! Every service answers errors as `{"code","message"}`. [`ErrorCode`] fixes the HTTP
//! status of each code it owns; [`WireCode`] is the code-and-status pair any service's own
//! code enum converts into (payout codes live in `payment-api`). [`LockError::from_wire`]
//! turns a lock-server answer back into a typed error with a retry verdict
//! (`docs/contracts/C2-rust-api.md`).

use serde::{Deserialize, Serialize};

use crate::ids::{FencingToken, LockKey};

/// The JSON error body of every service.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable code.
    pub code: ErrorCode,
    /// Human-readable detail; names the offending field for `INVALID_ARGUMENT`.
    pub message: String,
}

/// A code as it goes on the wire, with the HTTP status it is always sent with. Every
/// service's code enum converts into it, so one error type can answer any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WireCode {
    /// The wire spelling, e.g. `"NOT_LEADER"`.
    pub code: &'static str,
    /// The HTTP status.
    pub status: u16,
}

impl From<ErrorCode> for WireCode {
    fn from(code: ErrorCode) -> Self {
        Self {
            code: code.as_str(),
            status: code.http_status(),
        }
    }
}

/// The codes of the lock surface and of the HTTP plumbing every service shares, with a
/// fixed HTTP status. `FENCED_OUT` lives here because it is the fencing protocol's answer,
/// spoken by any resource that checks tokens; payout-specific codes are `payment-api`'s.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// 400: the request is malformed or a field is out of range.
    InvalidArgument,
    /// 401: a credential is required and missing or wrong.
    Unauthenticated,
    /// 403: the operation is disabled (e.g. no admin credential configured).
    Forbidden,
    /// 404: no such route.
    NotFound,
    /// 405: the route exists but not with this method.
    MethodNotAllowed,
    /// 408: the request took longer than the server's budget.
    Timeout,
    /// 413: the body is larger than the service accepts.
    PayloadTooLarge,
    /// 415: the body is not `application/json`.
    UnsupportedMediaType,
    /// 414: the request URI is longer than the server's parser accepts.
    UriTooLong,
    /// 431: the request headers are larger than the server's parser accepts.
    HeadersTooLarge,
    /// 403: a fenced write's `X-Fencing-Proof` is missing, malformed, signed by an unknown
    /// key, or does not sign this lock key and token: the token was not issued by the lock
    /// service for this resource.
    ProofInvalid,
    /// 404: the session does not exist (never did, or was reaped).
    SessionUnknown,
    /// 410: the session exists but has expired.
    SessionExpired,
    /// 409: another session holds the lock.
    LockHeld,
    /// 429: this replica already holds as many waiters as it allows (per key or in all);
    /// retry after backoff, as for `LOCK_HELD`.
    TooManyWaiters,
    /// 429: this credential sent more requests than its rate allows; `Retry-After` says
    /// when the next one is let through.
    RateLimited,
    /// 429: this credential already holds as many live sessions as its quota allows
    /// (counted across replicas); close one first.
    TooManySessions,
    /// 409: the grant being renewed is no longer live.
    LockLost,
    /// 409: the grant being renewed was revoked by an operator (L8); the message says by
    /// whom and why.
    LockRevoked,
    /// 404: nobody holds the lock.
    LockNotHeld,
    /// 409: the key's live grants are of another kind than the acquire asks for (a
    /// semaphore of another count, permits beside a lock, a writer asked by a reader of the
    /// key); the message names what the key is held as. Waiting does not help while they
    /// live (ADR 0007).
    LockKindConflict,
    /// 409: a token lower than the resource's fence was presented.
    FencedOut,
    /// 503: the store behind this replica cannot take writes now (read-only, no leader, draining).
    NotLeader,
    /// 503: the store cannot be reached.
    StoreUnavailable,
    /// 500: a bug; the message says what to report.
    Internal,
}

impl ErrorCode {
    /// The HTTP status this code is always sent with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidArgument => 400,
            Self::Unauthenticated => 401,
            Self::Forbidden | Self::ProofInvalid => 403,
            Self::NotFound | Self::SessionUnknown | Self::LockNotHeld => 404,
            Self::MethodNotAllowed => 405,
            Self::Timeout => 408,
            Self::LockHeld
            | Self::LockLost
            | Self::LockRevoked
            | Self::FencedOut
            | Self::LockKindConflict => 409,
            Self::SessionExpired => 410,
            Self::PayloadTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::UriTooLong => 414,
            Self::HeadersTooLarge => 431,
            Self::TooManyWaiters | Self::RateLimited | Self::TooManySessions => 429,
            Self::NotLeader | Self::StoreUnavailable => 503,
            Self::Internal => 500,
        }
    }

    /// The wire spelling, e.g. `"NOT_LEADER"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::Forbidden => "FORBIDDEN",
            Self::NotFound => "NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::Timeout => "TIMEOUT",
            Self::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Self::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Self::UriTooLong => "URI_TOO_LONG",
            Self::HeadersTooLarge => "HEADERS_TOO_LARGE",
            Self::ProofInvalid => "PROOF_INVALID",
            Self::SessionUnknown => "SESSION_UNKNOWN",
            Self::SessionExpired => "SESSION_EXPIRED",
            Self::LockHeld => "LOCK_HELD",
            Self::TooManyWaiters => "TOO_MANY_WAITERS",
            Self::RateLimited => "RATE_LIMITED",
            Self::TooManySessions => "TOO_MANY_SESSIONS",
            Self::LockLost => "LOCK_LOST",
            Self::LockRevoked => "LOCK_REVOKED",
            Self::LockNotHeld => "LOCK_NOT_HELD",
            Self::LockKindConflict => "LOCK_KIND_CONFLICT",
            Self::FencedOut => "FENCED_OUT",
            Self::NotLeader => "NOT_LEADER",
            Self::StoreUnavailable => "STORE_UNAVAILABLE",
            Self::Internal => "INTERNAL",
        }
    }
}

/// What a caller should do after an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryVerdict {
    /// Never retry: the outcome is final (`LockLost`, `FencedOut`, bad input).
    Never,
    /// Retry on the next heartbeat tick or acquire attempt, maybe on another endpoint; only
    /// the caller's own deadline decides loss (`NOT_LEADER`, I/O errors).
    NextTick,
    /// Retry after backoff: another holder may release (`LOCK_HELD`).
    Backoff,
    /// Retry after backoff on the same replica: the caller is over its rate or quota there
    /// (429 `RATE_LIMITED`, `TOO_MANY_SESSIONS`); when the caller's budget runs out the
    /// refusal stands (it says nothing about who holds the lock).
    Throttled,
}

/// Why a lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LossReason {
    /// The client's conservative local deadline passed.
    DeadlinePassed,
    /// The server no longer knows the session (404).
    SessionUnknown,
    /// The server says the session expired (410).
    SessionExpired,
    /// The server refused to renew the grant (409 `LOCK_LOST`).
    RenewRefused,
    /// The session was closed by its owner.
    SessionClosed,
    /// The release found no live grant with this token (expired, revoked or taken over).
    NotHeld,
    /// An operator revoked the grant (L8); [`LockLost::detail`] says by whom and why.
    Revoked,
}

impl LossReason {
    /// The snake_case spelling used in logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DeadlinePassed => "deadline_passed",
            Self::SessionUnknown => "session_unknown",
            Self::SessionExpired => "session_expired",
            Self::RenewRefused => "renew_refused",
            Self::SessionClosed => "session_closed",
            Self::NotHeld => "not_held",
            Self::Revoked => "revoked",
        }
    }
}

/// A lock is lost. Terminal: never retryable, no write may follow it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lock {lock_key} (token {fencing_token}) is lost: {reason:?}{}", detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
#[non_exhaustive]
pub struct LockLost {
    /// The key that was held.
    pub lock_key: LockKey,
    /// The grant's token.
    pub fencing_token: FencingToken,
    /// Why it is lost.
    pub reason: LossReason,
    /// The server's words on the loss, when it said any: for a revoke, by whom and why.
    pub detail: Option<String>,
}

impl LockLost {
    /// `lock_key`'s grant with `token` is lost for `reason`, with nothing more said.
    pub fn new(lock_key: LockKey, fencing_token: FencingToken, reason: LossReason) -> Self {
        Self {
            lock_key,
            fencing_token,
            reason,
            detail: None,
        }
    }

    /// The same loss with the server's words on it.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// The typed errors of the lock surface, as an SDK caller sees them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is lost; terminal.
    #[error(transparent)]
    Lost(#[from] LockLost),
    /// A resource refused a token below its fence; terminal for this attempt.
    #[error("fenced out: {message}")]
    FencedOut {
        /// The resource's explanation.
        message: String,
    },
    /// Another session holds the lock.
    #[error("contention: {message}")]
    Contention {
        /// The server's explanation.
        message: String,
    },
    /// This credential is over its request rate or its session quota (429); retry after a
    /// backoff, as the server's `Retry-After` asks.
    #[error("throttled: {message}")]
    Throttled {
        /// The server's explanation: which limit.
        message: String,
    },
    /// The session is unknown to the store (404).
    #[error("session unknown: {message}")]
    SessionUnknown {
        /// The server's explanation.
        message: String,
    },
    /// The session expired (410).
    #[error("session expired: {message}")]
    SessionExpired {
        /// The server's explanation.
        message: String,
    },
    /// The store cannot take writes right now (503 `NOT_LEADER`).
    #[error("not leader: {message}")]
    NotLeader {
        /// The server's explanation, naming other replicas when it knows them.
        message: String,
    },
    /// The caller's input was refused (400 and other 4xx caller mistakes).
    #[error("invalid argument: {message}")]
    InvalidArgument {
        /// Names the field.
        message: String,
    },
    /// The store or the network failed; the request may or may not have been applied.
    #[error("unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
    },
    /// The server answered something this client does not understand.
    #[error("protocol error (HTTP {status}): {message}")]
    Protocol {
        /// The HTTP status.
        status: u16,
        /// The body or a description.
        message: String,
    },
}

impl LockError {
    /// Maps an HTTP error answer to a typed error. `LOCK_LOST` needs the key and token of
    /// the grant the caller presented, so it becomes [`LockError::Lost`].
    pub fn from_wire(
        status: u16,
        body: ErrorBody,
        grant: Option<(&LockKey, FencingToken)>,
    ) -> Self {
        let message = body.message;
        match body.code {
            ErrorCode::LockLost => match grant {
                Some((key, token)) => {
                    Self::Lost(LockLost::new(key.clone(), token, LossReason::RenewRefused))
                }
                None => Self::Protocol { status, message },
            },
            ErrorCode::LockRevoked => match grant {
                Some((key, token)) => Self::Lost(LockLost {
                    detail: Some(message),
                    ..LockLost::new(key.clone(), token, LossReason::Revoked)
                }),
                None => Self::Protocol { status, message },
            },
            ErrorCode::FencedOut => Self::FencedOut { message },
            ErrorCode::LockHeld | ErrorCode::TooManyWaiters => Self::Contention { message },
            ErrorCode::RateLimited | ErrorCode::TooManySessions => Self::Throttled { message },
            ErrorCode::SessionUnknown => Self::SessionUnknown { message },
            ErrorCode::SessionExpired => Self::SessionExpired { message },
            ErrorCode::NotLeader => Self::NotLeader { message },
            ErrorCode::StoreUnavailable | ErrorCode::Timeout => Self::Unavailable { message },
            ErrorCode::InvalidArgument
            | ErrorCode::PayloadTooLarge
            | ErrorCode::UnsupportedMediaType
            | ErrorCode::UriTooLong
            | ErrorCode::HeadersTooLarge
            | ErrorCode::ProofInvalid
            | ErrorCode::Unauthenticated
            | ErrorCode::Forbidden
            | ErrorCode::LockKindConflict => Self::InvalidArgument { message },
            ErrorCode::NotFound
            | ErrorCode::MethodNotAllowed
            | ErrorCode::LockNotHeld
            | ErrorCode::Internal => Self::Protocol { status, message },
        }
    }

    /// Whether and how to retry.
    pub fn retry(&self) -> RetryVerdict {
        match self {
            Self::NotLeader { .. } | Self::Unavailable { .. } => RetryVerdict::NextTick,
            Self::Contention { .. } => RetryVerdict::Backoff,
            Self::Throttled { .. } => RetryVerdict::Throttled,
            Self::Lost(_)
            | Self::FencedOut { .. }
            | Self::SessionUnknown { .. }
            | Self::SessionExpired { .. }
            | Self::InvalidArgument { .. }
            | Self::Protocol { .. } => RetryVerdict::Never,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [ErrorCode; 25] = [
        ErrorCode::LockKindConflict,
        ErrorCode::LockRevoked,
        ErrorCode::RateLimited,
        ErrorCode::TooManySessions,
        ErrorCode::TooManyWaiters,
        ErrorCode::InvalidArgument,
        ErrorCode::Unauthenticated,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Timeout,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::UriTooLong,
        ErrorCode::HeadersTooLarge,
        ErrorCode::ProofInvalid,
        ErrorCode::SessionUnknown,
        ErrorCode::SessionExpired,
        ErrorCode::LockHeld,
        ErrorCode::LockLost,
        ErrorCode::LockNotHeld,
        ErrorCode::FencedOut,
        ErrorCode::NotLeader,
        ErrorCode::StoreUnavailable,
        ErrorCode::Internal,
    ];

    #[test]
    fn wire_spelling_matches_serde() {
        for code in ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let wire = WireCode::from(code);
            assert_eq!(
                (wire.code, wire.status),
                (code.as_str(), code.http_status())
            );
        }
    }

    #[test]
    fn statuses_of_the_system_brief() {
        assert_eq!(ErrorCode::SessionUnknown.http_status(), 404);
        assert_eq!(ErrorCode::SessionExpired.http_status(), 410);
        assert_eq!(ErrorCode::LockHeld.http_status(), 409);
        assert_eq!(ErrorCode::LockLost.http_status(), 409);
        assert_eq!(ErrorCode::NotLeader.http_status(), 503);
        assert_eq!(ErrorCode::InvalidArgument.http_status(), 400);
    }

    #[test]
    fn lock_lost_is_terminal_and_not_leader_is_retried() {
        let key = LockKey::parse("k").unwrap();
        let body = |code| ErrorBody {
            code,
            message: "m".into(),
        };
        let lost = LockError::from_wire(
            409,
            body(ErrorCode::LockLost),
            Some((&key, FencingToken(3))),
        );
        assert!(matches!(lost, LockError::Lost(ref l) if l.fencing_token == FencingToken(3)));
        assert_eq!(lost.retry(), RetryVerdict::Never);
        let nl = LockError::from_wire(503, body(ErrorCode::NotLeader), None);
        assert_eq!(nl.retry(), RetryVerdict::NextTick);
        let held = LockError::from_wire(409, body(ErrorCode::LockHeld), None);
        assert_eq!(held.retry(), RetryVerdict::Backoff);
        for code in [ErrorCode::RateLimited, ErrorCode::TooManySessions] {
            let throttled = LockError::from_wire(429, body(code), None);
            assert!(matches!(throttled, LockError::Throttled { .. }), "{code:?}");
            assert_eq!(throttled.retry(), RetryVerdict::Throttled);
        }
    }
}
