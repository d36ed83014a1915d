//! Table-driven bad requests: each gets its documented status and a JSON error naming the
//! field; none gets a 500; the store is unchanged afterwards.

use reqwest::{Method, StatusCode};

use crate::support::{TestServer, pg_store};

struct Case {
    name: &'static str,
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    auth: Option<&'static str>,
    status: u16,
    code: &'static str,
    mentions: &'static str,
}

fn case(
    name: &'static str,
    method: Method,
    path: impl Into<String>,
    body: &str,
    status: u16,
    code: &'static str,
    mentions: &'static str,
) -> Case {
    Case {
        name,
        method,
        path: path.into(),
        content_type: Some("application/json"),
        body: body.as_bytes().to_vec(),
        auth: None,
        status,
        code,
        mentions,
    }
}

async fn row_counts(pool: &sqlx::PgPool) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM lock_sessions), (SELECT count(*) FROM locks), (SELECT count(*) FROM lock_fences)",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn bad_requests_get_documented_json_errors_and_change_nothing() {
    let (store, url) = pg_store().await;
    let server = TestServer::start(store, &["--admin-token", "adm1n"]).await;
    let api = &server.api;
    let session = api.session("existing", 30_000).await;
    let (_, grant) = api.acquire("held", &session, 30_000).await;
    assert!(grant["fencing_token"].is_u64());
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let before = row_counts(&pool).await;

    let unknown = "00000000-0000-4000-8000-000000000000";
    let long_key = "k".repeat(lock_api::LOCK_KEY_MAX_BYTES + 1);
    let acquire_body = format!(r#"{{"session_id":"{session}","ttl_ms":1000}}"#);
    let mut cases = vec![
        case(
            "malformed JSON",
            Method::POST,
            "/v1/sessions",
            r#"{"owner_id":"#,
            400,
            "INVALID_ARGUMENT",
            "EOF",
        ),
        case(
            "missing owner_id",
            Method::POST,
            "/v1/sessions",
            "{}",
            400,
            "INVALID_ARGUMENT",
            "owner_id",
        ),
        case(
            "ttl of wrong type",
            Method::POST,
            "/v1/sessions",
            r#"{"owner_id":"a","ttl_ms":"x"}"#,
            400,
            "INVALID_ARGUMENT",
            "ttl_ms",
        ),
        case(
            "ttl zero",
            Method::POST,
            "/v1/sessions",
            r#"{"owner_id":"a","ttl_ms":0}"#,
            400,
            "INVALID_ARGUMENT",
            "ttl_ms",
        ),
        case(
            "ttl absurd",
            Method::POST,
            "/v1/sessions",
            r#"{"owner_id":"a","ttl_ms":999999999999}"#,
            400,
            "INVALID_ARGUMENT",
            "ttl_ms",
        ),
        case(
            "ttl negative",
            Method::POST,
            "/v1/sessions",
            r#"{"owner_id":"a","ttl_ms":-5}"#,
            400,
            "INVALID_ARGUMENT",
            "ttl_ms",
        ),
        case(
            "empty owner",
            Method::POST,
            "/v1/sessions",
            r#"{"owner_id":""}"#,
            400,
            "INVALID_ARGUMENT",
            "owner_id",
        ),
        case(
            "control char in owner",
            Method::POST,
            "/v1/sessions",
            "{\"owner_id\":\"a\\u0007b\"}",
            400,
            "INVALID_ARGUMENT",
            "owner_id",
        ),
        case(
            "unknown field",
            Method::POST,
            "/v1/sessions",
            r#"{"owner_id":"a","color":"red"}"#,
            400,
            "INVALID_ARGUMENT",
            "color",
        ),
        case(
            "trailing garbage",
            Method::POST,
            "/v1/sessions",
            r#"{"owner_id":"a"} x"#,
            400,
            "INVALID_ARGUMENT",
            "body",
        ),
        case(
            "body is an array",
            Method::POST,
            "/v1/sessions",
            "[]",
            400,
            "INVALID_ARGUMENT",
            "body",
        ),
        case(
            "over-long key",
            Method::POST,
            format!("/v1/locks/{long_key}/acquire"),
            &acquire_body,
            400,
            "INVALID_ARGUMENT",
            "lock_key",
        ),
        case(
            "control char in key",
            Method::POST,
            "/v1/locks/a%07b/acquire",
            &acquire_body,
            400,
            "INVALID_ARGUMENT",
            "lock_key",
        ),
        case(
            "space in key",
            Method::POST,
            "/v1/locks/a%20b/acquire",
            &acquire_body,
            400,
            "INVALID_ARGUMENT",
            "lock_key",
        ),
        case(
            "empty key",
            Method::POST,
            "/v1/locks//acquire",
            &acquire_body,
            400,
            "INVALID_ARGUMENT",
            "lock_key",
        ),
        case(
            "session id not a UUID",
            Method::POST,
            "/v1/locks/k/acquire",
            r#"{"session_id":"nope"}"#,
            400,
            "INVALID_ARGUMENT",
            "session_id",
        ),
        case(
            "unknown session on acquire",
            Method::POST,
            "/v1/locks/k/acquire",
            &format!(r#"{{"session_id":"{unknown}"}}"#),
            404,
            "SESSION_UNKNOWN",
            unknown,
        ),
        case(
            "acquire ttl zero",
            Method::POST,
            "/v1/locks/k/acquire",
            &format!(r#"{{"session_id":"{session}","ttl_ms":0}}"#),
            400,
            "INVALID_ARGUMENT",
            "ttl_ms",
        ),
        case(
            "heartbeat of a non-UUID",
            Method::POST,
            "/v1/sessions/xyz/heartbeat",
            "",
            400,
            "INVALID_ARGUMENT",
            "session_id",
        ),
        case(
            "heartbeat of an unknown session",
            Method::POST,
            format!("/v1/sessions/{unknown}/heartbeat"),
            "",
            404,
            "SESSION_UNKNOWN",
            unknown,
        ),
        case(
            "delete a non-UUID session",
            Method::DELETE,
            "/v1/sessions/xyz",
            "",
            400,
            "INVALID_ARGUMENT",
            "session_id",
        ),
        case(
            "renew without token",
            Method::POST,
            "/v1/locks/held/renew",
            &format!(r#"{{"session_id":"{session}"}}"#),
            400,
            "INVALID_ARGUMENT",
            "fencing_token",
        ),
        case(
            "release with negative token",
            Method::POST,
            "/v1/locks/held/release",
            r#"{"fencing_token":-1}"#,
            400,
            "INVALID_ARGUMENT",
            "fencing_token",
        ),
        case(
            "release with a token above bigint",
            Method::POST,
            "/v1/locks/held/release",
            r#"{"fencing_token":18446744073709551615}"#,
            400,
            "INVALID_ARGUMENT",
            "fencing_token",
        ),
        case(
            "renew with a token above bigint",
            Method::POST,
            "/v1/locks/held/renew",
            &format!(r#"{{"session_id":"{session}","fencing_token":9223372036854775808}}"#),
            400,
            "INVALID_ARGUMENT",
            "fencing_token",
        ),
        case(
            "release with string token",
            Method::POST,
            "/v1/locks/held/release",
            r#"{"fencing_token":"1"}"#,
            400,
            "INVALID_ARGUMENT",
            "fencing_token",
        ),
        case(
            "wrong method",
            Method::GET,
            "/v1/sessions",
            "",
            405,
            "METHOD_NOT_ALLOWED",
            "Method",
        ),
        case(
            "unknown route",
            Method::POST,
            "/v2/anything",
            "{}",
            404,
            "NOT_FOUND",
            "route",
        ),
    ];
    let mut oversized = case(
        "oversized body",
        Method::POST,
        "/v1/sessions",
        "",
        413,
        "PAYLOAD_TOO_LARGE",
        "bytes",
    );
    oversized.body = format!(
        r#"{{"owner_id":"{}"}}"#,
        "a".repeat(lock_api::REQUEST_BODY_MAX_BYTES + 1)
    )
    .into_bytes();
    cases.push(oversized);
    let mut no_type = case(
        "no content type",
        Method::POST,
        "/v1/sessions",
        r#"{"owner_id":"a"}"#,
        415,
        "UNSUPPORTED_MEDIA_TYPE",
        "Content-Type",
    );
    no_type.content_type = None;
    cases.push(no_type);
    let mut text_type = case(
        "text content type",
        Method::POST,
        "/v1/locks/held/release",
        r#"{"fencing_token":1}"#,
        415,
        "UNSUPPORTED_MEDIA_TYPE",
        "Content-Type",
    );
    text_type.content_type = Some("text/plain");
    cases.push(text_type);
    let mut bad_admin = case(
        "revoke with a wrong admin token",
        Method::POST,
        "/v1/locks/held/revoke",
        "",
        401,
        "UNAUTHENTICATED",
        "bearer",
    );
    bad_admin.auth = Some("Bearer guess");
    cases.push(bad_admin);
    assert!(cases.len() >= 15);

    let mut failures = Vec::new();
    for case in &cases {
        let mut request = api
            .http
            .request(case.method.clone(), format!("{}{}", api.base, case.path))
            .body(case.body.clone());
        if let Some(content_type) = case.content_type {
            request = request.header("content-type", content_type);
        }
        if let Some(auth) = case.auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let body: serde_json::Value =
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text.clone()));
        let ok = status == StatusCode::from_u16(case.status).unwrap()
            && body["code"] == case.code
            && body["message"]
                .as_str()
                .is_some_and(|m| m.contains(case.mentions))
            && body.as_object().is_some_and(|o| o.len() == 2);
        assert_ne!(
            status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{}: {text}",
            case.name
        );
        if !ok {
            failures.push(format!(
                "{}: got {status} {text}; want {} {} mentioning {:?}",
                case.name, case.status, case.code, case.mentions
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "bad-input cases failed:\n{}",
        failures.join("\n")
    );
    assert_eq!(
        row_counts(&pool).await,
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
