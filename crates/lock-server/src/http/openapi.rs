//! The lock-server's OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]`
//! annotations and lock-api's wire types, served at `GET /openapi.json` and checked in as
//! `docs/openapi/lock-server.json` (a test fails when the two drift apart; another compares
//! every operation's statuses with the tables of `docs/contracts/C3-http-surfaces.md`).
//!
//! Each handler documents the statuses of its own table in that contract; the answers every
//! operation of a group can give (the preamble of its `ct3-lock` section) are added here once,
//! in [`CommonAnswers`].

use std::sync::OnceLock;

use axum::response::IntoResponse;
use service_kit::openapi as kit;
use utoipa::openapi::OpenApi as Document;
use utoipa::{Modify, OpenApi};

use super::{elections, handlers, sets, watch};

/// The document's type: paths from the handlers, then [`CommonAnswers`].
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "lock-server",
        description = "The lock service: sessions, fenced locks (L1-L8), health. Contract: docs/contracts/C3-http-surfaces.md (ct3-lock, ct3-health).",
        license(name = "MIT OR Apache-2.0")
    ),
    paths(
        handlers::create_session,
        handlers::heartbeat,
        handlers::delete_session,
        handlers::acquire,
        sets::acquire_set,
        handlers::renew,
        handlers::release,
        elections::proclaim,
        handlers::get_lock,
        watch::watch,
        handlers::revoke,
        handlers::ready,
    ),
    modifiers(&CommonAnswers)
)]
pub struct LockServerApi;

/// Answers shared by groups of operations (C3 ct3-lock, first paragraph), the two bearer
/// schemes, and the endpoints whose handlers live in service-kit.
#[derive(Debug)]
struct CommonAnswers;

/// Every `/v1/` operation.
const EVERY_V1: [(u16, &str); 3] = [
    (
        408,
        "TIMEOUT: the request took longer than LOCK_REQUEST_TIMEOUT",
    ),
    (500, "INTERNAL: a bug (never for bad input)"),
    (
        503,
        "NOT_LEADER (draining; a read-only store; an etcd member without a leader) or STORE_UNAVAILABLE; retry, possibly on another replica",
    ),
];
/// Operations with a JSON body.
const WITH_BODY: [(u16, &str); 2] = [
    (413, "PAYLOAD_TOO_LARGE: the body is over 16 KiB"),
    (
        415,
        "UNSUPPORTED_MEDIA_TYPE: the body is not application/json",
    ),
];
/// L1-L7: the lock clients' credential, checked before anything else.
const CLIENT_CREDENTIAL: [(u16, &str); 4] = [
    (400, "INVALID_ARGUMENT: Authorization sent twice"),
    (
        401,
        "UNAUTHENTICATED: Authorization missing, or not a client credential",
    ),
    (
        403,
        "FORBIDDEN: no client credential is configured: the lock surface is disabled",
    ),
    (
        429,
        "RATE_LIMITED: this credential is over its requests a second on this replica; Retry-After says when to come back",
    ),
];

impl Modify for CommonAnswers {
    fn modify(&self, doc: &mut Document) {
        kit::add_components(doc, &["lock_client", "lock_admin"], &[]);
        kit::add_answers(doc, |path, _| path.starts_with("/v1/"), &EVERY_V1);
        kit::add_answers(doc, |_, op| op.request_body.is_some(), &WITH_BODY);
        kit::add_answers(
            doc,
            |_, op| kit::schemes_of(op).iter().any(|s| s == "lock_client"),
            &CLIENT_CREDENTIAL,
        );
        kit::add_live_and_metrics(doc);
    }
}

/// The document, built once.
pub fn document() -> &'static Document {
    static DOC: OnceLock<Document> = OnceLock::new();
    DOC.get_or_init(LockServerApi::openapi)
}

/// `GET /openapi.json`.
pub async fn serve() -> impl IntoResponse {
    kit::serve_document(document())
}
