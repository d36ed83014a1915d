//! The payout pipeline's own error codes (payment-resource's and rail-proxy's), and the
//! tolerant reading of any code a service may answer. The codes of the lock surface and of
//! shared HTTP plumbing (`INVALID_ARGUMENT`, `FENCED_OUT`, `STORE_UNAVAILABLE`, ...) are
//! `lock_api::ErrorCode`'s.

use lock_api::{ErrorCode, WireCode};
use serde::{Deserialize, Serialize};

/// The payout-specific codes, each with a fixed HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentCode {
    /// 409: the payout is already in a terminal state.
    AlreadyTerminal,
    /// 409: the payout already has its one rail submission on record.
    AlreadySubmitted,
    /// 409: the rail submission is in flight; its outcome is not known yet.
    SubmissionInFlight,
    /// 404: no such payout.
    PayoutUnknown,
    /// 404: the payout has no rail submission on record.
    SubmissionUnknown,
}

impl PaymentCode {
    /// Every code, for tables and tests.
    pub const ALL: [Self; 5] = [
        Self::AlreadyTerminal,
        Self::AlreadySubmitted,
        Self::SubmissionInFlight,
        Self::PayoutUnknown,
        Self::SubmissionUnknown,
    ];

    /// The wire spelling, e.g. `"ALREADY_TERMINAL"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AlreadyTerminal => "ALREADY_TERMINAL",
            Self::AlreadySubmitted => "ALREADY_SUBMITTED",
            Self::SubmissionInFlight => "SUBMISSION_IN_FLIGHT",
            Self::PayoutUnknown => "PAYOUT_UNKNOWN",
            Self::SubmissionUnknown => "SUBMISSION_UNKNOWN",
        }
    }

    /// The HTTP status this code is always sent with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::AlreadyTerminal | Self::AlreadySubmitted | Self::SubmissionInFlight => 409,
            Self::PayoutUnknown | Self::SubmissionUnknown => 404,
        }
    }
}

impl From<PaymentCode> for WireCode {
    fn from(code: PaymentCode) -> Self {
        Self {
            code: code.as_str(),
            status: code.http_status(),
        }
    }
}

/// Any code a pipeline service may answer, read tolerantly: a code this build does not know
/// is [`AnyCode::Other`], never a parse failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyCode {
    /// A lock-surface or shared code.
    Common(ErrorCode),
    /// A payout code.
    Payment(PaymentCode),
    /// A code this build does not know.
    Other(String),
}

impl AnyCode {
    /// Reads a wire spelling.
    pub fn parse(code: &str) -> Self {
        let quoted = serde_json::Value::String(code.to_owned());
        if let Ok(common) = serde_json::from_value::<ErrorCode>(quoted.clone()) {
            Self::Common(common)
        } else if let Ok(payment) = serde_json::from_value::<PaymentCode>(quoted) {
            Self::Payment(payment)
        } else {
            Self::Other(code.to_owned())
        }
    }

    /// The code and its status, when this build knows it.
    pub fn wire(&self) -> Option<WireCode> {
        match self {
            Self::Common(code) => Some((*code).into()),
            Self::Payment(code) => Some((*code).into()),
            Self::Other(_) => None,
        }
    }

    /// Whether the answer is a refusal of the token or of the payout's state: the fence
    /// (`FENCED_OUT`), a terminal payout, or a submission already on record.
    pub fn is_refusal_of_a_stale_write(&self) -> bool {
        matches!(
            self,
            Self::Common(ErrorCode::FencedOut)
                | Self::Payment(PaymentCode::AlreadyTerminal | PaymentCode::AlreadySubmitted)
        )
    }
}

/// An error body with its code read tolerantly.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AnyErrorBody {
    /// The code as sent.
    pub code: String,
    /// For humans.
    pub message: String,
}

impl AnyErrorBody {
    /// The code, typed.
    pub fn code(&self) -> AnyCode {
        AnyCode::parse(&self.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payment_codes_spell_as_serde_does_and_read_back() {
        for code in PaymentCode::ALL {
            let json = serde_json::to_string(&code).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(AnyCode::parse(code.as_str()), AnyCode::Payment(code));
            assert_eq!(AnyCode::parse(code.as_str()).wire(), Some(code.into()));
        }
    }

    #[test]
    fn unknown_codes_are_other_not_errors() {
        assert_eq!(
            AnyCode::parse("FENCED_OUT"),
            AnyCode::Common(ErrorCode::FencedOut)
        );
        assert_eq!(
            AnyCode::parse("SOMETHING_NEW"),
            AnyCode::Other("SOMETHING_NEW".into())
        );
        assert_eq!(AnyCode::parse("SOMETHING_NEW").wire(), None);
        assert!(AnyCode::parse("ALREADY_SUBMITTED").is_refusal_of_a_stale_write());
        assert!(!AnyCode::parse("PAYOUT_UNKNOWN").is_refusal_of_a_stale_write());
    }
}
