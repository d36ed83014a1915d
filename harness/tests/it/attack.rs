//! The attack suite (SECURITY.md's threat model): one test per finding of an attacker on the same network,
//! against the real binaries on a real PostgreSQL. Each test names its finding (A1-A9).

use std::time::{Duration, Instant};

use harness::stack::{Stack, StackOptions, start_lock_server};
use payment_api::PayoutState;
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SETTLE_DEADLINE: Duration = Duration::from_secs(60);

async fn stack() -> Stack {
    Stack::start(StackOptions::default(), None).await.unwrap()
}

/// Raw bytes to `url`'s host and port; the whole answer until the server closes (or
/// `deadline`).
async fn raw_exchange(url: &str, request: &[u8], deadline: Duration) -> String {
    let addr = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(deadline, stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// The JSON body of a raw HTTP answer.
fn body_of(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {answer:?}"))
}

/// Writes `ids`' fence straight into paydb, beyond any token ever issued: the connection.
async fn poison_fences(stack: &Stack, ids: &[i64]) -> sqlx::PgConnection {
    let mut db = sqlx::PgConnection::connect(stack.paydb_url.as_deref().unwrap())
        .await
        .unwrap();
    sqlx::query("UPDATE payouts SET fence = $1, state = 'CLAIMED' WHERE payout_id = ANY($2)")
        .bind(i64::MAX)
        .bind(ids)
        .execute(&mut db)
        .await
        .unwrap();
    db
}

/// Over 20 more scans, each of the 50 poisoned payouts was still tried only once by the
/// executor at `executor_url`, fenced, and skipped from then on (quarantine: 30 s, longer
/// than the test takes to get here): no spinning. The stuck payouts are counted for an alert.
async fn assert_poisoned_tried_once_then_quarantined(stack: &Stack, executor_url: &str) {
    let scans = || async {
        stack
            .metric(
                &stack.payment_url,
                "http_requests_total",
                &[("route", "/v1/offers"), ("method", "POST")],
            )
            .await
            .unwrap()
    };
    let before = scans().await;
    test_support::poll_until("20 more scans", SETTLE_DEADLINE, || async {
        (scans().await >= before + 20.0).then_some(())
    })
    .await;
    let fenced = stack
        .metric(
            executor_url,
            "payout_execute_seconds_count",
            &[("outcome", "fenced")],
        )
        .await
        .unwrap();
    assert_eq!(fenced, 50.0, "fenced attempts on 50 poisoned payouts");
    let quarantined = stack
        .metric(executor_url, "executor_quarantined_payouts", &[])
        .await
        .unwrap();
    assert_eq!(quarantined, 50.0);
    let payment_url = stack.payment_url.clone();
    test_support::poll_until(
        "payouts_stuck to count the poisoned payouts",
        Duration::from_secs(30),
        || async {
            let stuck = stack
                .metric(&payment_url, "payouts_stuck", &[])
                .await
                .ok()?;
            (stuck >= 50.0).then_some(())
        },
    )
    .await;
}

/// An operator repairs poisoned payout `repaired` with a genuine grant of its lock: an
/// executor's credential cannot re-fence, a re-fence only raises, and once the fence is
/// repaired in paydb (`db`) the operator's grant raises it.
async fn operator_refences(stack: &Stack, db: &mut sqlx::PgConnection, repaired: i64) {
    let client = stack.lock_client_builder().build().unwrap();
    let session = client.open_session("operator").await.unwrap();
    let key = payment_api::payout_lock_key(repaired);
    let handle = session
        .acquire(
            &key,
            Duration::from_secs(10),
            &lock_client::AcquirePolicy::DEFAULT,
        )
        .await
        .unwrap()
        .expect("the operator gets the lock");
    let url = format!("{}/v1/payouts/{repaired}/refence", stack.payment_url);
    let refence = |credential: String| {
        reqwest::Client::new()
            .post(&url)
            .bearer_auth(credential)
            .header(
                lock_api::FENCING_TOKEN_HEADER,
                handle.fencing_token().0.to_string(),
            )
            .header(
                lock_api::FENCING_PROOF_HEADER,
                handle.fence_proof().unwrap(),
            )
            .send()
    };
    let refused = refence(stack.secrets.executor.clone()).await.unwrap();
    assert_eq!(refused.status(), 401, "an executor cannot re-fence");
    // A re-fence only raises: a genuine grant below the poisoned fence cannot lower it (an
    // old proof captured on the wire could otherwise re-arm a holder the fence stopped).
    let lower = refence(stack.secrets.payment_admin.clone()).await.unwrap();
    assert_eq!(lower.status(), 409);
    let body: Value = lower.json().await.unwrap();
    assert_eq!(body["code"], "FENCED_OUT", "{body}");
    assert_eq!(stack.payout(repaired).await.unwrap().fence, i64::MAX);
    // A fence poisoned in the database is repaired there (SECURITY.md runbook), and the
    // operator's grant then raises it, fencing out every token issued before.
    sqlx::query("UPDATE payouts SET fence = 0, fence_grant = '' WHERE payout_id = $1")
        .bind(repaired)
        .execute(db)
        .await
        .unwrap();
    let answer = refence(stack.secrets.payment_admin.clone()).await.unwrap();
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["fence"].as_u64(), Some(handle.fencing_token().0));
    session.release(handle).await.unwrap();
    session.close().await;
    client.close();
}

/// A1: payouts whose fence no issued token can reach (written straight into paydb, as a
/// forged claim did before proofs) do not stop new payouts from settling, and the executor
/// does not spin on them.
#[tokio::test(flavor = "multi_thread")]
async fn a1_poisoned_payouts_do_not_stop_new_ones() {
    let mut stack = stack().await;
    let poisoned = stack.create_payouts("poison", 50).await.unwrap();
    let mut db = poison_fences(&stack, &poisoned).await;
    let executor_url = stack
        .start_executor("executor-1", &[])
        .await
        .unwrap()
        .url
        .clone();
    let fresh = stack.create_payouts("fresh", 5).await.unwrap();
    let settled = stack.wait_terminal(&fresh, SETTLE_DEADLINE).await.unwrap();
    assert!(settled.iter().all(|p| p.state == PayoutState::Settled));
    assert_poisoned_tried_once_then_quarantined(&stack, &executor_url).await;
    // An operator repairs one; the executor then settles it.
    let repaired = poisoned[0];
    operator_refences(&stack, &mut db, repaired).await;
    let settled = stack
        .wait_terminal(&[repaired], SETTLE_DEADLINE)
        .await
        .unwrap();
    assert_eq!(settled[0].state, PayoutState::Settled);
    let refenced = stack
        .metric(&stack.payment_url, "payouts_refenced_total", &[])
        .await
        .unwrap();
    assert_eq!(refenced, 1.0);
}

/// A1, A2: a made-up token is refused at payment-resource and rail-proxy whatever proof
/// comes with it — none, an attacker's own key under a trusted key id, a key id nobody
/// trusts, a genuine proof replayed from another payout or another token — and the fence,
/// the state and the rail are unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn a1_a2_forged_tokens_are_refused_with_the_fence_unchanged() {
    let stack = stack().await;
    let id = stack.create_payouts("forge", 1).await.unwrap()[0];
    let forged = i64::MAX;
    let key = payment_api::payout_lock_key(id);
    let max = lock_api::FencingToken(forged as u64);
    let foreign = lock_api::FenceSigner::from_seed("not-trusted", [3; 32]);
    let grant = test_support::test_grant(1, &key, max);
    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("no proof", None, "X-Fencing-Proof"),
        (
            "an attacker's key under the trusted id",
            Some(test_support::keys::rogue_signer().sign(&key, max, &grant)),
            "does not sign",
        ),
        (
            "a key id nobody trusts",
            Some(foreign.sign(&key, max, &grant)),
            "unknown key id",
        ),
        (
            "a genuine proof of another payout",
            Some(stack.proof(id + 1, forged)),
            "does not sign",
        ),
        (
            "a genuine proof of another token",
            Some(stack.proof(id, 7)),
            "does not sign",
        ),
        ("garbage", Some("v1.test-k1.@@@".to_owned()), "malformed"),
    ];
    for (what, proof, mentions) in &cases {
        for url in [
            format!("{}/v1/payouts/{id}/claim", stack.payment_url),
            format!("{}/v1/payouts/{id}/submit", stack.proxy_url),
            format!("{}/v1/payouts/{id}/post", stack.payment_url),
        ] {
            let mut request = reqwest::Client::new()
                .post(&url)
                .bearer_auth(&stack.secrets.executor)
                .header(lock_api::FENCING_TOKEN_HEADER, forged.to_string());
            if let Some(proof) = proof {
                request = request.header(lock_api::FENCING_PROOF_HEADER, proof);
            }
            let answer = request.send().await.unwrap();
            let status = answer.status().as_u16();
            let body: Value = answer.json().await.unwrap();
            assert_eq!(
                (status, body["code"].as_str()),
                (403, Some("PROOF_INVALID")),
                "{what} at {url}: {body}"
            );
            assert!(
                body["message"].as_str().unwrap().contains(mentions),
                "{what}: {body}"
            );
        }
    }
    let payout = stack.payout(id).await.unwrap();
    assert_eq!(
        (payout.fence, payout.state),
        (0, PayoutState::Pending),
        "fence unchanged"
    );
    assert!(
        stack.rail_received(id).await.unwrap().is_empty(),
        "the rail saw nothing"
    );
    assert!(
        stack.submission(id).await.unwrap().is_none(),
        "no submission reserved"
    );
}

/// A3: each write needs the credential of the role the contract names; another role's
/// credential (a leaked executor's, say) or none is refused and nothing is written.
#[tokio::test(flavor = "multi_thread")]
async fn a3_every_caller_needs_its_roles_credential() {
    let stack = stack().await;
    let id = stack.create_payouts("roles", 1).await.unwrap()[0];
    let http = reqwest::Client::new();
    let s = &stack.secrets;
    let create = format!("{}/v1/payouts", stack.payment_url);
    let body = json!({"amount_minor": 1_000_000_000_000_i64, "currency": "EUR", "beneficiary": "attacker IBAN"});
    for (what, credential) in [
        ("none", None),
        ("the executors'", Some(&s.executor)),
        ("the proxy's", Some(&s.proxy)),
        ("the lock clients'", Some(&s.lock_client)),
    ] {
        let mut request = http
            .post(&create)
            .header("Idempotency-Key", format!("steal-{what}"))
            .json(&body);
        if let Some(credential) = credential {
            request = request.bearer_auth(credential);
        }
        assert_eq!(
            request.send().await.unwrap().status(),
            401,
            "P0 with {what} credential"
        );
    }
    let token = 5;
    for (what, credential) in [
        ("none", None),
        ("the creators'", Some(&s.creator)),
        ("the lock clients'", Some(&s.lock_client)),
    ] {
        for url in [
            format!("{}/v1/payouts/{id}/claim", stack.payment_url),
            format!("{}/v1/payouts/{id}/submit", stack.proxy_url),
            format!("{}/v1/payouts/{id}/post", stack.payment_url),
            format!("{}/v1/payouts?claimable=true", stack.payment_url),
        ] {
            let method = if url.contains('?') {
                Method::GET
            } else {
                Method::POST
            };
            let mut request = http
                .request(method, &url)
                .header(lock_api::FENCING_TOKEN_HEADER, token.to_string())
                .header(lock_api::FENCING_PROOF_HEADER, stack.proof(id, token));
            if let Some(credential) = credential {
                request = request.bearer_auth(credential);
            }
            let answer = request.send().await.unwrap();
            assert_eq!(answer.status(), 401, "{url} with {what} credential");
        }
    }
    let lock = &stack.lock_servers[0].url;
    for credential in [None, Some(&s.executor), Some(&s.lock_admin)] {
        let mut request = http
            .post(format!("{lock}/v1/sessions"))
            .json(&json!({"owner_id": "intruder"}));
        if let Some(credential) = credential {
            request = request.bearer_auth(credential);
        }
        assert_eq!(
            request.send().await.unwrap().status(),
            401,
            "L1 with {credential:?}"
        );
    }
    // Reads: the readers' credential (a submission also rail-proxy's), nobody else's.
    for (what, credential) in [
        ("none", None),
        ("the executors'", Some(&s.executor)),
        ("the creators'", Some(&s.creator)),
        ("the lock clients'", Some(&s.lock_client)),
    ] {
        for path in [
            format!("/v1/payouts/{id}"),
            format!("/v1/payouts/{id}/submission"),
            "/v1/ledger/summary".to_owned(),
        ] {
            let mut request = http.get(format!("{}{path}", stack.payment_url));
            if let Some(credential) = credential {
                request = request.bearer_auth(credential);
            }
            let answer = request.send().await.unwrap();
            assert_eq!(answer.status(), 401, "{path} with {what} credential");
        }
    }
    let payout = stack.payout(id).await.unwrap();
    assert_eq!((payout.fence, payout.state), (0, PayoutState::Pending));
    assert_eq!(
        stack.last_payout_id().await,
        Some(id),
        "no payout was created"
    );
}

/// A lock-server caller presenting the lock clients' credential.
struct LockCaller {
    http: reqwest::Client,
    /// The lock-server's base URL.
    base: String,
}

impl LockCaller {
    /// One call of `path`: its status and JSON body (`null` for none).
    async fn call(&self, method: Method, path: String, body: Option<Value>) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.unwrap();
        let status = answer.status().as_u16();
        (status, answer.json::<Value>().await.unwrap_or_default())
    }
}

/// With `session` (the attacker's own, or a `guessed` one) and the victim's `token`, the
/// attacker can neither renew, release nor acquire payout:9, nor heartbeat a guessed session;
/// deleting it is allowed.
async fn assert_cannot_act_for_the_holder(
    lock: &LockCaller,
    session: &str,
    token: u64,
    guessed: bool,
) {
    let (status, body) = lock
        .call(
            Method::POST,
            "/v1/locks/payout:9/renew".into(),
            Some(json!({"session_id": session, "fencing_token": token})),
        )
        .await;
    assert!(
        matches!(status, 404 | 409),
        "renew as {session}: {status} {body}"
    );
    let (status, body) = lock
        .call(
            Method::POST,
            "/v1/locks/payout:9/release".into(),
            Some(json!({"session_id": session, "fencing_token": token})),
        )
        .await;
    assert_eq!(
        (status, body["released"].as_bool()),
        (200, Some(false)),
        "release as {session}"
    );
    let (status, _) = lock
        .call(
            Method::POST,
            "/v1/locks/payout:9/acquire".into(),
            Some(json!({"session_id": session, "ttl_ms": 30_000})),
        )
        .await;
    assert_ne!(status, 200, "acquire as {session}");
    if guessed {
        let (status, body) = lock
            .call(
                Method::POST,
                format!("/v1/sessions/{session}/heartbeat"),
                None,
            )
            .await;
        assert_eq!(status, 404, "heartbeat of a guessed session: {body}");
    }
    let (status, _) = lock
        .call(Method::DELETE, format!("/v1/sessions/{session}"), None)
        .await;
    assert_eq!(
        status, 204,
        "deleting one's own or an unknown session is allowed"
    );
}

/// A4: a second client that knows everything L7 shows (and holds the lock clients'
/// credential) can neither renew, release, heartbeat nor delete another's session or lock.
#[tokio::test(flavor = "multi_thread")]
async fn a4_what_l7_shows_does_not_let_anyone_act_for_the_holder() {
    let stack = stack().await;
    let lock = LockCaller {
        http: harness::stack::lock_http(&stack.secrets.lock_client).unwrap(),
        base: stack.lock_servers[0].url.clone(),
    };
    let (_, victim) = lock
        .call(
            Method::POST,
            "/v1/sessions".into(),
            Some(json!({"owner_id": "victim", "ttl_ms": 30_000})),
        )
        .await;
    let victim = victim["session_id"].as_str().unwrap().to_owned();
    let (status, grant) = lock
        .call(
            Method::POST,
            "/v1/locks/payout:9/acquire".into(),
            Some(json!({"session_id": victim, "ttl_ms": 30_000})),
        )
        .await;
    assert_eq!(status, 200, "{grant}");
    let token = grant["fencing_token"].as_u64().unwrap();
    // What the attacker sees.
    let (status, shown) = lock
        .call(Method::GET, "/v1/locks/payout:9".into(), None)
        .await;
    assert_eq!(status, 200);
    assert!(
        !shown.to_string().contains(&victim),
        "L7 shows the session id: {shown}"
    );
    let (_, attacker) = lock
        .call(
            Method::POST,
            "/v1/sessions".into(),
            Some(json!({"owner_id": "victim", "ttl_ms": 30_000})),
        )
        .await;
    let attacker = attacker["session_id"].as_str().unwrap().to_owned();
    let guessed = uuid::Uuid::new_v4().to_string();
    assert_cannot_act_for_the_holder(&lock, &attacker, token, false).await;
    assert_cannot_act_for_the_holder(&lock, &guessed, token, true).await;
    // The victim still holds its lock with its token, and its session lives.
    let (status, after) = lock
        .call(Method::GET, "/v1/locks/payout:9".into(), None)
        .await;
    assert_eq!(
        (status, after["fencing_token"].as_u64()),
        (200, Some(token)),
        "{after}"
    );
    let (status, _) = lock
        .call(
            Method::POST,
            format!("/v1/sessions/{victim}/heartbeat"),
            None,
        )
        .await;
    assert_eq!(status, 200);
}

/// A8: with both lock-server replicas down for 8 s, an executor backs off and throttles its
/// warnings (it wrote ~1,300 WARN lines a second), then settles everything once they return.
#[tokio::test(flavor = "multi_thread")]
async fn a8_no_retry_or_log_storm_while_the_lock_service_is_down() {
    let mut stack = stack().await;
    stack.start_executor("executor-1", &[]).await.unwrap();
    let warm = stack.create_payouts("warm", 2).await.unwrap();
    stack.wait_terminal(&warm, SETTLE_DEADLINE).await.unwrap();
    let warnings = |stack: &Stack| {
        stack.executor_logs()[0]
            .1
            .lines()
            .filter(|l| l.contains("\"level\":\"WARN\""))
            .count()
    };
    let before = warnings(&stack);
    for server in &stack.lock_servers {
        server.process.signal(nix::sys::signal::Signal::SIGKILL);
    }
    let pending = stack.create_payouts("outage", 20).await.unwrap();
    let outage = Duration::from_secs(8);
    let started = Instant::now();
    test_support::poll_until(
        "the outage to last 8 s",
        outage + Duration::from_secs(1),
        || async { (started.elapsed() >= outage).then_some(()) },
    )
    .await;
    let during = warnings(&stack) - before;
    // At most one line per 5 s per kind of warning (a handful of kinds), not thousands.
    assert!(during <= 40, "{during} WARN lines in 8 s of outage");
    for i in 0..stack.lock_servers.len() {
        stack.restart_lock_server(i).await.unwrap();
    }
    let settled = stack
        .wait_terminal(&pending, SETTLE_DEADLINE)
        .await
        .unwrap();
    assert!(settled.iter().all(|p| p.state == PayoutState::Settled));
}

/// A5: 50 parallel P3s of one finished payout all answer 200, and a read of another payout
/// in that window is not starved of pooled connections (it took ~2 s, a pool timeout).
#[tokio::test(flavor = "multi_thread")]
async fn a5_parallel_posts_do_not_starve_the_pool() {
    let mut stack = stack().await;
    let ids = stack.create_payouts("p3", 2).await.unwrap();
    stack.start_executor("executor-1", &[]).await.unwrap();
    let done = stack.wait_terminal(&ids, SETTLE_DEADLINE).await.unwrap();
    let (payout, other) = (&done[0], &done[1]);
    // All 50 posts and the read leave together: more posts than pooled connections.
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(51));
    let posts: Vec<_> = (0..50)
        .map(|_| {
            let request = stack.fenced_request(
                Method::POST,
                &format!("{}/v1/payouts/{}/post", stack.payment_url, payout.payout_id),
                payout.payout_id,
                payout.fence,
            );
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                request.send().await.map(|r| r.status().as_u16())
            })
        })
        .collect();
    start.wait().await;
    let started = Instant::now();
    let read = stack.payout(other.payout_id).await.unwrap();
    let read_took = started.elapsed();
    assert_eq!(read.payout_id, other.payout_id);
    let mut statuses = Vec::new();
    for post in posts {
        statuses.push(post.await.unwrap().unwrap());
    }
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    // A pool timeout is 2 s; a read that waited for one was starved.
    assert!(
        read_took < Duration::from_secs(1),
        "unrelated GET took {read_took:?}"
    );
}

/// A6: made-up HTTP methods (any token is a valid method) do not add metrics series.
#[tokio::test(flavor = "multi_thread")]
async fn a6_made_up_methods_leave_metrics_bounded() {
    let stack = stack().await;
    let http = reqwest::Client::new();
    let targets = [
        stack.lock_servers[0].url.clone(),
        stack.payment_url.clone(),
        stack.proxy_url.clone(),
        stack.rail_url.clone(),
    ];
    let scrape = |url: &str| {
        let request = http.get(format!("{url}/metrics"));
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    for url in &targets {
        let before = scrape(url).await;
        for i in 0..5_000 {
            let method = Method::from_bytes(format!("M{i}X").as_bytes()).unwrap();
            let path = if i % 2 == 0 {
                "/v1/sessions".to_owned()
            } else {
                format!("/nope/{i}")
            };
            let status = http
                .request(method, format!("{url}{path}"))
                .send()
                .await
                .unwrap()
                .status();
            assert!(status.is_client_error(), "{url}{path}: {status}");
        }
        let after = scrape(url).await;
        assert!(
            !after.contains("M42X"),
            "{url}: a made-up method is a label"
        );
        assert!(
            !after.contains("/nope/"),
            "{url}: an unmatched path is a label"
        );
        assert!(
            after.len() < before.len() + 16 * 1024,
            "{url}: /metrics grew from {} to {} bytes",
            before.len(),
            after.len()
        );
    }
}

/// A7: idle and half-sent connections are closed within the header-read timeout, and past
/// the connection cap a new connection is closed at once (and counted), while the server
/// keeps answering.
#[tokio::test(flavor = "multi_thread")]
async fn a7_idle_connections_are_closed_and_capped() {
    let db = test_support::fresh_database().await;
    let logs = tempfile::tempdir().unwrap();
    const TIMEOUT: Duration = Duration::from_secs(2);
    let server = start_lock_server(
        "lock-server-limits",
        &db.url,
        &[
            ("HTTP_HEADER_READ_TIMEOUT", "2s".to_owned()),
            ("HTTP_CONNECTIONS_MAX", "210".to_owned()),
        ],
        logs.path(),
    )
    .await
    .unwrap();
    let addr = server.url.trim_start_matches("http://").to_owned();
    let opened = Instant::now();
    let mut connections = Vec::new();
    for i in 0..200 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        if i % 2 == 1 {
            stream
                .write_all(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: app")
                .await
                .unwrap();
        }
        connections.push(stream);
    }
    // Past the cap (210, with 200 held): of 20 more connections, all held open, 10 are
    // answered and 10 are closed without an answer.
    let (mut refused, mut extra) = (0, Vec::new());
    for _ in 0..20 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        let _ = stream
            .write_all(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let mut buf = [0_u8; 64];
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(TIMEOUT, stream.read(&mut buf)).await {
            refused += 1;
        }
        extra.push(stream);
    }
    assert!(
        refused == 10,
        "{refused} of 20 connections past the cap were refused, not 10; server log:\n{}",
        server.process.log()
    );
    for (i, stream) in connections.iter_mut().enumerate() {
        let mut buf = [0_u8; 512];
        let closed = tokio::time::timeout(TIMEOUT * 3, async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "connection {i} still open after {:?}",
            opened.elapsed()
        );
    }
    assert!(
        opened.elapsed() < TIMEOUT * 3,
        "closing took {:?}",
        opened.elapsed()
    );
    let metrics = reqwest::get(format!("{}/metrics", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused_total = harness::metrics::Metrics::parse(&metrics)
        .unwrap()
        .sum("http_connections_refused_total", &[])
        .unwrap();
    assert!(
        refused_total >= refused as f64,
        "{refused_total} < {refused}"
    );
}

/// A9 (parser): answers written by the HTTP parser itself are JSON errors too, on every
/// served port, the executor's metrics port included.
#[tokio::test(flavor = "multi_thread")]
async fn a9_parser_level_errors_are_json() {
    let mut stack = stack().await;
    stack.start_executor("executor-1", &[]).await.unwrap();
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000));
    let many_headers = format!(
        "GET /health/live HTTP/1.1\r\nHost: x\r\n{}\r\n",
        (0..120)
            .map(|i| format!("X-H{i}: v\r\n"))
            .collect::<String>()
    );
    let cases: [(&str, Vec<u8>, &str, &str); 4] = [
        ("URI too long", long_uri.into_bytes(), "414", "URI_TOO_LONG"),
        (
            "too many headers",
            many_headers.into_bytes(),
            "431",
            "HEADERS_TOO_LARGE",
        ),
        (
            "NUL in the path",
            b"GET /v1/payouts/\0 HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            "400",
            "INVALID_ARGUMENT",
        ),
        (
            "malformed method",
            b"GE(T / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            "400",
            "INVALID_ARGUMENT",
        ),
    ];
    for url in [
        &stack.lock_servers[0].url,
        &stack.payment_url,
        &stack.proxy_url,
        &stack.rail_url,
        &stack.executors[0].url,
    ] {
        for (what, request, status, code) in &cases {
            let answer = raw_exchange(url, request, Duration::from_secs(5)).await;
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status} ")),
                "{url} {what}: {answer:?}"
            );
            assert!(
                answer.contains("content-type: application/json"),
                "{url} {what}: {answer:?}"
            );
            let body = body_of(&answer);
            assert_eq!(body["code"], *code, "{url} {what}: {body}");
            assert!(
                body["message"].as_str().unwrap().starts_with("request: "),
                "{body}"
            );
        }
    }
    // And the executor's routes: an unknown path, a method its routes do not take.
    let metrics_port = &stack.executors[0].url;
    for (what, request, status, code) in [
        (
            "unknown path",
            &b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            "404",
            "NOT_FOUND",
        ),
        (
            "wrong method",
            &b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"[..],
            "405",
            "METHOD_NOT_ALLOWED",
        ),
    ] {
        let answer = raw_exchange(metrics_port, request, Duration::from_secs(5)).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{what}: {answer:?}"
        );
        assert_eq!(body_of(&answer)["code"], code, "{what}: {answer:?}");
    }
}

/// Sends `request` (case `what`): it is refused with `status` and a message that starts by
/// naming `field`.
async fn assert_refused_naming(
    what: &str,
    request: reqwest::RequestBuilder,
    status: u16,
    field: &str,
) {
    let response = request.send().await.unwrap();
    let got = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or_default();
    assert_eq!(got, status, "{what}: {body}");
    let message = body["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.starts_with(&format!("{field}:")),
        "{what}: {message}"
    );
}

/// Invisible or format characters a payee's name once took are refused at `create`, each by
/// its own property.
async fn assert_invisible_beneficiaries_refused(
    stack: &Stack,
    http: &reqwest::Client,
    create: &str,
) {
    for (what, beneficiary) in [
        ("zero-width-only", "\u{200B}"),
        ("bidi-override", "Alice \u{202E}evil"),
        ("line-separator", "Alice\u{2028}Bob"),
        ("paragraph-separator", "Alice\u{2029}Bob"),
        ("tag-characters", "Alice\u{E0068}\u{E0069}"),
        ("variation-selector", "Alice\u{FE0F}"),
        ("hangul-filler", "\u{3164}"),
        ("hangul-choseong-filler", "Al\u{115F}ice"),
        ("combining-grapheme-joiner", "Al\u{034F}ice"),
        ("interlinear-annotation", "Al\u{FFF9}ice"),
        ("deprecated-format", "Al\u{206A}ice"),
        ("mongolian-variation-selector", "Al\u{180B}ice"),
        ("private-use", "Al\u{E000}ice"),
        ("unassigned", "Al\u{0378}ice"),
    ] {
        let request = http
            .post(create)
            .bearer_auth(&stack.secrets.creator)
            .header("Idempotency-Key", what)
            .json(&json!({"amount_minor": 5, "currency": "EUR", "beneficiary": beneficiary}));
        assert_refused_naming(what, request, 400, "beneficiary").await;
    }
}

/// A9 (hygiene): malformed JSON names `body`; duplicated security headers, signed or padded
/// numbers, an unknown fault field and invisible or reordering characters are refused.
#[tokio::test(flavor = "multi_thread")]
async fn a9_bad_input_is_refused_by_name() {
    let stack = stack().await;
    let http = reqwest::Client::new();
    let ids = stack.create_payouts("hygiene", 1).await.unwrap();
    let id = ids[0];
    let create = format!("{}/v1/payouts", stack.payment_url);
    let request = http
        .post(&create)
        .bearer_auth(&stack.secrets.creator)
        .header("Idempotency-Key", "m1")
        .header("Content-Type", "application/json")
        .body(r#"{"amount_minor": 5, "currency": }"#);
    assert_refused_naming("malformed JSON", request, 400, "body").await;
    assert_invisible_beneficiaries_refused(&stack, &http, &create).await;
    let request = http
        .post(&create)
        .bearer_auth(&stack.secrets.creator)
        .header("Idempotency-Key", "a")
        .header("Idempotency-Key", "b")
        .json(&json!({"amount_minor": 5, "currency": "EUR", "beneficiary": "Bob"}));
    assert_refused_naming("two Idempotency-Keys", request, 400, "Idempotency-Key").await;
    let claim = format!("{}/v1/payouts/{id}/claim", stack.payment_url);
    let request = http
        .post(&claim)
        .bearer_auth(&stack.secrets.executor)
        .header("X-Fencing-Token", "3")
        .header("X-Fencing-Token", "4");
    assert_refused_naming("two X-Fencing-Tokens", request, 400, "X-Fencing-Token").await;
    let request = http
        .post(&claim)
        .bearer_auth(&stack.secrets.executor)
        .header("X-Fencing-Token", "+3");
    assert_refused_naming("a signed token", request, 400, "X-Fencing-Token").await;
    let request = http
        .get(format!("{}/v1/payouts/+{id}", stack.payment_url))
        .bearer_auth(&stack.secrets.reader);
    assert_refused_naming("a signed payout id", request, 400, "payout_id").await;
    let request = http
        .post(format!("{}/v1/payouts/{id}/submissions", stack.payment_url))
        .header("X-Fencing-Token", "3")
        .header("Authorization", "Bearer a")
        .header("Authorization", "Bearer b");
    assert_refused_naming("two Authorization headers", request, 400, "Authorization").await;
    let request = http
        .post(format!("{}/v1/faults", stack.rail_url))
        .bearer_auth(stack.rail_admin_token())
        .json(&json!({"fault": {"kind": "reject", "extra": 1}}));
    assert_refused_naming("an unknown fault field", request, 400, "fault").await;
    // Nothing was written by any refused request.
    assert_eq!(stack.payout(id).await.unwrap().state, PayoutState::Pending);
}

/// A fenced write with an explicit token and proof, as the executor's credential sends it:
/// the status and the error code, if any.
async fn fenced_write(stack: &Stack, url: &str, token: u64, proof: &str) -> (u16, Option<String>) {
    let response = reqwest::Client::new()
        .post(url)
        .bearer_auth(&stack.secrets.executor)
        .header(lock_api::FENCING_TOKEN_HEADER, token.to_string())
        .header(lock_api::FENCING_PROOF_HEADER, proof)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or_default();
    (status, body["code"].as_str().map(str::to_owned))
}

/// Runs one of PostgreSQL's client tools against `url`.
fn pg_tool(tool: &str, args: &[&str], url: &str) {
    let bin = test_support::pg::postgres_bin_dir().unwrap().join(tool);
    let out = std::process::Command::new(&bin)
        .args(args)
        .arg(format!("--dbname={url}"))
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    assert!(out.status.success(), "{tool}: {out:?}");
}

/// A10: a lock store restored from a backup issues again the tokens it issued after the
/// backup. The proof names its grant, so the second holder of a token is fenced out at the
/// resource and the proxy, while the grant that claimed still writes; the rail sees the payout
/// once. Restored under running lock-servers.
#[tokio::test(flavor = "multi_thread")]
async fn a10_a_token_issued_twice_by_a_restored_lock_store_is_fenced_out() {
    let stack = stack().await;
    let lockdb = stack
        .lockdb_url
        .clone()
        .expect("the attack suite runs the lock store on PostgreSQL");
    let id = stack.create_payouts("restore", 1).await.unwrap()[0];
    let key = payment_api::payout_lock_key(id);
    let backup = tempfile::Builder::new()
        .prefix("lockdb-")
        .tempfile()
        .unwrap();
    let backup_path = backup.path().to_str().unwrap().to_owned();
    pg_tool(
        "pg_dump",
        &["--format=custom", "--file", &backup_path],
        &lockdb,
    );

    let client = stack.lock_client_builder().build().unwrap();
    let policy = lock_client::AcquirePolicy::DEFAULT;
    let ttl = Duration::from_secs(30);
    let a = client.open_session("holder-a").await.unwrap();
    let first = a.acquire(&key, ttl, &policy).await.unwrap().unwrap();
    let (token, proof_a) = (
        first.fencing_token().0,
        first.fence_proof().unwrap().to_owned(),
    );
    let claim = format!("{}/v1/payouts/{id}/claim", stack.payment_url);
    assert_eq!(
        fenced_write(&stack, &claim, token, &proof_a).await,
        (200, None)
    );

    // The lock store goes back to before that grant, under the running replicas.
    pg_tool(
        "pg_restore",
        &["--clean", "--if-exists", &backup_path],
        &lockdb,
    );
    let b = client.open_session("holder-b").await.unwrap();
    let second = b.acquire(&key, ttl, &policy).await.unwrap().unwrap();
    assert_eq!(
        second.fencing_token().0,
        token,
        "the restored store issued the same token again"
    );
    let proof_b = second.fence_proof().unwrap().to_owned();
    assert_ne!(proof_b, proof_a, "two grants of one token: two proofs");

    let fenced = (409, Some("FENCED_OUT".to_owned()));
    assert_eq!(fenced_write(&stack, &claim, token, &proof_b).await, fenced);
    let submit = format!("{}/v1/payouts/{id}/submit", stack.proxy_url);
    assert_eq!(fenced_write(&stack, &submit, token, &proof_b).await, fenced);
    // The grant that claimed is the holder: its submit goes through, once.
    assert_eq!(fenced_write(&stack, &submit, token, &proof_a).await.0, 200);
    let received = stack.rail_received(id).await.unwrap();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0].transfer.presented_token, token as i64);
    drop((first, second));
    b.close().await;
    a.close().await;
    client.close();
}
