//! The attack suite (issue 11): one test per finding of an attacker on the same network,
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

/// A1: payouts whose fence no issued token can reach (written straight into paydb, as a
/// forged claim did before proofs) do not stop new payouts from settling, and the executor
/// does not spin on them.
#[tokio::test(flavor = "multi_thread")]
async fn a1_poisoned_payouts_do_not_stop_new_ones() {
    let mut stack = stack().await;
    let poisoned = stack.create_payouts("poison", 50).await.unwrap();
    let mut db = sqlx::PgConnection::connect(stack.paydb_url.as_deref().unwrap())
        .await
        .unwrap();
    sqlx::query("UPDATE payouts SET fence = $1, state = 'CLAIMED' WHERE payout_id = ANY($2)")
        .bind(i64::MAX)
        .bind(&poisoned)
        .execute(&mut db)
        .await
        .unwrap();
    let executor_url = stack
        .start_executor("executor-1", &[])
        .await
        .unwrap()
        .url
        .clone();
    let fresh = stack.create_payouts("fresh", 5).await.unwrap();
    let settled = stack.wait_terminal(&fresh, SETTLE_DEADLINE).await.unwrap();
    assert!(settled.iter().all(|p| p.state == PayoutState::Settled));
    // Each poisoned payout is tried, fenced and then skipped: no spinning.
    let fenced = stack
        .metric(
            &executor_url,
            "payout_execute_seconds_count",
            &[("outcome", "fenced")],
        )
        .await
        .unwrap();
    assert!(
        (50.0..=100.0).contains(&fenced),
        "fenced attempts on 50 poisoned payouts: {fenced}"
    );
    let quarantined = stack
        .metric(&executor_url, "executor_quarantined_payouts", &[])
        .await
        .unwrap();
    assert_eq!(quarantined, 50.0);
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
    let posts: Vec<_> = (0..50)
        .map(|_| {
            let request = stack.fenced_request(
                Method::POST,
                &format!("{}/v1/payouts/{}/post", stack.payment_url, payout.payout_id),
                payout.payout_id,
                payout.fence,
            );
            tokio::spawn(async move { request.send().await.map(|r| r.status().as_u16()) })
        })
        .collect();
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
    for url in &targets {
        let before = http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
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
        let after = http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
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

/// A9 (parser): answers written by the HTTP parser itself are JSON errors too.
#[tokio::test(flavor = "multi_thread")]
async fn a9_parser_level_errors_are_json() {
    let stack = stack().await;
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
}

/// A9 (hygiene): malformed JSON names `body`; duplicated security headers, signed or padded
/// numbers, an unknown fault field and invisible or reordering characters are refused.
#[tokio::test(flavor = "multi_thread")]
async fn a9_bad_input_is_refused_by_name() {
    let stack = stack().await;
    let http = reqwest::Client::new();
    let ids = stack.create_payouts("hygiene", 1).await.unwrap();
    let id = ids[0];
    let expect = |what: &'static str, status: u16, field: &'static str| {
        move |(got, body): (u16, Value)| {
            assert_eq!(got, status, "{what}: {body}");
            let message = body["message"].as_str().unwrap_or_default().to_owned();
            assert!(
                message.starts_with(&format!("{field}:")),
                "{what}: {message}"
            );
        }
    };
    let send = |request: reqwest::RequestBuilder| async move {
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap_or_default())
    };
    let create = format!("{}/v1/payouts", stack.payment_url);
    expect("malformed JSON", 400, "body")(
        send(
            http.post(&create)
                .header("Idempotency-Key", "m1")
                .header("Content-Type", "application/json")
                .body(r#"{"amount_minor": 5, "currency": }"#),
        )
        .await,
    );
    for (what, beneficiary) in [
        ("zero-width-only", "\u{200B}"),
        ("bidi-override", "Alice \u{202E}evil"),
    ] {
        expect(what, 400, "beneficiary")(
            send(
                http.post(&create).header("Idempotency-Key", what).json(
                    &json!({"amount_minor": 5, "currency": "EUR", "beneficiary": beneficiary}),
                ),
            )
            .await,
        );
    }
    expect("two Idempotency-Keys", 400, "Idempotency-Key")(
        send(
            http.post(&create)
                .header("Idempotency-Key", "a")
                .header("Idempotency-Key", "b")
                .json(&json!({"amount_minor": 5, "currency": "EUR", "beneficiary": "Bob"})),
        )
        .await,
    );
    let claim = format!("{}/v1/payouts/{id}/claim", stack.payment_url);
    expect("two X-Fencing-Tokens", 400, "X-Fencing-Token")(
        send(
            http.post(&claim)
                .header("X-Fencing-Token", "3")
                .header("X-Fencing-Token", "4"),
        )
        .await,
    );
    expect("a signed token", 400, "X-Fencing-Token")(
        send(http.post(&claim).header("X-Fencing-Token", "+3")).await,
    );
    expect("a signed payout id", 400, "payout_id")(
        send(http.get(format!("{}/v1/payouts/+{id}", stack.payment_url))).await,
    );
    expect("two Authorization headers", 400, "Authorization")(
        send(
            http.post(format!("{}/v1/payouts/{id}/submissions", stack.payment_url))
                .header("X-Fencing-Token", "3")
                .header("Authorization", "Bearer a")
                .header("Authorization", "Bearer b"),
        )
        .await,
    );
    expect("an unknown fault field", 400, "fault")(
        send(
            http.post(format!("{}/v1/faults", stack.rail_url))
                .bearer_auth(stack.rail_admin_token())
                .json(&json!({"fault": {"kind": "reject", "extra": 1}})),
        )
        .await,
    );
    // Nothing was written by any refused request.
    assert_eq!(stack.payout(id).await.unwrap().state, PayoutState::Pending);
}
