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
    /// Sent as `Retry-After` (whole seconds, at least 1) with a 429.
    pub retry_after_secs: Option<u64>,
}

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
        if let Some(secs) = self.retry_after_secs {
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
