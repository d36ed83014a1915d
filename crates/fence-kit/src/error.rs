//! A fenced write's refusal, typed: the code fixes the HTTP status, the message names the
//! header. With feature `axum` it answers as `{"code","message"}`.

use lock_api::ErrorCode;

/// Why a fenced write is refused before, or by, the fence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}", code = code.as_str())]
pub struct FenceError {
    /// `INVALID_ARGUMENT` (400: a header missing, repeated or malformed), `PROOF_INVALID`
    /// (403: the proof is missing or does not sign this key and token) or `FENCED_OUT`
    /// (409: a newer grant holds the fence).
    pub code: ErrorCode,
    /// For humans; names the header.
    pub message: String,
}

impl FenceError {
    pub(crate) fn invalid(header: &str, reason: impl std::fmt::Display) -> Self {
        Self {
            code: ErrorCode::InvalidArgument,
            message: format!("{header}: {reason}"),
        }
    }

    pub(crate) fn proof(reason: impl std::fmt::Display) -> Self {
        Self {
            code: ErrorCode::ProofInvalid,
            message: format!("X-Fencing-Proof: {reason}"),
        }
    }

    /// `FENCED_OUT`: the resource's fence is `fence`, and `token` may not write.
    pub fn fenced_out(token: i64, fence: i64) -> Self {
        Self {
            code: ErrorCode::FencedOut,
            message: format!("token {token} is fenced out: a newer grant holds fence {fence}"),
        }
    }

    /// The HTTP status the code is sent with.
    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for FenceError {
    fn into_response(self) -> axum::response::Response {
        let status = axum::http::StatusCode::from_u16(self.http_status())
            .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::json!({"code": self.code.as_str(), "message": self.message});
        (status, axum::Json(body)).into_response()
    }
}
