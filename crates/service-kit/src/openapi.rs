//! What every service's OpenAPI document shares: the error answer (`ErrorBody`),
//! answers common to a group of operations (added once, not per handler), bearer schemes,
//! the endpoints whose handlers live here (`/health/live`, `/metrics`), and serving the
//! document at `GET /openapi.json`. Each service's `openapi` module owns its paths.

use axum::Json;
use axum::response::IntoResponse;
use lock_api::{ErrorBody, ErrorCode};
use utoipa::openapi::path::{HttpMethod, Operation, OperationBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{PartialSchema, ToSchema};

/// An error answer: `{"code","message"}` (the `ErrorBody` component).
pub fn error_answer(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(RefOr::Ref(Ref::from_schema_name(ErrorBody::name()))))
                .build(),
        )
        .build()
}

/// Registers `ErrorBody` and one bearer scheme per name. The body's `code` is one of the
/// shared codes (`lock_api::ErrorCode`) or of `service_codes` (a service's own, e.g.
/// payment-api's `PaymentCode`).
pub fn add_components(doc: &mut OpenApi, bearer_schemes: &[&str], service_codes: &[&str]) {
    let components = doc.components.get_or_insert_with(Default::default);
    let mut codes: Vec<String> = serde_json::to_value(ErrorCode::schema())
        .ok()
        .and_then(|schema| serde_json::from_value(schema["enum"].clone()).ok())
        .unwrap_or_default();
    assert!(!codes.is_empty(), "ErrorCode's schema lists its codes");
    codes.extend(service_codes.iter().map(|c| (*c).to_owned()));
    let body = ObjectBuilder::new()
        .description(Some("The JSON error body of every service."))
        .property(
            "code",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(codes))
                .description(Some("machine-readable code")),
        )
        .required("code")
        .property(
            "message",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some("human-readable detail; names the offending field")),
        )
        .required("message");
    components
        .schemas
        .insert(ErrorBody::name().into_owned(), body.into());
    for name in bearer_schemes {
        components.add_security_scheme(
            *name,
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The security scheme names an operation requires.
pub fn schemes_of(operation: &Operation) -> Vec<String> {
    operation
        .security
        .iter()
        .flatten()
        .filter_map(|requirement| serde_json::to_value(requirement).ok())
        .filter_map(|value| {
            value
                .as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>())
        })
        .flatten()
        .collect()
}

/// Adds `answers` (status, description) to every operation `applies` selects, where the
/// handler did not document that status itself.
pub fn add_answers(
    doc: &mut OpenApi,
    applies: impl Fn(&str, &Operation) -> bool,
    answers: &[(u16, &str)],
) {
    for (path, item) in &mut doc.paths.paths {
        let operations = [
            item.get.as_mut(),
            item.post.as_mut(),
            item.put.as_mut(),
            item.delete.as_mut(),
        ];
        for operation in operations.into_iter().flatten() {
            if !applies(path, operation) {
                continue;
            }
            for (status, description) in answers {
                operation
                    .responses
                    .responses
                    .entry(status.to_string())
                    .or_insert_with(|| RefOr::T(error_answer(description)));
            }
        }
    }
}

/// `/health/live` (empty 200) and `/metrics` (Prometheus text): service-kit's handlers.
pub fn add_live_and_metrics(doc: &mut OpenApi) {
    doc.paths.add_path_operation(
        "/health/live",
        vec![HttpMethod::Get],
        OperationBuilder::new()
            .tag("health")
            .response(
                "200",
                ResponseBuilder::new().description("the process serves; empty body"),
            )
            .build(),
    );
    doc.paths.add_path_operation(
        "/metrics",
        vec![HttpMethod::Get],
        OperationBuilder::new()
            .tag("health")
            .response(
                "200",
                ResponseBuilder::new()
                    .description("Prometheus text (C4)")
                    .content(
                        "text/plain; version=0.0.4",
                        ContentBuilder::new().schema(Some(String::schema())).build(),
                    ),
            )
            .build(),
    );
}

/// `GET /openapi.json` of `doc`.
pub fn serve_document(doc: &'static OpenApi) -> impl IntoResponse {
    Json(doc.clone())
}
