//! Elections over HTTP (C2 §2.4c): a campaign is L4 with a `value`, answered only once the
//! value is set; L9 changes it under the same term; L7 names the leader's term and value; a
//! waiting candidate handed the key announces its own value, never its predecessor's; a stale
//! term's proclaim is LOCK_LOST; bad values are refused by name.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Api, StoreAt, TestServer, token};

async fn campaign(api: &Api, name: &str, session: &str, extra: Value) -> (StatusCode, Value) {
    let mut body = json!({"session_id": session, "ttl_ms": 30_000});
    body.as_object_mut()
        .expect("an object")
        .extend(extra.as_object().expect("an object").clone());
    api.post(&format!("/v1/locks/{name}/acquire"), body).await
}

async fn proclaim(api: &Api, name: &str, session: &str, term: u64, value: &str) -> StatusCode {
    let body = json!({"session_id": session, "fencing_token": term, "value": value});
    api.post(&format!("/v1/locks/{name}/proclaim"), body)
        .await
        .0
}

/// L7's term and value of `name`.
async fn leader(api: &Api, name: &str) -> (u64, Value) {
    let (status, info) = api
        .call(Method::GET, &format!("/v1/locks/{name}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{info}");
    (
        token(&info),
        info.get("value").cloned().unwrap_or(Value::Null),
    )
}

async fn a_handed_over_term_announces_its_own_value(at: StoreAt) {
    let a = TestServer::start(at.open().await, &[]).await;
    let [s1, s2] = [
        a.api.session("c1", 30_000).await,
        a.api.session("c2", 30_000).await,
    ];
    let (status, first) = campaign(&a.api, "sched", &s1, json!({"value": "c1:80"})).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let t1 = token(&first);
    assert_eq!(leader(&a.api, "sched").await, (t1, json!("c1:80")));
    assert_eq!(
        proclaim(&a.api, "sched", &s1, t1, "c1:81").await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        leader(&a.api, "sched").await,
        (t1, json!("c1:81")),
        "same term, new value"
    );
    let second = {
        let (api, s2) = (a.api.clone(), s2.clone());
        tokio::spawn(async move {
            campaign(
                &api,
                "sched",
                &s2,
                json!({"value": "c2:80", "wait_ms": 8_000}),
            )
            .await
        })
    };
    test_support::poll_until(
        "the second candidate to queue",
        Duration::from_secs(5),
        || async {
            let (_, info) = a.api.call(Method::GET, "/v1/locks/sched", None).await;
            (info["waiters"] == 1).then_some(())
        },
    )
    .await;
    assert!(a.api.release("sched", &s1, t1).await, "the leader resigns");
    let (status, granted) = second.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{granted}");
    let t2 = token(&granted);
    assert!(t2 > t1, "a later term is higher");
    assert_eq!(
        leader(&a.api, "sched").await,
        (t2, json!("c2:80")),
        "answered only with its value in place"
    );
    let stale = proclaim(&a.api, "sched", &s1, t1, "c1 again").await;
    assert_eq!(stale, StatusCode::CONFLICT, "a stale term is LOCK_LOST");
    assert_eq!(leader(&a.api, "sched").await, (t2, json!("c2:80")));
}

async fn a_bad_value_is_refused_by_name(at: StoreAt) {
    let a = TestServer::start(at.open().await, &[]).await;
    let s = a.api.session("c", 30_000).await;
    let long = "v".repeat(4097);
    let cases = [
        json!({"value": "nul\u{0}"}),
        json!({"value": long}),
        json!({"value": 7}),
        json!({"value": "reader", "mode": "shared"}),
        json!({"value": "permit", "permits": 2}),
    ];
    for extra in cases {
        let (status, body) = campaign(&a.api, "e", &s, extra.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        assert_eq!(body["code"], "INVALID_ARGUMENT", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("value"),
            "{extra}: {body}"
        );
    }
    let (status, _) = a.api.call(Method::GET, "/v1/locks/e", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing granted");
    let (_, grant) = campaign(&a.api, "e", &s, json!({"value": "ok"})).await;
    let term = token(&grant);
    for body in [
        json!({"session_id": s, "fencing_token": term, "value": "nul\u{0}"}),
        json!({"session_id": s, "fencing_token": term}),
        json!({"session_id": s, "fencing_token": term, "value": "x", "extra": 1}),
    ] {
        let (status, answer) = a.api.post("/v1/locks/e/proclaim", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["code"], "INVALID_ARGUMENT", "{answer}");
    }
    assert_eq!(
        leader(&a.api, "e").await,
        (term, json!("ok")),
        "nothing half-written"
    );
}

crate::support::on_both_backends!(
    a_handed_over_term_announces_its_own_value,
    a_bad_value_is_refused_by_name,
);
