//! A14: a session belongs to the credential that opened it. Credential B, holding A's genuine
//! session id (as a leaked log line or a shared host would give it), is answered on every
//! lock route exactly as for a session that does not exist, and A's session and grant are
//! untouched. Real lock-server processes, on PostgreSQL and on etcd.

use std::path::Path;

use harness::stack::{LockServer, LockStoreAt, lock_http, spawn_lock_server_at};
use lock_api::{CredentialEntry, OwnerRule};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

const LEASE_MS: u64 = 30_000;

fn credential(name: &str, owners: &str) -> (String, CredentialEntry) {
    let secret = format!("{:032x}{:032x}", fastrand::u128(..), fastrand::u128(..));
    let mut entry = CredentialEntry::from_secret(name, &["client"], &secret);
    entry.owners = OwnerRule::Listed(vec![owners.to_owned()]);
    (secret, entry)
}

/// One call: its status and JSON body (`null` for none).
async fn call(
    http: &Client,
    method: Method,
    url: String,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let answer = request.send().await.unwrap();
    let status = answer.status();
    let text = answer.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A lock-server on `store` knowing credentials A (owners `a-*`) and B (owners `b-*`),
/// logging to `logs`: the server and HTTP clients presenting A and B.
async fn start_with_two_credentials(
    store: &LockStoreAt,
    logs: &Path,
) -> (LockServer, Client, Client) {
    let (a, a_entry) = credential("client-a", "a-*");
    let (b, b_entry) = credential("client-b", "b-*");
    let file = logs.join("credentials");
    std::fs::write(&file, format!("{}\n{}\n", a_entry.line(), b_entry.line())).unwrap();
    let env = [("LOCK_CREDENTIALS_FILE", file.display().to_string())];
    let server: LockServer = spawn_lock_server_at("lock-server", store, &env, logs, None)
        .await
        .unwrap();
    (server, lock_http(&a).unwrap(), lock_http(&b).unwrap())
}

/// A opens a session and takes `key`: the session id and the grant's fencing token.
async fn open_and_acquire(as_a: &Client, url: &str, key: &str) -> (String, u64) {
    let (status, opened) = call(
        as_a,
        Method::POST,
        format!("{url}/v1/sessions"),
        Some(json!({"owner_id": "a-1", "ttl_ms": LEASE_MS})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{opened}");
    let session = opened["session_id"].as_str().unwrap().to_owned();
    let (status, grant) = call(
        as_a,
        Method::POST,
        format!("{url}/v1/locks/{key}/acquire"),
        Some(json!({"session_id": session, "ttl_ms": LEASE_MS})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    (session, grant["fencing_token"].as_u64().unwrap())
}

/// One call of a lock route: its name, method, URL and body.
type Route = (&'static str, Method, String, Option<Value>);

/// Every lock route naming `session`, on the server at `url`; `key` is A's held key and
/// `token` its fencing token.
fn routes(url: &str, key: &str, session: &str, token: u64) -> Vec<Route> {
    let lease = json!({"session_id": session, "ttl_ms": LEASE_MS});
    let grant = json!({"session_id": session, "fencing_token": token});
    vec![
        (
            "L2 heartbeat",
            Method::POST,
            format!("{url}/v1/sessions/{session}/heartbeat"),
            None,
        ),
        (
            "L4 acquire",
            Method::POST,
            format!("{url}/v1/locks/b:other/acquire"),
            Some(lease.clone()),
        ),
        (
            "L4 acquire of A's key",
            Method::POST,
            format!("{url}/v1/locks/{key}/acquire"),
            Some(lease),
        ),
        (
            "L5 renew",
            Method::POST,
            format!("{url}/v1/locks/{key}/renew"),
            Some(grant.clone()),
        ),
        (
            "L9 proclaim",
            Method::POST,
            format!("{url}/v1/locks/{key}/proclaim"),
            Some(json!({"session_id": session, "fencing_token": token, "value": "b leads"})),
        ),
        (
            "L6 release",
            Method::POST,
            format!("{url}/v1/locks/{key}/release"),
            Some(grant),
        ),
        // Bad input is refused first, whoever's session it names (never counted).
        (
            "L4 acquire with a bad wait_ms",
            Method::POST,
            format!("{url}/v1/locks/b:other/acquire"),
            Some(json!({"session_id": session, "ttl_ms": LEASE_MS, "wait_ms": 86_400_001_u64})),
        ),
        (
            "L3 close",
            Method::DELETE,
            format!("{url}/v1/sessions/{session}"),
            None,
        ),
    ]
}

/// B calls `to_foreign` (naming A's session) and `to_unknown` (the same route naming a
/// session nobody opened): the answers are the same, and a refusal.
async fn assert_answered_as_unknown(as_b: &Client, to_foreign: Route, to_unknown: Route) {
    let (name, method, to_foreign, body) = to_foreign;
    let (_, _, to_unknown, unknown_body) = to_unknown;
    let foreign = call(as_b, method.clone(), to_foreign, body).await;
    let mut never = call(as_b, method, to_unknown, unknown_body).await;
    // The answers are the same but for the session's tag in a message.
    if let (Some(f), Some(n)) = (
        foreign.1.get("message").and_then(Value::as_str),
        never.1.get("message").and_then(Value::as_str),
    ) {
        let (f, n) = (
            f.split_whitespace()
                .filter(|w| !w.starts_with("s-"))
                .collect::<Vec<_>>(),
            n.split_whitespace()
                .filter(|w| !w.starts_with("s-"))
                .collect::<Vec<_>>(),
        );
        assert_eq!(f, n, "{name}: B learns whether A's session exists");
        never.1["message"] = foreign.1["message"].clone();
    }
    assert_eq!(
        foreign, never,
        "{name}: B with A's session id is answered as for an unknown session"
    );
    assert!(
        !foreign.0.is_success()
            || foreign.0 == StatusCode::NO_CONTENT
            || foreign.1 == json!({"released": false}),
        "{name}: {foreign:?}"
    );
}

/// A's `session` and its grant of `key` (`token`) are untouched: it still heartbeats and
/// renews, B announced nothing for it and took nothing in it.
async fn assert_a_untouched(as_a: &Client, url: &str, key: &str, session: &str, token: u64) {
    let (status, body) = call(
        as_a,
        Method::POST,
        format!("{url}/v1/sessions/{session}/heartbeat"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "A's session lives: {body}");
    let (status, body) = call(
        as_a,
        Method::POST,
        format!("{url}/v1/locks/{key}/renew"),
        Some(json!({"session_id": session, "fencing_token": token})),
    )
    .await;
    assert_eq!(
        (status, body["fencing_token"].as_u64()),
        (StatusCode::OK, Some(token)),
        "A's grant lives: {body}"
    );
    let (status, body) = call(as_a, Method::GET, format!("{url}/v1/locks/{key}"), None).await;
    assert_eq!(
        (status, body.get("value")),
        (StatusCode::OK, None),
        "B announced nothing for A's grant: {body}"
    );
    let (status, body) = call(as_a, Method::GET, format!("{url}/v1/locks/b:other"), None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "B took nothing in A's session: {body}"
    );
}

/// Every refusal is counted (`/metrics` at `url`) and logged (in `logs`) by the session's
/// tag, never its id `session`.
async fn assert_refusals_counted_by_tag(url: &str, logs: &Path, session: &str) {
    let page = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let metrics = harness::metrics::Metrics::parse(&page).unwrap();
    let counted = metrics.sum("lock_sessions_refused_total", &[]).unwrap();
    assert_eq!(counted, 7.0, "{page}");
    let log = std::fs::read_to_string(logs.join("lock-server.log")).unwrap();
    assert!(!log.contains(session), "the log holds A's session id");
    assert_eq!(log.matches("\"session_refused\"").count(), 7);
}

async fn foreign_sessions_change_nothing(store: LockStoreAt) {
    let logs = tempfile::tempdir().unwrap();
    let (server, as_a, as_b) = start_with_two_credentials(&store, logs.path()).await;
    let url = &server.url;

    // A opens a session and takes a key.
    let key = "a:account-1";
    let (session, token) = open_and_acquire(&as_a, url, key).await;

    // What a session nobody opened gets, route by route, from B.
    let unknown = uuid::Uuid::new_v4().to_string();
    let mut refused = 0;
    for (to_foreign, to_unknown) in routes(url, key, &session, token)
        .into_iter()
        .zip(routes(url, key, &unknown, token))
    {
        assert_answered_as_unknown(&as_b, to_foreign, to_unknown).await;
        refused += 1;
    }
    assert_eq!(refused, 8);

    assert_a_untouched(&as_a, url, key, &session, token).await;
    assert_refusals_counted_by_tag(url, logs.path(), &session).await;

    let (status, body) = call(
        &as_a,
        Method::POST,
        format!("{url}/v1/locks/{key}/release"),
        Some(json!({"session_id": session, "fencing_token": token})),
    )
    .await;
    assert_eq!(
        (status, &body["released"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a14_another_credentials_session_is_unknown_on_every_route_postgres() {
    let db = test_support::fresh_database().await;
    foreign_sessions_change_nothing(LockStoreAt::Postgres(db.url.clone())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a14_another_credentials_session_is_unknown_on_every_route_etcd() {
    foreign_sessions_change_nothing(LockStoreAt::Etcd {
        endpoints: test_support::etcd::endpoints(),
        prefix: test_support::etcd::fresh_prefix(),
    })
    .await;
}
