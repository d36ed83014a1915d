//! payment-resource's OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]`
//! annotations and payment-api's wire types, served at `GET /openapi.json` and checked in as
//! `docs/openapi/payment-resource.json` (a test fails when they drift apart; another compares
//! every operation's statuses with the table of `docs/contracts/C3-http-surfaces.md`).
//!
//! Each handler documents the statuses of its own row of that table; the answers every
//! endpoint can give (the first paragraph of the contract's `ct3-payment` section) are added
//! once, in [`CommonAnswers`].

use std::sync::OnceLock;

use axum::response::IntoResponse;
use payment_api::PaymentCode;
use service_kit::openapi as kit;
use utoipa::openapi::OpenApi as Document;
use utoipa::{Modify, OpenApi};

/// The document's type: paths from the handlers, then [`CommonAnswers`].
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "payment-resource",
        description = "Payouts, their fenced writes, the rail submission record and the ledger. Contract: docs/contracts/C3-http-surfaces.md (ct3-payment).",
        license(name = "MIT OR Apache-2.0")
    ),
    paths(
        super::handlers::create,
        super::handlers::list,
        super::handlers::offer,
        super::handlers::get_payout,
        super::handlers::claim,
        super::handlers::reserve,
        super::handlers::get_submission,
        super::handlers::record_outcome,
        super::handlers::post_result,
        super::handlers::refence,
        super::handlers::ledger_summary,
        super::handlers::ready,
    ),
    modifiers(&CommonAnswers)
)]
pub struct PaymentResourceApi;

/// Answers every endpoint can give (C3 ct3-payment), the bearer schemes of the four roles,
/// and the endpoints whose handlers live in service-kit.
#[derive(Debug)]
struct CommonAnswers;

/// Every `/v1/` endpoint.
const EVERY_V1: [(u16, &str); 3] = [
    (
        408,
        "TIMEOUT: the request took longer than PAYMENT_REQUEST_TIMEOUT",
    ),
    (500, "INTERNAL: a bug (never for bad input)"),
    (
        503,
        "STORE_UNAVAILABLE: paydb unreachable or refusing writes",
    ),
];
/// Endpoints with a `{payout_id}` path segment.
const WITH_PAYOUT_ID: [(u16, &str); 1] = [(400, "INVALID_ARGUMENT: payout_id")];
/// Endpoints with a JSON body.
const WITH_BODY: [(u16, &str); 2] = [
    (413, "PAYLOAD_TOO_LARGE: the body is over 16 KiB"),
    (
        415,
        "UNSUPPORTED_MEDIA_TYPE: the body is not application/json",
    ),
];
/// Credentialed endpoints.
const CREDENTIALED: [(u16, &str); 2] = [
    (400, "INVALID_ARGUMENT: Authorization sent twice"),
    (
        429,
        "RATE_LIMITED: this credential is over its requests a second; Retry-After says when to come back",
    ),
];

impl Modify for CommonAnswers {
    fn modify(&self, doc: &mut Document) {
        kit::add_components(
            doc,
            &[
                "payment_creator",
                "payout_executor",
                "payment_proxy",
                "payment_admin",
                "payment_reader",
            ],
            &PaymentCode::ALL.map(PaymentCode::as_str),
        );
        kit::add_answers(doc, |path, _| path.starts_with("/v1/"), &EVERY_V1);
        kit::add_answers(doc, |path, _| path.contains("{payout_id}"), &WITH_PAYOUT_ID);
        kit::add_answers(doc, |_, op| op.request_body.is_some(), &WITH_BODY);
        kit::add_answers(doc, |_, op| !kit::schemes_of(op).is_empty(), &CREDENTIALED);
        kit::add_live_and_metrics(doc);
    }
}

/// The document, built once.
pub fn document() -> &'static Document {
    static DOC: OnceLock<Document> = OnceLock::new();
    DOC.get_or_init(PaymentResourceApi::openapi)
}

/// `GET /openapi.json`.
pub async fn serve() -> impl IntoResponse {
    kit::serve_document(document())
}
