//! Table-driven bad requests: documented 4xx with a JSON error naming the field, never a
//! 500, nothing written.

use reqwest::Method;
use test_support::bad_input::{BadRequest, check_all};

use crate::support::{
    CREATOR_TOKEN, EXECUTOR_TOKEN, PROXY_TOKEN, READER_TOKEN, create, proof, start,
};

/// Gives `case` the credential of the role its endpoint names (unless it sets one) and, when
/// it presents a numeric token for a numeric payout, that token's genuine proof: each case
/// is then refused for the one mistake it is about.
fn as_its_role(case: BadRequest) -> BadRequest {
    let listing = case.path == "/v1/payouts" || case.path.starts_with("/v1/payouts?");
    let role = if case.method == Method::GET && !listing {
        READER_TOKEN
    } else if case.path.contains("submission") {
        PROXY_TOKEN
    } else if case.path.starts_with("/v1/payouts")
        && case.path.split('/').count() == 3
        && case.method == Method::POST
    {
        CREATOR_TOKEN
    } else {
        EXECUTOR_TOKEN
    };
    let token = case
        .headers
        .iter()
        .find(|(name, _)| *name == "x-fencing-token")
        .and_then(|(_, value)| value.parse::<u64>().ok());
    let id = case
        .path
        .split('/')
        .nth(3)
        .and_then(|s| s.parse::<i64>().ok());
    let mut case = if case
        .headers
        .iter()
        .any(|(name, _)| *name == "authorization")
    {
        case
    } else {
        case.header("authorization", format!("Bearer {role}"))
    };
    if let (Some(token), Some(id)) = (token, id) {
        if !case
            .headers
            .iter()
            .any(|(name, _)| *name == "x-fencing-proof")
        {
            case = case.header("x-fencing-proof", proof(id, token));
        }
    }
    case
}

async fn counts(url: &str) -> (i64, i64, i64) {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    sqlx::query_as("SELECT (SELECT count(*) FROM payouts), (SELECT count(*) FROM rail_submission), (SELECT count(*) FROM ledger_entries)")
        .fetch_one(&pool)
        .await
        .unwrap()
}

const INVALID: &str = "INVALID_ARGUMENT";
const OK_BODY: &str = r#"{"amount_minor":5,"currency":"EUR","beneficiary":"B"}"#;

/// A create-payout request with `body` and an idempotency key.
fn payout(body: &str) -> BadRequest {
    BadRequest::new("create", Method::POST, "/v1/payouts", body).header("idempotency-key", "k-1")
}

/// A POST to `/v1/payouts/{id}/{action}` with an empty body.
fn payout_action(name: &'static str, id: i64, action: &str) -> BadRequest {
    BadRequest::new(name, Method::POST, format!("/v1/payouts/{id}/{action}"), "")
}

/// Wrong credentials or proofs for creating, claiming and re-fencing payout `id`.
fn credential_cases(id: i64) -> Vec<BadRequest> {
    let exec = format!("Bearer {EXECUTOR_TOKEN}");
    vec![
        payout(OK_BODY)
            .header("authorization", exec.clone())
            .expect(401, "UNAUTHENTICATED", "PAYMENT_CREATOR_TOKEN"),
        payout_action("claim with the creator's credential", id, "claim")
            .header("x-fencing-token", "1")
            .header("authorization", format!("Bearer {CREATOR_TOKEN}"))
            .expect(401, "UNAUTHENTICATED", "PAYOUT_EXECUTOR_TOKEN"),
        payout_action("claim without a proof", id, "claim")
            .header("x-fencing-token", "1")
            .header("x-fencing-proof", "")
            .expect(403, "PROOF_INVALID", "X-Fencing-Proof"),
        payout_action("claim with another payout's proof", id, "claim")
            .header("x-fencing-token", "1")
            .header("x-fencing-proof", proof(id + 1, 1))
            .expect(403, "PROOF_INVALID", "does not sign"),
        payout_action("re-fence with the executor's credential", id, "refence")
            .header("x-fencing-token", "1")
            .header("authorization", exec)
            .expect(401, "UNAUTHENTICATED", "PAYMENT_ADMIN_TOKEN"),
    ]
}

/// Malformed create-payout requests: headers, body fields, framing, idempotency reuse.
fn create_cases() -> Vec<BadRequest> {
    vec![
        payout(OK_BODY)
            .without("idempotency-key")
            .expect(400, INVALID, "Idempotency-Key"),
        payout(r#"{"amount_minor":0,"currency":"EUR","beneficiary":"B"}"#).expect(
            400,
            INVALID,
            "amount_minor",
        ),
        payout(r#"{"amount_minor":-3,"currency":"EUR","beneficiary":"B"}"#).expect(
            400,
            INVALID,
            "amount_minor",
        ),
        payout(r#"{"amount_minor":"5","currency":"EUR","beneficiary":"B"}"#).expect(
            400,
            INVALID,
            "amount_minor",
        ),
        payout(r#"{"amount_minor":5,"currency":"eur","beneficiary":"B"}"#)
            .expect(400, INVALID, "currency"),
        payout(r#"{"amount_minor":5,"currency":"EURO","beneficiary":"B"}"#)
            .expect(400, INVALID, "currency"),
        payout(r#"{"amount_minor":5,"currency":"EUR","beneficiary":" "}"#).expect(
            400,
            INVALID,
            "beneficiary",
        ),
        payout(r#"{"amount_minor":5,"currency":"EUR","beneficiary":"B","memo":"x"}"#)
            .expect(400, INVALID, "memo"),
        payout(r#"{"amount_minor":5,"#).expect(400, INVALID, "EOF"),
        payout(OK_BODY).without("content-type").expect(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            "Content-Type",
        ),
        payout("")
            .body(vec![b' '; 17 * 1024])
            .expect(413, "PAYLOAD_TOO_LARGE", "bytes"),
        BadRequest::new(
            "idempotency key reused with another body",
            Method::POST,
            "/v1/payouts",
            r#"{"amount_minor":9,"currency":"EUR","beneficiary":"Ada"}"#,
        )
        .header("idempotency-key", "existing")
        .expect(400, INVALID, "Idempotency-Key"),
    ]
}

/// Claims of payout `id` (or of bad or unknown payouts) with missing or malformed tokens.
fn claim_cases(id: i64) -> Vec<BadRequest> {
    vec![
        payout_action("claim without token", id, "claim").expect(400, INVALID, "X-Fencing-Token"),
        payout_action("claim with a word for a token", id, "claim")
            .header("x-fencing-token", "abc")
            .expect(400, INVALID, "X-Fencing-Token"),
        payout_action("claim with token 0", id, "claim")
            .header("x-fencing-token", "0")
            .expect(400, INVALID, "X-Fencing-Token"),
        payout_action("claim with a token above bigint", id, "claim")
            .header("x-fencing-token", "9223372036854775808")
            .expect(400, INVALID, "X-Fencing-Token"),
        BadRequest::new(
            "claim a non-numeric payout",
            Method::POST,
            "/v1/payouts/x/claim",
            "",
        )
        .header("x-fencing-token", "1")
        .expect(400, INVALID, "payout_id"),
        BadRequest::new(
            "claim an unknown payout",
            Method::POST,
            "/v1/payouts/999999/claim",
            "",
        )
        .header("x-fencing-token", "1")
        .expect(404, "PAYOUT_UNKNOWN", "999999"),
    ]
}

/// The rail proxy's endpoints for payout `id`: missing credential, bad outcomes.
fn submission_cases(id: i64) -> Vec<BadRequest> {
    let bearer = format!("Bearer {PROXY_TOKEN}");
    vec![
        payout_action("reserve without the proxy's token", id, "submissions")
            .header("x-fencing-token", "1")
            .header("authorization", "")
            .expect(401, "UNAUTHENTICATED", "bearer"),
        BadRequest::new(
            "record IN_FLIGHT as an outcome",
            Method::POST,
            format!("/v1/payouts/{id}/submission/outcome"),
            r#"{"outcome":"IN_FLIGHT"}"#,
        )
        .header("x-fencing-token", "1")
        .header("authorization", bearer.clone())
        .expect(400, INVALID, "outcome"),
        BadRequest::new(
            "record an unknown outcome",
            Method::POST,
            format!("/v1/payouts/{id}/submission/outcome"),
            r#"{"outcome":"MAYBE"}"#,
        )
        .header("x-fencing-token", "1")
        .header("authorization", bearer)
        .expect(400, INVALID, "outcome"),
    ]
}

/// Reads and listings with the wrong credential or malformed parameters.
fn read_cases(id: i64) -> Vec<BadRequest> {
    let get = Method::GET;
    vec![
        BadRequest::new(
            "read without a credential",
            get.clone(),
            format!("/v1/payouts/{id}"),
            "",
        )
        .header("authorization", "")
        .expect(401, "UNAUTHENTICATED", "PAYMENT_READER_TOKEN"),
        BadRequest::new(
            "read with the executors' credential",
            get.clone(),
            format!("/v1/payouts/{id}/submission"),
            "",
        )
        .header("authorization", format!("Bearer {EXECUTOR_TOKEN}"))
        .expect(401, "UNAUTHENTICATED", "PAYMENT_READER_TOKEN"),
        BadRequest::new(
            "the ledger with the creators' credential",
            get.clone(),
            "/v1/ledger/summary",
            "",
        )
        .header("authorization", format!("Bearer {CREATOR_TOKEN}"))
        .expect(401, "UNAUTHENTICATED", "PAYMENT_READER_TOKEN"),
        BadRequest::new("read payout abc", get.clone(), "/v1/payouts/abc", "").expect(
            400,
            INVALID,
            "payout_id",
        ),
        BadRequest::new("list without claimable", get.clone(), "/v1/payouts", "").expect(
            400,
            INVALID,
            "claimable",
        ),
        BadRequest::new(
            "list limit 0",
            get.clone(),
            "/v1/payouts?claimable=true&limit=0",
            "",
        )
        .expect(400, INVALID, "limit"),
        BadRequest::new(
            "list with a stray parameter",
            get,
            "/v1/payouts?claimable=true&colour=red",
            "",
        )
        .expect(400, INVALID, "colour"),
    ]
}

/// An offer request named `name` with `body`.
fn offer(name: &'static str, body: &str) -> BadRequest {
    BadRequest::new(name, Method::POST, "/v1/offers", body)
}

/// Offer requests with a bad executor, limit, duration, skip list or stray field.
fn offer_cases() -> Vec<BadRequest> {
    let too_many_skips = format!(
        r#"{{"executor":"e1","limit":5,"offer_ms":1000,"skip":[{}]}}"#,
        vec!["1"; 1_001].join(",")
    );
    vec![
        offer(
            "offer to nobody",
            r#"{"executor":"","limit":5,"offer_ms":1000}"#,
        )
        .expect(400, INVALID, "executor"),
        offer(
            "offer to a name with a control character",
            "{\"executor\":\"exec\\u0007utor\",\"limit\":5,\"offer_ms\":1000}",
        )
        .expect(400, INVALID, "executor"),
        offer("offer skipping too many payouts", too_many_skips.leak())
            .expect(400, INVALID, "skip"),
        offer(
            "offer 0 payouts",
            r#"{"executor":"e1","limit":0,"offer_ms":1000}"#,
        )
        .expect(400, INVALID, "limit"),
        offer(
            "offer for 50 ms",
            r#"{"executor":"e1","limit":5,"offer_ms":50}"#,
        )
        .expect(400, INVALID, "offer_ms"),
        offer(
            "offer for longer than a lease can be",
            r#"{"executor":"e1","limit":5,"offer_ms":60001}"#,
        )
        .expect(400, INVALID, "offer_ms"),
        offer(
            "offer with a stray field",
            r#"{"executor":"e1","limit":5,"offer_ms":1000,"colour":"red"}"#,
        )
        .expect(400, INVALID, "colour"),
    ]
}

/// Unknown payouts and routes, and a method a route does not take.
fn routing_cases() -> Vec<BadRequest> {
    vec![
        BadRequest::new(
            "post an unknown payout",
            Method::POST,
            "/v1/payouts/424242/post",
            "",
        )
        .header("x-fencing-token", "1")
        .expect(404, "PAYOUT_UNKNOWN", "424242"),
        BadRequest::new("wrong method", Method::DELETE, "/v1/payouts", "").expect(
            405,
            "METHOD_NOT_ALLOWED",
            "Method",
        ),
        BadRequest::new("unknown route", Method::GET, "/v1/nothing", "").expect(
            404,
            "NOT_FOUND",
            "route",
        ),
    ]
}

#[tokio::test]
async fn bad_requests_get_documented_json_errors_and_write_nothing() {
    let service = start().await;
    let id = create(&service.base, "existing").await;
    let before = counts(&service.db_url).await;
    let cases: Vec<BadRequest> = [
        credential_cases(id),
        create_cases(),
        claim_cases(id),
        submission_cases(id),
        read_cases(id),
        offer_cases(),
        routing_cases(),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(cases.len() >= 10);
    let cases: Vec<BadRequest> = cases.into_iter().map(as_its_role).collect();
    let failures = check_all(&service.base, &cases).await;
    assert!(
        failures.is_empty(),
        "bad-input cases failed:\n{}",
        failures.join("\n")
    );
    assert_eq!(
        counts(&service.db_url).await,
        before,
        "bad requests wrote something"
    );
}
