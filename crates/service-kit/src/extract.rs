//! Headers that must be sent once. A fenced write's headers are fence-kit's
//! ([`fence_kit::FencedWrite`]); its refusals convert into [`ApiError`].

use axum::http::{HeaderMap, HeaderValue};

use crate::error::ApiError;

/// The one value of header `name`, `None` when absent; a header sent twice is refused
/// (naming `field`): a proxy and a service could each read a different copy.
pub fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
    field: &str,
) -> Result<Option<&'a HeaderValue>, ApiError> {
    Ok(fence_kit::single_header(headers, name, field)?)
}
