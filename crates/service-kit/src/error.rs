//! Every service's one error type: every failure leaves as `{"code","message"}` with the
//! status its code fixes. A code is any service's code enum converted into a [`WireCode`]
//! (`lock_api::ErrorCode` for the lock surface and shared plumbing,
//! `payment_api::PaymentCode` for payouts).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use lock_api::{ErrorCode, ValidationError, WireCode};
use serde::Serialize;

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The code (fixes the status).
    pub code: WireCode,
    /// For humans; names the field for `INVALID_ARGUMENT`.
    pub message: String,
    /// Sent as `Retry-After` (whole seconds, at least 1); every 429 carries one, at least
    /// [`RETRY_AFTER_DEFAULT_SECS`].
    pub retry_after_secs: Option<u64>,
}

/// `Retry-After` of a 429 that names no wait of its own: a limit a client may try again
/// against in a second (a waiter quota frees when any parked acquire ends).
pub const RETRY_AFTER_DEFAULT_SECS: u64 = 1;

impl ApiError {
    /// An error with `code` and `message`.
    pub fn new(code: impl Into<WireCode>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            retry_after_secs: None,
        }
    }

    /// The same error, telling the caller to come back after `wait` (rounded up to whole
    /// seconds, as `Retry-After` counts them).
    pub fn retry_after(mut self, wait: std::time::Duration) -> Self {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        self.retry_after_secs = Some(secs.max(1));
        self
    }

    /// `INVALID_ARGUMENT` naming `field`.
    pub fn invalid(field: &str, reason: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::InvalidArgument, format!("{field}: {reason}"))
    }
}

impl From<fence_kit::FenceError> for ApiError {
    fn from(err: fence_kit::FenceError) -> Self {
        Self::new(err.code, err.message)
    }
}

impl From<ValidationError> for ApiError {
    fn from(err: ValidationError) -> Self {
        Self::invalid(err.field, err.reason)
    }
}

/// The code answering a bare status that no handler produced (router, limits, timeouts).
pub fn code_for_status(status: StatusCode) -> ErrorCode {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => ErrorCode::InvalidArgument,
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthenticated,
        StatusCode::FORBIDDEN => ErrorCode::Forbidden,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::REQUEST_TIMEOUT => ErrorCode::Timeout,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        StatusCode::URI_TOO_LONG => ErrorCode::UriTooLong,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => ErrorCode::HeadersTooLarge,
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::StoreUnavailable,
        _ => ErrorCode::Internal,
    }
}

/// The body every error leaves as.
#[derive(Serialize)]
struct Body<'a> {
    code: &'static str,
    message: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.code.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (
            status,
            Json(Body {
                code: self.code.code,
                message: &self.message,
            }),
        )
            .into_response();
        let too_many = status == StatusCode::TOO_MANY_REQUESTS;
        let retry_after = self
            .retry_after_secs
            .or(too_many.then_some(RETRY_AFTER_DEFAULT_SECS));
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        tag(response, self.code)
    }
}

/// Attaches the error code to a response so outer layers (metrics) can see it.
pub fn tag(mut response: Response, code: WireCode) -> Response {
    response.extensions_mut().insert(code);
    response
}

/// An unknown route.
pub async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_429_says_when_to_come_back() {
        for code in [
            ErrorCode::RateLimited,
            ErrorCode::TooManySessions,
            ErrorCode::TooManyWaiters,
        ] {
            let answer = ApiError::new(code, "over").into_response();
            assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS, "{code:?}");
            assert_eq!(
                answer.headers()[axum::http::header::RETRY_AFTER],
                RETRY_AFTER_DEFAULT_SECS.to_string(),
                "{code:?}"
            );
        }
        let told = ApiError::new(ErrorCode::TooManySessions, "over")
            .retry_after(std::time::Duration::from_millis(4_200))
            .into_response();
        assert_eq!(told.headers()[axum::http::header::RETRY_AFTER], "5");
        let other = ApiError::new(ErrorCode::LockHeld, "held").into_response();
        assert!(
            other
                .headers()
                .get(axum::http::header::RETRY_AFTER)
                .is_none()
        );
    }

    /// The parser-level answers of every served port (tls-kit's connection wrapper) speak
    /// this error surface: each code is an `ErrorCode` with that status.
    #[test]
    fn parser_answers_use_the_error_codes_of_the_surface() {
        let codes = [
            ErrorCode::InvalidArgument,
            ErrorCode::UriTooLong,
            ErrorCode::HeadersTooLarge,
        ];
        for ((status, _, code, _), expected) in tls_kit::PARSE_ERROR_ANSWERS.into_iter().zip(codes)
        {
            assert_eq!((status, code), (expected.http_status(), expected.as_str()));
        }
    }
}
