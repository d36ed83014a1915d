//! L8's reason: why an operator revoked a grant, carried to the holder (its renew is refused
//! with `LOCK_REVOKED` and the reason), to the audit line and, as a bounded label, to the
//! revocation metric.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::validation::ValidationError;
use crate::validation::check_readable;

/// Longest revoke reason, in bytes: a sentence, not a document.
pub const REVOKE_REASON_MAX_BYTES: usize = 200;

/// The metric labels a reason is counted under: its first word (before a space or a colon,
/// any case) when it is one of these, `other` when it is not, `none` without a reason. A
/// free-text label would let one caller create series without bound.
pub const REVOKE_REASON_LABELS: [&str; 7] = [
    "maintenance",
    "incident",
    "security",
    "operator",
    "test",
    "other",
    "none",
];

/// Why an operator revoked a grant: 1 to [`REVOKE_REASON_MAX_BYTES`] bytes of text a
/// person can read (no control, invisible or reordering characters), not blank.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RevokeReason(String);

impl RevokeReason {
    /// Validates `raw` as a reason.
    pub fn parse(raw: impl Into<String>) -> Result<Self, ValidationError> {
        let raw = raw.into();
        if raw.trim().is_empty() {
            return Err(ValidationError::new("reason", "must not be blank"));
        }
        if raw.len() > REVOKE_REASON_MAX_BYTES {
            return Err(ValidationError::new(
                "reason",
                format!(
                    "is {} bytes, the limit is {REVOKE_REASON_MAX_BYTES}",
                    raw.len()
                ),
            ));
        }
        check_readable("reason", &raw)?;
        Ok(Self(raw))
    }

    /// The reason as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The bounded metric label of `reason` (one of [`REVOKE_REASON_LABELS`]).
    pub fn label(reason: Option<&Self>) -> &'static str {
        let Some(reason) = reason else {
            return "none";
        };
        let first = reason
            .0
            .trim_start()
            .split(|c: char| c.is_whitespace() || c == ':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        REVOKE_REASON_LABELS[..5]
            .iter()
            .find(|label| **label == first)
            .copied()
            .unwrap_or("other")
    }
}

impl TryFrom<String> for RevokeReason {
    type Error = ValidationError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        Self::parse(raw)
    }
}

impl From<RevokeReason> for String {
    fn from(reason: RevokeReason) -> Self {
        reason.0
    }
}

impl fmt::Display for RevokeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// L8 `POST /v1/locks/{lock_key}/revoke` body: optional (an empty body revokes without a
/// reason).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeRequest {
    /// Why: told to the holder (its renew is refused `LOCK_REVOKED` with it), written to the
    /// audit line, counted by its first word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<RevokeReason>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_readable_text_within_its_bound() {
        assert!(RevokeReason::parse("maintenance: draining node 3").is_ok());
        for bad in [
            "",
            "   ",
            "a\u{202E}b",
            "line\nbreak",
            &"x".repeat(201),
            "\u{E0068}\u{E0069}",
            "a\u{2028}b",
            "a\u{206A}b",
            "\u{3164}",
        ] {
            assert!(RevokeReason::parse(bad).is_err(), "{bad:?}");
        }
        let parsed: RevokeRequest = serde_json::from_str(r#"{"reason":"incident 42"}"#).unwrap();
        assert_eq!(parsed.reason.unwrap().as_str(), "incident 42");
        assert!(serde_json::from_str::<RevokeRequest>(r#"{"reason":""}"#).is_err());
        assert!(serde_json::from_str::<RevokeRequest>(r#"{"why":"x"}"#).is_err());
    }

    #[test]
    fn the_metric_label_is_one_of_a_bounded_set() {
        let label = |raw: &str| RevokeReason::label(Some(&RevokeReason::parse(raw).unwrap()));
        assert_eq!(label("Maintenance: node 3"), "maintenance");
        assert_eq!(label("security key leaked"), "security");
        assert_eq!(label("incident:77"), "incident");
        assert_eq!(label("because I said so"), "other");
        assert_eq!(
            label("none"),
            "other",
            "a reason is never counted as no reason"
        );
        assert_eq!(RevokeReason::label(None), "none");
        for raw in ["maintenance", "x", "test it", "Operator"] {
            assert!(REVOKE_REASON_LABELS.contains(&label(raw)));
        }
    }
}
