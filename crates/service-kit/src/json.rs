//! `ApiJson<T>`: a JSON body extractor whose refusals name the field, as `ApiError`s.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use lock_api::ErrorCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::layers::BodyLimit;

/// A JSON request body. Refuses a missing or non-JSON content type (415), an oversized body
/// (413) and anything serde refuses (400, with the path of the offending field).
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        require_json(req.headers())?;
        let limit = req.extensions().get::<BodyLimit>().map(|l| l.0);
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    match limit {
                        Some(bytes) => format!("body: larger than {bytes} bytes"),
                        None => "body: larger than this endpoint accepts".to_owned(),
                    },
                )
            } else {
                ApiError::invalid("body", rejection.body_text())
            }
        })?;
        Self::decode(&bytes)
    }
}

/// 415 unless the request says its body is `application/json`.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "body: expected Content-Type: application/json",
        ));
    }
    Ok(())
}

impl<T: DeserializeOwned + Default> ApiJson<T> {
    /// An optional JSON body already read: empty is `T::default()`; anything else must be
    /// `application/json` and decode as [`ApiJson`] decodes.
    pub fn optional(headers: &HeaderMap, bytes: &[u8]) -> Result<T, ApiError> {
        if bytes.is_empty() {
            return Ok(T::default());
        }
        require_json(headers)?;
        Self::decode(bytes).map(|Self(value)| value)
    }
}

impl<T: DeserializeOwned> ApiJson<T> {
    /// Decodes a JSON body already read (its media type checked by the caller); a refusal
    /// names the field it is about.
    pub fn decode(bytes: &[u8]) -> Result<Self, ApiError> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
            let path = err.path().to_string();
            // A syntax error is about the body as a whole, wherever the parser stopped.
            let malformed = err.inner().is_syntax() || err.inner().is_eof();
            let field = if path == "." || malformed {
                "body".to_owned()
            } else {
                path
            };
            let reason = err.inner().to_string();
            let reason = reason
                .strip_prefix(&format!("{field}: "))
                .unwrap_or(&reason)
                .to_owned();
            ApiError::invalid(&field, reason)
        })?;
        de.end().map_err(|e| ApiError::invalid("body", e))?;
        Ok(Self(value))
    }
}
