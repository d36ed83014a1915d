//! Table-driven bad requests: each gets its documented status and a JSON error naming the
//! field; none gets a 500; the store is unchanged afterwards. The same table on both
//! backends: validation never depends on the store.

use reqwest::{Method, StatusCode};
use test_support::bad_input::{BadRequest, check_all};

use crate::support::{StoreAt, TestServer, on_both_backends};

const INVALID: &str = "INVALID_ARGUMENT";

fn bad(name: &'static str, method: &Method, path: &str, body: &str) -> BadRequest {
    BadRequest::new(name, method.clone(), path, body)
}

/// A missing holder session and wrong credentials; `acquire` is a valid acquire body.
fn session_and_credential_cases(acquire: &str) -> Vec<BadRequest> {
    let (post, get) = (Method::POST, Method::GET);
    vec![
        bad(
            "release without the holder's session",
            &post,
            "/v1/locks/held/release",
            r#"{"fencing_token":1}"#,
        )
        .expect(400, INVALID, "session_id"),
        bad(
            "no client credential",
            &post,
            "/v1/sessions",
            r#"{"owner_id":"a"}"#,
        )
        .header("authorization", "")
        .expect(401, "UNAUTHENTICATED", "LOCK_CLIENT_TOKEN"),
        bad("a wrong client credential", &get, "/v1/locks/held", "")
            .header("authorization", "Bearer not-the-token")
            .expect(401, "UNAUTHENTICATED", "LOCK_CLIENT_TOKEN"),
        bad(
            "the admin credential on L4",
            &post,
            "/v1/locks/held/acquire",
            acquire,
        )
        .header("authorization", "Bearer adm1n")
        .expect(401, "UNAUTHENTICATED", "LOCK_CLIENT_TOKEN"),
    ]
}

/// Malformed create-session bodies.
fn session_body_cases() -> Vec<BadRequest> {
    let post = Method::POST;
    vec![
        bad("malformed JSON", &post, "/v1/sessions", r#"{"owner_id":"#).expect(400, INVALID, "EOF"),
        bad("missing owner_id", &post, "/v1/sessions", "{}").expect(400, INVALID, "owner_id"),
        bad(
            "ttl of wrong type",
            &post,
            "/v1/sessions",
            r#"{"owner_id":"a","ttl_ms":"x"}"#,
        )
        .expect(400, INVALID, "ttl_ms"),
        bad(
            "ttl zero",
            &post,
            "/v1/sessions",
            r#"{"owner_id":"a","ttl_ms":0}"#,
        )
        .expect(400, INVALID, "ttl_ms"),
        bad(
            "ttl absurd",
            &post,
            "/v1/sessions",
            r#"{"owner_id":"a","ttl_ms":999999999999}"#,
        )
        .expect(400, INVALID, "ttl_ms"),
        bad(
            "ttl negative",
            &post,
            "/v1/sessions",
            r#"{"owner_id":"a","ttl_ms":-5}"#,
        )
        .expect(400, INVALID, "ttl_ms"),
        bad("empty owner", &post, "/v1/sessions", r#"{"owner_id":""}"#)
            .expect(400, INVALID, "owner_id"),
        bad(
            "control char in owner",
            &post,
            "/v1/sessions",
            "{\"owner_id\":\"a\\u0007b\"}",
        )
        .expect(400, INVALID, "owner_id"),
        bad(
            "unknown field",
            &post,
            "/v1/sessions",
            r#"{"owner_id":"a","color":"red"}"#,
        )
        .expect(400, INVALID, "color"),
        bad(
            "trailing garbage",
            &post,
            "/v1/sessions",
            r#"{"owner_id":"a"} x"#,
        )
        .expect(400, INVALID, "body"),
        bad("body is an array", &post, "/v1/sessions", "[]").expect(400, INVALID, "body"),
    ]
}

/// Acquires (with the valid body `acquire`) of keys that break the key rule.
fn lock_key_cases(acquire: &str) -> Vec<BadRequest> {
    let post = Method::POST;
    let long_key = "k".repeat(lock_api::LOCK_KEY_MAX_BYTES + 1);
    vec![
        bad(
            "over-long key",
            &post,
            &format!("/v1/locks/{long_key}/acquire"),
            acquire,
        )
        .expect(400, INVALID, "lock_key"),
        bad(
            "control char in key",
            &post,
            "/v1/locks/a%07b/acquire",
            acquire,
        )
        .expect(400, INVALID, "lock_key"),
        bad("space in key", &post, "/v1/locks/a%20b/acquire", acquire)
            .expect(400, INVALID, "lock_key"),
        bad("empty key", &post, "/v1/locks//acquire", acquire).expect(400, INVALID, "lock_key"),
    ]
}

/// Malformed and unknown session ids, and a zero ttl for the live `session`.
fn session_id_cases(session: &str) -> Vec<BadRequest> {
    let (post, delete) = (Method::POST, Method::DELETE);
    let unknown = "00000000-0000-4000-8000-000000000000";
    // An error names a session by its tag, never its id.
    let unknown_tag: &'static str = String::leak(
        lock_api::SessionId::parse(unknown)
            .unwrap()
            .tag()
            .to_string(),
    );
    vec![
        bad(
            "session id not a UUID",
            &post,
            "/v1/locks/k/acquire",
            r#"{"session_id":"nope"}"#,
        )
        .expect(400, INVALID, "session_id"),
        bad(
            "unknown session on acquire",
            &post,
            "/v1/locks/k/acquire",
            &format!(r#"{{"session_id":"{unknown}"}}"#),
        )
        .expect(404, "SESSION_UNKNOWN", unknown_tag),
        bad(
            "acquire ttl zero",
            &post,
            "/v1/locks/k/acquire",
            &format!(r#"{{"session_id":"{session}","ttl_ms":0}}"#),
        )
        .expect(400, INVALID, "ttl_ms"),
        bad(
            "heartbeat of a non-UUID",
            &post,
            "/v1/sessions/xyz/heartbeat",
            "",
        )
        .expect(400, INVALID, "session_id"),
        bad(
            "heartbeat of an unknown session",
            &post,
            &format!("/v1/sessions/{unknown}/heartbeat"),
            "",
        )
        .expect(404, "SESSION_UNKNOWN", unknown_tag),
        bad("delete a non-UUID session", &delete, "/v1/sessions/xyz", "").expect(
            400,
            INVALID,
            "session_id",
        ),
    ]
}

/// Renews and releases by the live `session` with missing or malformed fencing tokens.
fn fencing_token_cases(session: &str) -> Vec<BadRequest> {
    let post = Method::POST;
    vec![
        bad(
            "renew without token",
            &post,
            "/v1/locks/held/renew",
            &format!(r#"{{"session_id":"{session}"}}"#),
        )
        .expect(400, INVALID, "fencing_token"),
        bad(
            "release with negative token",
            &post,
            "/v1/locks/held/release",
            r#"{"fencing_token":-1}"#,
        )
        .expect(400, INVALID, "fencing_token"),
        bad(
            "release with a token above bigint",
            &post,
            "/v1/locks/held/release",
            &format!(r#"{{"session_id":"{session}","fencing_token":18446744073709551615}}"#),
        )
        .expect(400, INVALID, "fencing_token"),
        bad(
            "renew with a token above bigint",
            &post,
            "/v1/locks/held/renew",
            &format!(r#"{{"session_id":"{session}","fencing_token":9223372036854775808}}"#),
        )
        .expect(400, INVALID, "fencing_token"),
        bad(
            "release with string token",
            &post,
            "/v1/locks/held/release",
            r#"{"fencing_token":"1"}"#,
        )
        .expect(400, INVALID, "fencing_token"),
    ]
}

/// Wrong methods and routes, bad framing, and a wrong admin token.
fn framing_and_route_cases() -> Vec<BadRequest> {
    let (post, get) = (Method::POST, Method::GET);
    vec![
        bad("wrong method", &get, "/v1/sessions", "").expect(405, "METHOD_NOT_ALLOWED", "Method"),
        bad("unknown route", &post, "/v2/anything", "{}").expect(404, "NOT_FOUND", "route"),
        bad("oversized body", &post, "/v1/sessions", "")
            .body(
                format!(
                    r#"{{"owner_id":"{}"}}"#,
                    "a".repeat(lock_api::REQUEST_BODY_MAX_BYTES + 1)
                )
                .into_bytes(),
            )
            .expect(413, "PAYLOAD_TOO_LARGE", "bytes"),
        bad(
            "no content type",
            &post,
            "/v1/sessions",
            r#"{"owner_id":"a"}"#,
        )
        .without("content-type")
        .expect(415, "UNSUPPORTED_MEDIA_TYPE", "Content-Type"),
        bad(
            "text content type",
            &post,
            "/v1/locks/held/release",
            r#"{"fencing_token":1}"#,
        )
        .header("content-type", "text/plain")
        .expect(415, "UNSUPPORTED_MEDIA_TYPE", "Content-Type"),
        bad(
            "revoke with a wrong admin token",
            &post,
            "/v1/locks/held/revoke",
            "",
        )
        .header("authorization", "Bearer guess")
        .expect(401, "UNAUTHENTICATED", "bearer"),
    ]
}

/// Every case presents the client credential unless it is about credentials.
fn with_client_credential(case: BadRequest) -> BadRequest {
    if case
        .headers
        .iter()
        .any(|(name, _)| *name == "authorization")
    {
        case
    } else {
        case.header(
            "authorization",
            format!("Bearer {}", crate::support::CLIENT_TOKEN),
        )
    }
}

async fn bad_requests_get_documented_json_errors_and_change_nothing(at: StoreAt) {
    let server = TestServer::start(at.open().await, &["--admin-token", "adm1n"]).await;
    let api = &server.api;
    let session = api.session("existing", 30_000).await;
    let (_, grant) = api.acquire("held", &session, 30_000).await;
    assert!(grant["fencing_token"].is_u64());
    let before = at.contents().await;

    let acquire = format!(r#"{{"session_id":"{session}","ttl_ms":1000}}"#);
    let cases: Vec<BadRequest> = [
        session_and_credential_cases(&acquire),
        session_body_cases(),
        lock_key_cases(&acquire),
        session_id_cases(&session),
        fencing_token_cases(&session),
        framing_and_route_cases(),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(cases.len() >= 15);
    let cases: Vec<BadRequest> = cases.into_iter().map(with_client_credential).collect();
    let failures = check_all(&api.base, &cases).await;
    assert!(
        failures.is_empty(),
        "bad-input cases failed:\n{}",
        failures.join("\n")
    );
    assert_eq!(
        at.contents().await,
        before,
        "bad requests changed the store"
    );
    let (status, info) = api.call(Method::GET, "/v1/locks/held", None).await;
    assert_eq!(
        (status, &info["fencing_token"]),
        (StatusCode::OK, &grant["fencing_token"]),
        "the held lock is untouched"
    );
    server.shutdown().await;
}

on_both_backends!(bad_requests_get_documented_json_errors_and_change_nothing);
