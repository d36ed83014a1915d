//! Wire types of the payout pipeline's HTTP surfaces (`docs/contracts/C3-http-surfaces.md`):
//! payment-resource, rail-proxy and rail-stub. No I/O.
//!
//! The executor may depend on `lock-api` and `lock-client` only, so it reads these bodies
//! with its own tolerant structs; this crate serves the services and the harness.

use serde::{Deserialize, Serialize};

mod codes;

pub use codes::{AnyCode, AnyErrorBody, PaymentCode};

/// The lock guarding payout `payout_id`: `payout:{id}` (C1). Its fencing proofs sign this key.
pub fn payout_lock_key(payout_id: i64) -> lock_api::LockKey {
    lock_api::LockKey::parse(format!("payout:{payout_id}"))
        .unwrap_or_else(|_| unreachable!("payout:{{digits}} is a valid lock key"))
}

/// A payout id as a path writes it: ASCII digits only (no sign, no spaces), a positive
/// `i64`; `None` otherwise.
pub fn parse_payout_id(raw: &str) -> Option<i64> {
    Some(raw)
        .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|r| r.parse::<i64>().ok())
        .filter(|id| *id > 0)
}

/// The header that makes payout creation idempotent.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Longest accepted beneficiary, in bytes.
pub const BENEFICIARY_MAX_BYTES: usize = 140;

/// Whether `c` may not appear in a beneficiary (a name an operator reads must be the name
/// the rail receives): lock-api's rule for text a person reads.
pub use lock_api::{check_readable, is_hidden_char};

/// Longest accepted idempotency key, in bytes.
pub const IDEMPOTENCY_KEY_MAX_BYTES: usize = 128;
/// Largest amount accepted, in minor units (a sanity bound, not a business limit).
pub const AMOUNT_MAX_MINOR: i64 = 1_000_000_000_000;

/// Where a payout is. `SETTLED`, `REJECTED` and `RAIL_AMBIGUOUS` are terminal.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PayoutState {
    /// Created, never claimed.
    Pending,
    /// Claimed by a fence holder.
    Claimed,
    /// A rail submission is on record; the result is not posted yet.
    Submitted,
    /// The rail accepted it; the ledger has its posting.
    Settled,
    /// The rail rejected it.
    Rejected,
    /// The rail's answer is unknown (timeout, lost connection): never submitted again.
    RailAmbiguous,
}

impl PayoutState {
    /// The SQL/JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Claimed => "CLAIMED",
            Self::Submitted => "SUBMITTED",
            Self::Settled => "SETTLED",
            Self::Rejected => "REJECTED",
            Self::RailAmbiguous => "RAIL_AMBIGUOUS",
        }
    }

    /// Parses the SQL/JSON spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Claimed,
            Self::Submitted,
            Self::Settled,
            Self::Rejected,
            Self::RailAmbiguous,
        ]
        .into_iter()
        .find(|s| s.as_str() == raw)
    }

    /// Whether no further transition is possible.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Settled | Self::Rejected | Self::RailAmbiguous)
    }
}

/// A payout ends at `SETTLED`, `REJECTED` or `RAIL_AMBIGUOUS`: the fence refuses a stale
/// token before it says so.
impl fence_kit::Lifecycle for PayoutState {
    fn is_terminal(&self) -> bool {
        PayoutState::is_terminal(*self)
    }
}

/// `POST /v1/payouts` body (with an `Idempotency-Key` header).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePayout {
    /// Amount in minor units (cents), positive.
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 1_000_000_000_000_i64)
    )] // AMOUNT_MAX_MINOR
    pub amount_minor: i64,
    /// ISO 4217 code, three upper-case letters.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Z]{3}$", example = "EUR"))]
    pub currency: String,
    /// Who receives the money.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 140))]
    // BENEFICIARY_MAX_BYTES
    pub beneficiary: String,
}

/// Longest executor name an offer may carry: an owner id's bound, since an executor names
/// itself by its lock session's owner id (and the same rule: no control characters).
pub const OFFER_EXECUTOR_MAX_BYTES: usize = lock_api::OWNER_ID_MAX_BYTES;
/// Most payout ids an offer request may ask to skip.
pub const OFFER_SKIP_MAX: usize = 1_000;
/// Most payouts one offer request may take.
pub const OFFER_LIMIT_MAX: i64 = 500;
/// Shortest an offer may last, in milliseconds.
pub const OFFER_MS_MIN: i64 = 100;
/// Longest an offer may last, in milliseconds: a minute, the lock service's longest lease
/// (`lock.ttl.max`), which bounds how long one credential holder can keep payouts from the
/// other executors.
pub const OFFER_MS_MAX: i64 = 60_000;

/// `POST /v1/offers` body: offer the asking executor claimable payouts that no executor holds
/// a live offer for, each its alone for `offer_ms`. Advisory: it keeps executors off each
/// other's payouts; the lock and the fence still decide who may write.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfferRequest {
    /// The executor asking (its `EXECUTOR_ID`, a lock owner id): 1 to 128 bytes, no control
    /// characters.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 128, example = "executor-1")
    )] // OFFER_EXECUTOR_MAX_BYTES
    pub executor: String,
    /// How many payouts at most.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 500))] // OFFER_LIMIT_MAX
    pub limit: i64,
    /// How long each offer is the executor's alone, in milliseconds.
    #[cfg_attr(feature = "openapi", schema(minimum = 100, maximum = 60_000))]
    // OFFER_MS_MIN, OFFER_MS_MAX
    pub offer_ms: i64,
    /// Payouts not to offer (the executor would not work on them now: in flight, or skipped
    /// for a while after a fenced claim), so that they stay free for the others.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))] // OFFER_SKIP_MAX
    pub skip: Vec<i64>,
}

/// A payout as payment-resource reports it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payout {
    /// Its id.
    pub payout_id: i64,
    /// Amount in minor units.
    pub amount_minor: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Who receives the money.
    pub beneficiary: String,
    /// Where it is.
    pub state: PayoutState,
    /// The highest fencing token accepted for it (0: none yet).
    pub fence: i64,
}

/// Outcome of a rail submission.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SubmissionOutcome {
    /// Reserved; the rail call is under way.
    InFlight,
    /// The rail accepted the transfer.
    Acked,
    /// The rail refused the transfer.
    Rejected,
    /// No answer within the hop budget, or the connection was lost after sending.
    Timeout,
}

impl SubmissionOutcome {
    /// The SQL/JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InFlight => "IN_FLIGHT",
            Self::Acked => "ACKED",
            Self::Rejected => "REJECTED",
            Self::Timeout => "TIMEOUT",
        }
    }

    /// Parses the SQL/JSON spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        [Self::InFlight, Self::Acked, Self::Rejected, Self::Timeout]
            .into_iter()
            .find(|s| s.as_str() == raw)
    }
}

/// The one rail submission of a payout.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    /// The payout.
    pub payout_id: i64,
    /// The token that reserved it.
    pub presented_token: i64,
    /// What the rail said.
    pub outcome: SubmissionOutcome,
    /// The rail's reference, when it answered.
    pub rail_reference: Option<String>,
}

/// A reservation granted to rail-proxy: what to send to the rail.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The payout to send.
    pub payout: Payout,
    /// The submission now on record (`IN_FLIGHT`).
    pub submission: Submission,
}

/// `POST /v1/payouts/{id}/submission/outcome` body (rail-proxy).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordOutcome {
    /// `ACKED`, `REJECTED` or `TIMEOUT`.
    pub outcome: SubmissionOutcome,
    /// The rail's reference, when it answered.
    #[serde(default)]
    pub rail_reference: Option<String>,
}

/// rail-proxy's answer to a submit.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitResult {
    /// The payout.
    pub payout_id: i64,
    /// What the rail said (`ACKED`, `REJECTED`, `TIMEOUT`).
    pub outcome: SubmissionOutcome,
    /// The rail's reference, when it answered.
    pub rail_reference: Option<String>,
}

/// `GET /v1/ledger/summary`: the balance check of invariant I6.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerSummary {
    /// Sum of all entries per currency: zero when the ledger balances.
    #[cfg_attr(feature = "openapi", schema(schema_with = openapi::currency_balances))]
    pub balance_by_currency: Vec<(String, i64)>,
    /// Settled payouts.
    pub settled_payouts: i64,
    /// Postings (debit + credit pairs); equals `settled_payouts` when each has exactly one.
    pub postings: i64,
    /// Payouts with more than one posting (must be 0).
    pub payouts_with_extra_postings: i64,
}

/// rail-stub `POST /v1/transfers` body (from rail-proxy).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transfer {
    /// The payout being paid.
    pub payout_id: i64,
    /// Amount in minor units.
    pub amount_minor: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Who receives the money.
    pub beneficiary: String,
    /// The fencing token behind the submission (for the witness log).
    pub presented_token: i64,
}

/// rail-stub's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferAnswer {
    /// `accepted` or `rejected`.
    pub status: String,
    /// The rail's reference.
    pub rail_reference: String,
}

/// One request rail-stub received (the duplicate witness).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Received {
    /// Order of arrival, from 1.
    pub seq: u64,
    /// The transfer as received.
    pub transfer: Transfer,
}

/// A scripted rail fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum FaultKind {
    /// Answer normally after `delay_ms`.
    Delay {
        /// Milliseconds.
        delay_ms: u64,
    },
    /// Hold the request for `hold_ms` (past the proxy's hop budget), then answer.
    Timeout {
        /// Milliseconds.
        hold_ms: u64,
    },
    /// Refuse the transfer. (An empty struct variant, not a unit variant: serde ignores
    /// unknown fields next to the tag of a unit variant.)
    Reject {},
    /// Answer 503.
    Error {},
}

/// rail-stub `POST /v1/faults` body: for one payout, or every payout when `payout_id` is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// The payout, or all.
    #[serde(default)]
    pub payout_id: Option<i64>,
    /// What to do.
    pub fault: FaultKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_terminality() {
        for s in [
            PayoutState::Pending,
            PayoutState::Settled,
            PayoutState::RailAmbiguous,
        ] {
            assert_eq!(PayoutState::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert!(PayoutState::RailAmbiguous.is_terminal() && !PayoutState::Submitted.is_terminal());
    }

    #[test]
    fn faults_parse_from_tagged_json() {
        let f: Fault =
            serde_json::from_str(r#"{"payout_id":3,"fault":{"kind":"timeout","hold_ms":5000}}"#)
                .unwrap();
        assert_eq!(f.fault, FaultKind::Timeout { hold_ms: 5000 });
        let all: Fault = serde_json::from_str(r#"{"fault":{"kind":"reject"}}"#).unwrap();
        assert_eq!(all.payout_id, None);
    }
}

#[cfg(test)]
mod fault_tests {
    use super::*;

    #[test]
    fn a_fault_with_an_unknown_field_is_refused() {
        for body in [
            r#"{"fault":{"kind":"reject","extra":1}}"#,
            r#"{"fault":{"kind":"error","delay_ms":5}}"#,
            r#"{"fault":{"kind":"delay","delay_ms":5,"extra":1}}"#,
            r#"{"fault":{"kind":"timeout","hold_ms":5,"delay_ms":1}}"#,
            r#"{"fault":{"kind":"reject"},"extra":1}"#,
        ] {
            assert!(
                serde_json::from_str::<Fault>(body).is_err(),
                "{body} accepted"
            );
        }
        for body in [
            r#"{"fault":{"kind":"reject"}}"#,
            r#"{"payout_id":3,"fault":{"kind":"delay","delay_ms":5}}"#,
        ] {
            assert!(
                serde_json::from_str::<Fault>(body).is_ok(),
                "{body} refused"
            );
        }
    }

    #[test]
    fn hidden_characters_are_flagged() {
        for c in ['\u{200B}', '\u{202E}', '\u{2066}', '\u{FEFF}', '\u{0007}'] {
            assert!(is_hidden_char(c), "{c:?}");
        }
        for c in ['a', 'é', 'Ж', ' ', '-'] {
            assert!(!is_hidden_char(c), "{c:?}");
        }
    }
}

/// Schemas that the derive cannot express (feature `openapi`).
#[cfg(feature = "openapi")]
mod openapi {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};

    /// `[[currency, sum], ...]`: each pair a two-element array of a string and an integer.
    /// (As `prefixItems` the tuple is exact, but schemathesis 4 refuses that form; the order
    /// is stated in the description.)
    pub(crate) fn currency_balances() -> ArrayBuilder {
        let pair = ArrayBuilder::new()
            .items(
                OneOfBuilder::new()
                    .item(ObjectBuilder::new().schema_type(Type::String))
                    .item(ObjectBuilder::new().schema_type(Type::Integer)),
            )
            .min_items(Some(2))
            .max_items(Some(2))
            .description(Some("[currency, sum of its entries in minor units]"));
        ArrayBuilder::new().items(pair)
    }
}
