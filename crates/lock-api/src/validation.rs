//! Refusals of request fields: [`ValidationError`], and the check every field a person reads
//! passes ([`check_readable`], the text rule of [`crate::text`]).

use crate::text::first_unreadable;

/// Why an identifier was refused. `field` names the offending input for the error body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ValidationError {
    /// The request field (or path segment) that was refused.
    pub field: &'static str,
    /// What is wrong with it, for humans.
    pub reason: String,
}

impl ValidationError {
    /// A refusal of `field` for `reason`.
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// Checks `text`, the value of request field `field`, against the text rule: the refusal
/// names the first character a person could not read, its position (in characters), its
/// code point and why.
pub fn check_readable(field: &'static str, text: &str) -> Result<(), ValidationError> {
    let Some((at, c, why)) = first_unreadable(text) else {
        return Ok(());
    };
    Err(ValidationError::new(
        field,
        format!(
            "must be readable text: character {at} is U+{:04X}, {}",
            u32::from(c),
            why.describe()
        ),
    ))
}
