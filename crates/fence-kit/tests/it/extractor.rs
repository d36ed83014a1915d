//! `FencedWrite` as an axum extractor behind a real listener: every bad header gets its typed
//! `{"code","message"}` refusal, a genuine proof passes, and the fence rule then decides.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::put;
use fence_kit::{
    FenceError, FenceRule, FenceVerifier, FencedWrite, FencingToken, GrantFence, GrantScope,
    LockKey, check_open,
};
use serde_json::Value;
use test_support::keys::{public_keys, rogue_signer, test_grant, test_proof, test_signer};

struct Resource {
    verifier: FenceVerifier,
    /// The fence: token and grant text.
    fence: Mutex<(i64, String)>,
}

/// A fenced key-value write in a dozen lines: verify, check, write.
async fn write(
    State(resource): State<Arc<Resource>>,
    write: FencedWrite,
) -> Result<&'static str, FenceError> {
    let key = LockKey::parse("doc:1").unwrap();
    let proven = write.verify(&resource.verifier, &key)?;
    let grant = proven.grant.as_text();
    let mut fence = resource.fence.lock().unwrap();
    let presented = GrantFence {
        token: proven.token_i64(),
        grant: &grant,
    };
    let current = GrantFence {
        token: fence.0,
        grant: &fence.1,
    };
    check_open(FenceRule::Claim, presented, current)?;
    *fence = (presented.token, grant.clone());
    Ok("written")
}

async fn serve() -> String {
    let resource = Arc::new(Resource {
        verifier: FenceVerifier::parse(&public_keys()).unwrap(),
        fence: Mutex::new((0, String::new())),
    });
    let app = Router::new().route("/doc", put(write)).with_state(resource);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/doc", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

async fn put_with(url: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = reqwest::Client::new().put(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// What a probe sends and the status and code it must get.
type Probe<'a> = (&'a str, Vec<(&'a str, &'a str)>, u16, &'a str);

fn code(body: &Value) -> &str {
    body["code"].as_str().unwrap_or("")
}

/// Proofs for token 5 that doc:1's writer is shown: one genuine, the rest not.
struct Proofs {
    /// The lock-server's proof of token 5 on doc:1.
    genuine: String,
    /// The lock-server's proof of token 5 on doc:2.
    other_key: String,
    /// A proof of token 5 on doc:1 signed by a key nobody trusts.
    forged: String,
    /// The genuine proof with its last character changed.
    tampered: String,
}

impl Proofs {
    fn new(key: &LockKey) -> Self {
        let t5 = FencingToken(5);
        let genuine = test_proof(key, t5);
        let other_key = test_proof(&LockKey::parse("doc:2").unwrap(), t5);
        let forged = rogue_signer().sign(key, t5, &test_grant(1, key, t5));
        let mut tampered = genuine.clone();
        let last = tampered.pop().unwrap();
        tampered.push(if last == 'A' { 'B' } else { 'A' });
        Self {
            genuine,
            other_key,
            forged,
            tampered,
        }
    }
}

/// Missing, repeated or malformed `X-Fencing-Token` headers (with a genuine proof).
fn bad_token_probes(proofs: &Proofs) -> Vec<Probe<'_>> {
    let proof5 = proofs.genuine.as_str();
    vec![
        (
            "no token",
            vec![("x-fencing-proof", proof5)],
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "token twice",
            vec![
                ("x-fencing-token", "5"),
                ("x-fencing-token", "5"),
                ("x-fencing-proof", proof5),
            ],
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "signed token",
            vec![("x-fencing-token", "-5"), ("x-fencing-proof", proof5)],
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "token zero",
            vec![("x-fencing-token", "0"), ("x-fencing-proof", proof5)],
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "token past i64",
            vec![
                ("x-fencing-token", "9223372036854775808"),
                ("x-fencing-proof", proof5),
            ],
            400,
            "INVALID_ARGUMENT",
        ),
    ]
}

/// Missing, repeated or wrong `X-Fencing-Proof` headers for token 5.
fn bad_proof_probes(proofs: &Proofs) -> Vec<Probe<'_>> {
    let proof5 = proofs.genuine.as_str();
    vec![
        (
            "no proof",
            vec![("x-fencing-token", "5")],
            403,
            "PROOF_INVALID",
        ),
        (
            "proof twice",
            vec![
                ("x-fencing-token", "5"),
                ("x-fencing-proof", proof5),
                ("x-fencing-proof", proof5),
            ],
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "relabelled token",
            vec![("x-fencing-token", "6"), ("x-fencing-proof", proof5)],
            403,
            "PROOF_INVALID",
        ),
        (
            "another key's proof",
            vec![
                ("x-fencing-token", "5"),
                ("x-fencing-proof", &proofs.other_key),
            ],
            403,
            "PROOF_INVALID",
        ),
        (
            "an untrusted key",
            vec![
                ("x-fencing-token", "5"),
                ("x-fencing-proof", &proofs.forged),
            ],
            403,
            "PROOF_INVALID",
        ),
        (
            "a tampered signature",
            vec![
                ("x-fencing-token", "5"),
                ("x-fencing-proof", &proofs.tampered),
            ],
            403,
            "PROOF_INVALID",
        ),
        (
            "garbage",
            vec![("x-fencing-token", "5"), ("x-fencing-proof", "v2.x.y.z")],
            403,
            "PROOF_INVALID",
        ),
    ]
}

/// With the genuine proof `proof5` token 5 writes, token 7 then writes, and token 5 is then
/// fenced out.
async fn assert_fence_rule_decides(url: &str, key: &LockKey, proof5: &str) {
    let (status, body) = put_with(
        url,
        &[("x-fencing-token", "5"), ("x-fencing-proof", proof5)],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let proof7 = test_signer().sign(key, FencingToken(7), &test_grant(2, key, FencingToken(7)));
    let (status, _) = put_with(
        url,
        &[("x-fencing-token", "7"), ("x-fencing-proof", &proof7)],
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = put_with(
        url,
        &[("x-fencing-token", "5"), ("x-fencing-proof", proof5)],
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (409, "FENCED_OUT"),
        "the old holder, after a newer grant: {body}"
    );
}

#[tokio::test]
async fn every_bad_header_is_refused_with_its_code_and_a_genuine_grant_writes() {
    let url = serve().await;
    let key = LockKey::parse("doc:1").unwrap();
    let proofs = Proofs::new(&key);

    let mut cases = bad_token_probes(&proofs);
    cases.extend(bad_proof_probes(&proofs));
    for (what, headers, status, expected) in &cases {
        let (got, body) = put_with(&url, headers).await;
        assert_eq!((got, code(&body)), (*status, *expected), "{what}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
    }

    assert_fence_rule_decides(&url, &key, &proofs.genuine).await;
}

/// A resource written for a mutex refuses a genuine proof of a permit or a share
/// (`PROOF_INVALID`); one that takes them (`verify_scoped`) learns what the grant holds.
#[test]
fn a_mutex_resource_refuses_permits_and_shares_and_a_scoped_one_reads_them() {
    let key = LockKey::parse("doc:1").unwrap();
    let verifier = FenceVerifier::parse(&public_keys()).unwrap();
    let token = FencingToken(3);
    let grant = test_grant(1, &key, token);
    for scope in [GrantScope::Shared, GrantScope::Permit { slot: 2 }] {
        let proof = test_signer().sign_scoped(&key, token, &grant, scope);
        let write = || FencedWrite {
            token,
            proof: Some(proof.clone()),
        };
        let refused = write().verify(&verifier, &key).unwrap_err();
        assert_eq!(refused.code, lock_api::ErrorCode::ProofInvalid);
        assert!(
            refused.message.contains(&scope.as_text()),
            "{}",
            refused.message
        );
        let (proven, seen) = write().verify_scoped(&verifier, &key).unwrap();
        assert_eq!((proven.grant, seen), (grant, scope));
    }
    let mutex = FencedWrite {
        token,
        proof: Some(test_proof(&key, token)),
    };
    let (_, seen) = mutex.verify_scoped(&verifier, &key).unwrap();
    assert_eq!(
        seen,
        GrantScope::Exclusive,
        "a mutex's (v2) proof is exclusive"
    );
}
