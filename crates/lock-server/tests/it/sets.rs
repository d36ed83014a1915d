//! Key sets over HTTP (`POST /v1/lock-sets/acquire`, ADR 0007): all or nothing with the key
//! that refused named, a waiting set that holds nothing and is granted when its last key
//! frees (across two replicas), woken by the release rather than its recheck, and a set's bad
//! input refused by name.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use test_support::poll_until;

use crate::support::{Api, StoreAt, TestServer, token};

const WAIT_MS: u64 = 3_500;
const DEADLINE: Duration = Duration::from_secs(10);

async fn acquire_set(api: &Api, keys: &[&str], session: &str, extra: Value) -> (StatusCode, Value) {
    let mut body = json!({"session_id": session, "lock_keys": keys, "ttl_ms": 30_000});
    body.as_object_mut()
        .expect("an object")
        .extend(extra.as_object().expect("an object").clone());
    api.post("/v1/lock-sets/acquire", body).await
}

/// L7: the token `key` is held with, if any.
async fn held_with(api: &Api, key: &str) -> Option<u64> {
    let (status, body) = api
        .call(reqwest::Method::GET, &format!("/v1/locks/{key}"), None)
        .await;
    (status == StatusCode::OK).then(|| token(&body))
}

async fn a_set_is_granted_whole_or_the_held_key_is_named(at: StoreAt) {
    let a = TestServer::start(at.open().await, &[]).await;
    let holder = a.api.session("holder", 30_000).await;
    let payer = a.api.session("payer", 30_000).await;
    let (status, held) = a.api.acquire("acct:2", &holder, 30_000).await;
    assert_eq!(status, StatusCode::OK, "{held}");
    let (status, body) = acquire_set(&a.api, &["acct:2", "acct:1"], &payer, json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["code"], "LOCK_HELD");
    assert!(
        body["message"].as_str().unwrap().contains("acct:2"),
        "{body}"
    );
    assert_eq!(
        held_with(&a.api, "acct:1").await,
        None,
        "nothing granted alone"
    );
    assert!(a.api.release("acct:2", &holder, token(&held)).await);
    let (status, set) = acquire_set(&a.api, &["acct:2", "acct:1"], &payer, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{set}");
    let grants = set["grants"].as_array().expect("grants");
    let keys: Vec<&str> = grants
        .iter()
        .map(|g| g["lock_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["acct:1", "acct:2"], "sorted by key");
    assert!(token(&grants[1]) > token(&held), "{set}");
    for grant in grants {
        assert!(
            grant["proof"]
                .as_str()
                .is_some_and(|p| p.starts_with("v2.")),
            "{grant}"
        );
        let key = grant["lock_key"].as_str().unwrap();
        assert_eq!(held_with(&a.api, key).await, Some(token(grant)));
        // Each member is an ordinary grant: released on its own key.
        assert!(a.api.release(key, &payer, token(grant)).await);
    }
}

async fn a_waiting_set_holds_nothing_until_its_last_key_frees(at: StoreAt) {
    let a = TestServer::start(at.open().await, &[]).await;
    let b = TestServer::start(at.open().await, &[]).await;
    let holder = a.api.session("holder", 30_000).await;
    let payer = b.api.session("payer", 30_000).await;
    let (_, held) = a.api.acquire("acct:b", &holder, 30_000).await;
    let waiting = {
        let api = b.api.clone();
        tokio::spawn(async move {
            acquire_set(
                &api,
                &["acct:a", "acct:b"],
                &payer,
                json!({"wait_ms": WAIT_MS}),
            )
            .await
        })
    };
    // The set queued on both keys (L7 counts its place on the held one) and holds neither.
    poll_until("the set's place on acct:b", DEADLINE, || async {
        let (_, info) = a
            .api
            .call(reqwest::Method::GET, "/v1/locks/acct:b", None)
            .await;
        (info["waiters"] == 1).then_some(())
    })
    .await;
    assert_eq!(
        held_with(&a.api, "acct:a").await,
        None,
        "a waiting set holds no key"
    );
    // Freed on the other replica: the set is woken and granted both keys.
    assert!(a.api.release("acct:b", &holder, token(&held)).await);
    let (status, set) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{set}");
    let grants = set["grants"].as_array().expect("grants");
    assert_eq!(grants.len(), 2, "{set}");
    assert!(token(&grants[1]) > token(&held), "{set}");
    assert!(
        grants.iter().all(|g| g["waited_ms"].as_u64().unwrap() > 0),
        "{set}"
    );
}

async fn sets_on_hot_keys_wait_for_releases_never_for_the_recheck(at: StoreAt) {
    const CLIENTS: usize = 6;
    /// Cycles per client: counted, not timed, so a slow machine runs longer instead.
    const CYCLES: usize = 12;
    /// A wait this long was ended by the recheck, not by a wake-up: a release lets the next
    /// set in within milliseconds, and a set has at most CLIENTS - 1 ahead.
    const RECHECKED: Duration =
        Duration::from_millis(lock_server::waiting::WAIT_RECHECK_MS * 9 / 10);
    let a = TestServer::start(at.open().await, &[]).await;
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(CLIENTS));
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        let api = a.api.clone();
        let session = api.session(&format!("client-{i}"), 30_000).await;
        let start = start.clone();
        clients.spawn(async move {
            start.wait().await;
            let mut waits = Vec::new();
            for _ in 0..CYCLES {
                let asked = tokio::time::Instant::now();
                let keys = ["hot:a", "hot:b"];
                let (status, set) =
                    acquire_set(&api, &keys, &session, json!({"wait_ms": WAIT_MS})).await;
                assert_eq!(status, StatusCode::OK, "{set}");
                let grants = set["grants"].as_array().expect("grants").clone();
                let waited = grants[0]["waited_ms"].as_u64().is_some_and(|ms| ms > 0);
                waits.push((asked.elapsed(), waited));
                for grant in &grants {
                    let key = grant["lock_key"].as_str().unwrap();
                    assert!(api.release(key, &session, token(grant)).await);
                }
            }
            waits
        });
    }
    let waits: Vec<(Duration, bool)> = clients.join_all().await.into_iter().flatten().collect();
    let waited = waits.iter().filter(|(_, waited)| *waited).count();
    // A run in which few waited checked little (a loaded machine spreads the clients out).
    assert!(
        waited >= CYCLES / 2,
        "only {waited} of {} sets waited",
        waits.len()
    );
    let rechecked: Vec<&Duration> = waits
        .iter()
        .map(|(wait, _)| wait)
        .filter(|wait| **wait >= RECHECKED)
        .collect();
    assert!(
        rechecked.is_empty(),
        "{} of {} sets waited for the recheck: {rechecked:?}",
        rechecked.len(),
        waits.len()
    );
}

async fn a_bad_set_is_refused_by_name(at: StoreAt) {
    let a = TestServer::start(at.open().await, &[]).await;
    let s = a.api.session("payer", 30_000).await;
    let seventeen: Vec<String> = (0..17).map(|i| format!("k:{i}")).collect();
    let seventeen: Vec<&str> = seventeen.iter().map(String::as_str).collect();
    let cases: [(&[&str], &str); 4] = [
        (&[], "lock_keys"),
        (&seventeen, "lock_keys"),
        (&["k:1", "k:1"], "named twice"),
        (&["k:1", "no spaces"], "lock_key"),
    ];
    for (keys, named) in cases {
        let (status, body) = acquire_set(&a.api, keys, &s, json!({})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{keys:?}: {body}");
        assert_eq!(body["code"], "INVALID_ARGUMENT", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains(named),
            "{keys:?}: {body}"
        );
    }
    assert_eq!(
        held_with(&a.api, "k:1").await,
        None,
        "no half-written record"
    );
}

crate::support::on_both_backends!(
    a_set_is_granted_whole_or_the_held_key_is_named,
    a_waiting_set_holds_nothing_until_its_last_key_frees,
    sets_on_hot_keys_wait_for_releases_never_for_the_recheck,
    a_bad_set_is_refused_by_name,
);
