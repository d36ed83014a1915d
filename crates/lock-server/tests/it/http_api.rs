//! L1-L8 through HTTP on both backends (PostgreSQL and etcd): shapes, clamping, admin
//! credential, drain, metrics, proofs; and PostgreSQL's read-only answer.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::Connection;
use test_support::poll_until;

use crate::support::{Api, StoreAt, TestServer, on_both_backends, pg_store, token};

async fn l1_to_l7_round_trip_with_documented_bodies(at: StoreAt) {
    let store = at.open().await;
    let server = TestServer::start(store, &[]).await;
    let api = &server.api;

    let (status, created) = api
        .post(
            "/v1/sessions",
            json!({"owner_id": "worker-1", "ttl_ms": 5000}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["ttl_ms"], 5000);
    assert_eq!(created["backend"], at.backend());
    assert!(created["expires_at"].is_string());
    let session = created["session_id"].as_str().unwrap().to_owned();

    let (status, beat) = api
        .post(&format!("/v1/sessions/{session}/heartbeat"), json!(null))
        .await;
    assert_eq!(status, StatusCode::OK, "{beat}");
    assert_eq!(beat["ttl_ms"], 5000);

    let (status, grant) = api.acquire("payout:7", &session, 2000).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    assert_eq!(
        (grant["lock_key"].as_str(), grant["lease_ms"].as_u64()),
        (Some("payout:7"), Some(2000))
    );
    assert_eq!(grant["session_id"], session.as_str());
    let t = token(&grant);

    let (status, renewed) = api
        .post(
            "/v1/locks/payout:7/renew",
            json!({"session_id": session, "fencing_token": t}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{renewed}");
    assert_eq!(token(&renewed), t, "renew keeps the token");

    let (status, info) = api.call(Method::GET, "/v1/locks/payout:7", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (info["owner_id"].as_str(), token(&info)),
        (Some("worker-1"), t)
    );

    let other = api.session("worker-2", 5000).await;
    let (status, body) = api.acquire("payout:7", &other, 2000).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("LOCK_HELD"))
    );

    let (status, body) = api
        .post(
            "/v1/locks/payout:7/renew",
            json!({"session_id": session, "fencing_token": t + 1}),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("LOCK_LOST"))
    );

    assert!(
        !api.release("payout:7", &session, t + 1).await,
        "stale release is false, not an error"
    );
    assert!(
        !api.release("payout:7", &other, t).await,
        "another session cannot release with the holder's key and token"
    );
    assert!(api.release("payout:7", &session, t).await);
    let (status, body) = api.call(Method::GET, "/v1/locks/payout:7", None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("LOCK_NOT_HELD"))
    );

    let (status, grant) = api.acquire("payout:7", &other, 2000).await;
    assert_eq!(status, StatusCode::OK);
    assert!(token(&grant) > t);

    let (status, body) = api
        .call(Method::DELETE, &format!("/v1/sessions/{other}"), None)
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::NO_CONTENT, serde_json::Value::Null)
    );
    let (status, _) = api.call(Method::GET, "/v1/locks/payout:7", None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "L3 released the session's locks"
    );
    let (status, body) = api
        .post(&format!("/v1/sessions/{other}/heartbeat"), json!(null))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("SESSION_UNKNOWN"))
    );
    server.shutdown().await;
}

async fn ttls_are_clamped_and_the_granted_value_returned(at: StoreAt) {
    let store = at.open().await;
    let server = TestServer::start(
        store,
        &[
            "--lock.ttl.max",
            "10s",
            "--lock.default.ttl",
            "4s",
            "--lock.session.ttl",
            "6s",
        ],
    )
    .await;
    let api = &server.api;
    let (_, created) = api
        .post("/v1/sessions", json!({"owner_id": "w", "ttl_ms": 30_000}))
        .await;
    assert_eq!(
        created["ttl_ms"], 10_000,
        "session TTL clamped to lock.ttl.max"
    );
    let (_, defaulted) = api.post("/v1/sessions", json!({"owner_id": "w"})).await;
    assert_eq!(
        defaulted["ttl_ms"], 6_000,
        "lock.session.ttl when none is asked"
    );
    let session = created["session_id"].as_str().unwrap();
    let (_, grant) = api.acquire("clamped", session, 30_000).await;
    assert_eq!(grant["lease_ms"], 10_000, "lease clamped to lock.ttl.max");
    let (_, grant) = api.acquire("raised", session, 1).await;
    assert_eq!(grant["lease_ms"], 50, "lease raised to lock.ttl.min");
    let (_, grant) = api
        .post("/v1/locks/default/acquire", json!({"session_id": session}))
        .await;
    assert_eq!(
        grant["lease_ms"], 4_000,
        "lock.default.ttl when none is asked"
    );
    server.shutdown().await;
}

async fn revoke_needs_the_admin_token(at: StoreAt) {
    let store = at.open().await;
    let disabled = TestServer::start(store.clone(), &[]).await;
    let (status, body) = disabled.api.post("/v1/locks/k/revoke", json!(null)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("FORBIDDEN"))
    );
    disabled.shutdown().await;

    let server = TestServer::start(store, &["--admin-token", "s3cret"]).await;
    let api = &server.api;
    let session = api.session("w", 5000).await;
    let (_, grant) = api.acquire("k", &session, 5000).await;
    let t = token(&grant);
    let revoke = |auth: Option<&'static str>| {
        let mut request = api.http.post(format!("{}/v1/locks/k/revoke", api.base));
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        async move {
            let response = request.send().await.unwrap();
            (
                response.status(),
                response.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("s3cret"),
        Some("Bearer s3cret2"),
        Some("Basic s3cret"),
    ] {
        let (status, body) = revoke(auth).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("UNAUTHENTICATED")),
            "{auth:?}"
        );
    }
    let (status, body) = revoke(Some("bearer s3cret")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"lock_key": "k", "revoked": true, "fencing_token": t})
    );
    let (_, body) = revoke(Some("Bearer s3cret")).await;
    assert_eq!(
        body,
        json!({"lock_key": "k", "revoked": false, "fencing_token": null})
    );
    server.shutdown().await;
}

/// L8 on key `r` with `body` as `content_type`, presenting the admin credential `s3cret`.
async fn revoke_r(api: &Api, body: String, content_type: &'static str) -> (StatusCode, Value) {
    let request = api
        .http
        .post(format!("{}/v1/locks/r/revoke", api.base))
        .header("authorization", "Bearer s3cret")
        .header("content-type", content_type)
        .body(body);
    let response = request.send().await.unwrap();
    (response.status(), response.json::<Value>().await.unwrap())
}

/// Revokes of `r` with a bad reason (empty, a control character, a stray field, a number,
/// not JSON, too long) are refused.
async fn assert_bad_reasons_refused(api: &Api) {
    for (body, content_type, status, code) in [
        (
            r#"{"reason":""}"#,
            "application/json",
            400,
            "INVALID_ARGUMENT",
        ),
        (
            r#"{"reason":"a\u0000b"}"#,
            "application/json",
            400,
            "INVALID_ARGUMENT",
        ),
        (
            r#"{"reason":"x","why":1}"#,
            "application/json",
            400,
            "INVALID_ARGUMENT",
        ),
        (
            r#"{"reason":7}"#,
            "application/json",
            400,
            "INVALID_ARGUMENT",
        ),
        (
            r#"{"reason":"maintenance"}"#,
            "text/plain",
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            &format!(r#"{{"reason":"{}"}}"#, "x".repeat(201)),
            "application/json",
            400,
            "INVALID_ARGUMENT",
        ),
    ] {
        let (got, answer) = revoke_r(api, body.to_owned(), content_type).await;
        assert_eq!(
            (got.as_u16(), answer["code"].as_str()),
            (status, Some(code)),
            "{body}: {answer}"
        );
    }
}

/// The holder's renew of revoked `r` (token `t`, in `session`) is refused `LOCK_REVOKED`
/// with who and why; a renew with another token is only `LOCK_LOST`.
async fn assert_holder_told_who_and_why(api: &Api, session: &str, t: u64) {
    let (status, refused) = api
        .post(
            "/v1/locks/r/renew",
            json!({"session_id": session, "fencing_token": t}),
        )
        .await;
    assert_eq!(
        (
            status,
            refused["code"].as_str(),
            refused["message"].as_str()
        ),
        (
            StatusCode::CONFLICT,
            Some("LOCK_REVOKED"),
            Some(
                format!("lock r (token {t}) was revoked by lock-admin: Maintenance: node 3")
                    .as_str()
            )
        )
    );
    let (status, refused) = api
        .post(
            "/v1/locks/r/renew",
            json!({"session_id": session, "fencing_token": t + 1}),
        )
        .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (StatusCode::CONFLICT, Some("LOCK_LOST")),
        "another token was never revoked: {refused}"
    );
}

/// L8's reason reaches the holder (its renew is refused `LOCK_REVOKED` with who and why) and
/// the metric (by its first word); a bad reason is refused and revokes nothing.
async fn a_revoke_with_a_reason_tells_the_holder_who_and_why(at: StoreAt) {
    let store = at.open().await;
    let server = TestServer::start(store, &["--admin-token", "s3cret"]).await;
    let api = &server.api;
    let session = api.session("w", 5000).await;
    let (_, grant) = api.acquire("r", &session, 5000).await;
    let t = token(&grant);
    assert_bad_reasons_refused(api).await;
    let (status, held) = api.call(Method::GET, "/v1/locks/r", None).await;
    assert_eq!(
        (status, token(&held)),
        (StatusCode::OK, t),
        "no refused revoke revoked"
    );

    let reason = r#"{"reason":"Maintenance: node 3"}"#;
    let (status, answer) = revoke_r(api, reason.to_owned(), "application/json").await;
    assert_eq!(
        (status, &answer["fencing_token"]),
        (StatusCode::OK, &json!(t))
    );
    assert_holder_told_who_and_why(api, &session, t).await;
    let metrics = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap();
    let text = metrics.text().await.unwrap();
    let backend = at.backend();
    let series = format!("lock_revoked_total{{backend=\"{backend}\",reason=\"maintenance\"}}");
    let count: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .unwrap_or_else(|| panic!("{series} missing from /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap();
    assert!(count >= 1.0, "{series} {count}");
    server.shutdown().await;
}

async fn draining_answers_not_leader_to_mutations_and_fails_readiness(at: StoreAt) {
    let store = at.open().await;
    let mut server = TestServer::start(store, &["--drain-grace", "3s"]).await;
    let api = server.api.clone();
    let session = api.session("w", 5000).await;
    let (status, _) = api.call(Method::GET, "/health/ready", None).await;
    assert_eq!(status, StatusCode::OK);

    server.begin_shutdown();
    poll_until(
        "readiness to fail while draining",
        Duration::from_secs(5),
        || async {
            (api.call(Method::GET, "/health/ready", None).await.0
                == StatusCode::SERVICE_UNAVAILABLE)
                .then_some(())
        },
    )
    .await;
    let (status, body) = api.acquire("k", &session, 1000).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("NOT_LEADER"))
    );
    let (status, _) = api.call(Method::GET, "/v1/locks/k", None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "reads still answer while draining"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn read_only_database_answers_not_leader_until_writable_again() {
    let (store, url) = pg_store().await;
    let server = TestServer::start(store, &[]).await;
    let api = &server.api;
    let session = api.session("w", 30_000).await;
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    set_read_only(&mut admin, true).await;
    poll_until(
        "acquire to answer NOT_LEADER on a read-only database",
        Duration::from_secs(10),
        || async {
            let (status, body) = api.acquire("ro", &session, 1000).await;
            assert_ne!(
                status,
                StatusCode::OK,
                "no grant on a read-only store: {body}"
            );
            assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
            (body["code"] == "NOT_LEADER").then_some(())
        },
    )
    .await;
    let (status, body) = api.call(Method::GET, "/health/ready", None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("NOT_LEADER"))
    );

    set_read_only(&mut admin, false).await;
    poll_until(
        "grants to resume once writable",
        Duration::from_secs(10),
        || async { (api.acquire("ro", &session, 1000).await.0 == StatusCode::OK).then_some(()) },
    )
    .await;
    server.shutdown().await;
}

/// Sets the database's default to read-only (or back) and makes every other backend
/// reconnect, as a demoted primary would look. `admin` is one dedicated connection that is
/// never terminated and sets its own session writable first.
async fn set_read_only(admin: &mut sqlx::PgConnection, on: bool) {
    let value = if on { "on" } else { "off" };
    let sql = format!(
        "SET default_transaction_read_only = off;
         DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = {value}', current_database()); END $$;
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid();"
    );
    sqlx::raw_sql(&sql).execute(admin).await.unwrap();
}

async fn metrics_and_health_are_served(at: StoreAt) {
    let store = at.open().await;
    let server = TestServer::start(store, &[]).await;
    let api = &server.api;
    let session = api.session("w", 5000).await;
    let (_, _) = api.acquire("m", &session, 1000).await;
    let other = api.session("w2", 5000).await;
    let (_, _) = api.acquire("m", &other, 1000).await;
    let (status, _) = api.call(Method::GET, "/health/live", None).await;
    assert_eq!(status, StatusCode::OK);
    let text = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let backend = at.backend();
    for needle in [
        format!("lock_grants_total{{backend=\"{backend}\"}}"),
        format!("lock_contention_total{{backend=\"{backend}\"}}"),
        format!("lock_sessions_created_total{{backend=\"{backend}\"}}"),
        "lock_http_request_duration_seconds_bucket".to_owned(),
    ] {
        assert!(
            text.contains(&needle),
            "{needle} missing from /metrics:\n{text}"
        );
    }
    server.shutdown().await;
}

/// Every grant and renewal carries the replica's signed proof of (key, token), which the
/// test public key verifies offline; a replica without a signing key sends none.
async fn grants_carry_a_proof_a_resource_verifies_offline(at: StoreAt) {
    let store = at.open().await;
    let server = TestServer::start(store.clone(), &[]).await;
    let api = &server.api;
    let verifier = lock_api::FenceVerifier::parse(&test_support::public_keys()).unwrap();
    let session = api.session("signed", 30_000).await;
    let (status, grant) = api.acquire("payout:41", &session, 30_000).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let key = lock_api::LockKey::parse("payout:41").unwrap();
    let t = lock_api::FencingToken(token(&grant));
    let proof = grant["proof"].as_str().expect("a proof");
    let session_id = lock_api::SessionId(session.parse().unwrap());
    assert_eq!(
        verifier.verify(&key, t, proof),
        Ok(lock_api::GrantId::derive(session_id, &key, t)),
        "it names the grant: this session's, of this key and token"
    );
    let other = lock_api::LockKey::parse("payout:42").unwrap();
    assert!(
        verifier.verify(&other, t, proof).is_err(),
        "bound to its key"
    );
    let (status, renewed) = api
        .post(
            "/v1/locks/payout:41/renew",
            json!({"session_id": session, "fencing_token": t.0}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{renewed}");
    assert_eq!(
        renewed["proof"].as_str(),
        Some(proof),
        "renewal: same proof"
    );
    // L7 shows the holder's owner and token, never its session id.
    let (status, info) = api.call(Method::GET, "/v1/locks/payout:41", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(info["owner_id"], "signed");
    assert!(!info.to_string().contains(&session), "{info}");

    let unsigned = TestServer::start(store, &["--signing-key", ""]).await;
    let s2 = unsigned.api.session("unsigned", 30_000).await;
    let (status, grant) = unsigned.api.acquire("payout:43", &s2, 30_000).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    assert!(grant.get("proof").is_none(), "{grant}");
}

on_both_backends!(
    l1_to_l7_round_trip_with_documented_bodies,
    ttls_are_clamped_and_the_granted_value_returned,
    revoke_needs_the_admin_token,
    a_revoke_with_a_reason_tells_the_holder_who_and_why,
    draining_answers_not_leader_to_mutations_and_fails_readiness,
    metrics_and_health_are_served,
    grants_carry_a_proof_a_resource_verifies_offline,
);

/// etcd unreachable (nothing listens at its endpoint): every store call answers 503 with a
/// retryable code, readiness fails, never a 500.
#[tokio::test]
async fn an_unreachable_etcd_answers_503_never_500() {
    let nowhere = vec![format!("http://127.0.0.1:{}", test_support::free_port())];
    let store = lock_server::store::EtcdStore::connect(
        &nowhere,
        "/unreachable/",
        Duration::from_millis(500),
    )
    .await
    .expect("connecting is lazy");
    let server = TestServer::start(std::sync::Arc::new(store), &[]).await;
    let api = &server.api;
    let (status, body) = api
        .post("/v1/sessions", json!({"owner_id": "w", "ttl_ms": 5000}))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        matches!(
            body["code"].as_str(),
            Some("STORE_UNAVAILABLE" | "NOT_LEADER")
        ),
        "{body}"
    );
    let (status, body) = api.call(Method::GET, "/v1/locks/k", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (status, _) = api.call(Method::GET, "/health/ready", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    server.shutdown().await;
}
