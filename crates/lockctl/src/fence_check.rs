//! `lockctl fence-check`: the conformance kit for fenced resources. It takes real grants from
//! the lock service and writes to the resource with the current holder's token and proof, and
//! with every kind of bad one: missing, relabelled, forged, another key's, and a stale holder's
//! after its lease ran out and another session took the key. It reports which of the fence's
//! promises the resource keeps; any promise broken is exit 1.
//!
//! The paused holder is a holder that stops renewing: its grant ends on the server's clock,
//! the next session is granted the key, and the old holder then writes, as a worker does when
//! it wakes from a pause (from the resource's side the two are the same). A resource whose
//! fence is raised by a claim elsewhere (rail-proxy's is raised by payment-resource's claim)
//! is checked with `--claim-url`: each holder claims there first, as the pipeline does.

use std::time::Duration;

use lock_api::LockGrant;
use lock_api::{FencingToken, LockKey};
use lock_client::LockClient;
use serde_json::Value;

use crate::cli::{FenceCheckArgs, Global};
use crate::commands::{client, config, settings, wait_policy};
use crate::error::{CtlError, code};
use crate::output::{self, Fields};

/// How long one write to the resource may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Owner ids of the two sessions (inspect shows them).
const OWNERS: [&str; 2] = ["lockctl-fence-check-a", "lockctl-fence-check-b"];

/// What one probe sends: a token header and a proof header, either left out when `None`.
struct Probe<'a> {
    token: Option<u64>,
    proof: Option<&'a str>,
}

/// A resource's answer to one write.
#[derive(Debug)]
struct Answer {
    status: u16,
    code: Option<String>,
}

impl Answer {
    fn accepted(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// A clear refusal of the caller's write: 4xx. A 5xx is no refusal (the resource failed).
    fn refused(&self) -> bool {
        (400..500).contains(&self.status)
    }

    fn shown(&self) -> String {
        match &self.code {
            Some(code) => format!("{} {code}", self.status),
            None => self.status.to_string(),
        }
    }
}

/// The resource under test: where writes go, how they are sent, and the claim step if any.
struct Resource {
    http: reqwest::Client,
    method: reqwest::Method,
    url: String,
    claim_url: Option<String>,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

impl Resource {
    async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        probe: &Probe<'_>,
    ) -> Result<Answer, CtlError> {
        let mut request = self.http.request(method, url).timeout(WRITE_TIMEOUT);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        if let Some(token) = probe.token {
            request = request.header(lock_api::FENCING_TOKEN_HEADER, token.to_string());
        }
        if let Some(proof) = probe.proof {
            request = request.header(lock_api::FENCING_PROOF_HEADER, proof);
        }
        if let Some(body) = &self.body {
            request = request
                .header("content-type", "application/json")
                .body(body.clone());
        }
        let response = request
            .send()
            .await
            .map_err(|e| CtlError::Failed(format!("{url}: no answer: {e}")))?;
        let status = response.status().as_u16();
        let code = response
            .json::<Value>()
            .await
            .ok()
            .and_then(|body| body["code"].as_str().map(str::to_owned));
        Ok(Answer { status, code })
    }

    async fn write(&self, probe: &Probe<'_>) -> Result<Answer, CtlError> {
        self.send(self.method.clone(), &self.url, probe).await
    }

    /// The holder's claim at `--claim-url` (POST), when the fence is raised there.
    async fn claim(&self, grant: &Held) -> Result<Option<Answer>, CtlError> {
        match &self.claim_url {
            Some(url) => Ok(Some(
                self.send(reqwest::Method::POST, url, &grant.probe())
                    .await?,
            )),
            None => Ok(None),
        }
    }
}

/// A grant the kit holds: its session, token and proof.
struct Held {
    session: lock_api::SessionId,
    token: FencingToken,
    proof: String,
}

impl Held {
    fn probe(&self) -> Probe<'_> {
        Probe {
            token: Some(self.token.0),
            proof: Some(&self.proof),
        }
    }
}

/// One promise's verdict, printed as one line.
struct Verdict {
    promise: &'static str,
    kept: bool,
    answer: String,
}

/// `lockctl fence-check KEY URL`: runs the probes and prints one line per promise.
pub async fn fence_check(global: &Global, args: FenceCheckArgs) -> Result<u8, CtlError> {
    let builder = config(global)?.session_ttl(args.lease);
    let resource = resource(&args, settings(&builder)?.tls())?;
    let client = client(builder)?;
    let verdicts = probe(&client, &resource, &args).await;
    client.close();

    let verdicts = verdicts?;
    let broken = verdicts.iter().filter(|v| !v.kept).count();
    for verdict in &verdicts {
        let fields: Fields = vec![
            ("promise", verdict.promise.into()),
            ("kept", verdict.kept.into()),
            ("answer", verdict.answer.clone().into()),
        ];
        output::print(&fields, global.json);
    }
    let summary: Fields = vec![
        ("lock_key", args.key.as_str().into()),
        ("promises", verdicts.len().into()),
        ("broken", broken.into()),
    ];
    output::print(&summary, global.json);
    Ok(if broken == 0 { code::OK } else { code::REFUSED })
}

fn resource(args: &FenceCheckArgs, tls: &lock_client::ClientTls) -> Result<Resource, CtlError> {
    let mut headers = Vec::new();
    for raw in &args.headers {
        let (name, value) = raw
            .split_once(':')
            .ok_or_else(|| CtlError::Usage(format!("--header {raw:?}: expected 'Name: value'")))?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    if let Some(var) = &args.bearer_env {
        let secret = std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| CtlError::Config(format!("--bearer-env: {var} is not set")))?;
        headers.push(("authorization".into(), format!("Bearer {}", secret.trim())));
    }
    let method = reqwest::Method::from_bytes(args.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| CtlError::Usage(format!("--method {:?}: not an HTTP method", args.method)))?;
    for url in std::iter::once(&args.url).chain(&args.claim_url) {
        tls.check_url("the resource's URL", url)
            .map_err(|e| CtlError::Usage(e.to_string()))?;
    }
    let http = tls
        .apply(reqwest::Client::builder())
        .map_err(|e| CtlError::Config(e.to_string()))?
        .build()
        .map_err(|e| CtlError::Failed(format!("HTTP client: {e}")))?;
    Ok(Resource {
        http,
        method,
        url: args.url.clone(),
        claim_url: args.claim_url.clone(),
        headers,
        body: args.body.clone(),
    })
}

/// Opens a session of its own and takes `key` in it within `wait`.
async fn take(
    client: &LockClient,
    owner: &str,
    key: &LockKey,
    lease: Duration,
    wait: Duration,
) -> Result<Held, CtlError> {
    let session = client.open_session(owner).await?.detach();
    let grant: LockGrant = client
        .admin()
        .acquire_as(session, key, lease, &wait_policy(wait))
        .await?
        .ok_or_else(|| CtlError::NotAcquired {
            key: key.to_string(),
            wait: crate::commands::shown(wait),
        })?;
    let proof = grant.proof.ok_or_else(|| {
        CtlError::Config(
            "the lock service signs no proofs (no LOCK_SIGNING_KEY): a fenced resource cannot verify its tokens".into(),
        )
    })?;
    Ok(Held {
        session,
        token: grant.fencing_token,
        proof,
    })
}

/// The proof with one bit of its signature flipped: well formed (valid base64url of 64
/// bytes), signing nothing. Flipping a character instead could change only padding bits,
/// which a lenient decoder reads as the genuine signature.
fn tampered(proof: &str) -> String {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let (head, signature) = proof.rsplit_once('.').unwrap_or(("", proof));
    match URL_SAFE_NO_PAD.decode(signature) {
        Ok(mut bytes) if !bytes.is_empty() => {
            bytes[0] ^= 1;
            format!("{head}.{}", URL_SAFE_NO_PAD.encode(bytes))
        }
        _ => format!("{proof}x"),
    }
}

/// Writes with every kind of bad token or proof, built from the holder `old`'s grant and a
/// grant of another key (`elsewhere`): each must be refused.
async fn bad_write_verdicts(
    resource: &Resource,
    old: &Held,
    elsewhere: &Held,
) -> Result<Vec<Verdict>, CtlError> {
    let token = old.token.0;
    let forged = tampered(&old.proof);
    let probes: [(&'static str, Probe<'_>); 6] = [
        (
            "a write without a token is refused",
            Probe {
                token: None,
                proof: Some(&old.proof),
            },
        ),
        (
            "a write without a proof is refused",
            Probe {
                token: Some(token),
                proof: None,
            },
        ),
        (
            "a token relabelled above its proof is refused",
            Probe {
                token: Some(token + 1),
                proof: Some(&old.proof),
            },
        ),
        (
            "a token no lock service issued is refused",
            Probe {
                token: Some(FencingToken::MAX.0),
                proof: Some(&old.proof),
            },
        ),
        (
            "a forged signature is refused",
            Probe {
                token: Some(token),
                proof: Some(&forged),
            },
        ),
        (
            "another key's genuine proof is refused",
            Probe {
                token: Some(elsewhere.token.0),
                proof: Some(&elsewhere.proof),
            },
        ),
    ];
    let mut verdicts = Vec::new();
    for (promise, probe) in &probes {
        let answer = resource.write(probe).await?;
        verdicts.push(Verdict {
            promise,
            kept: answer.refused(),
            answer: answer.shown(),
        });
    }
    Ok(verdicts)
}

/// Once `new` holds the key after `old`'s lease ran out: the new holder's claim (with
/// `--claim-url`) and write are accepted, the paused holder's write and claim refused.
async fn takeover_verdicts(
    resource: &Resource,
    old: &Held,
    new: &Held,
) -> Result<Vec<Verdict>, CtlError> {
    let mut verdicts = Vec::new();
    if let Some(answer) = resource.claim(new).await? {
        let kept = answer.accepted();
        verdicts.push(Verdict {
            promise: "the new holder's claim is accepted",
            kept,
            answer: answer.shown(),
        });
    }
    let answer = resource.write(&new.probe()).await?;
    verdicts.push(Verdict {
        promise: "the current holder's write is accepted",
        kept: answer.accepted(),
        answer: answer.shown(),
    });
    let answer = resource.write(&old.probe()).await?;
    verdicts.push(Verdict {
        promise: "the paused holder's write after its lease is refused",
        kept: answer.refused(),
        answer: answer.shown(),
    });
    if let Some(answer) = resource.claim(old).await? {
        verdicts.push(Verdict {
            promise: "the paused holder's claim after its lease is refused",
            kept: answer.refused(),
            answer: answer.shown(),
        });
    }
    Ok(verdicts)
}

async fn probe(
    client: &LockClient,
    resource: &Resource,
    args: &FenceCheckArgs,
) -> Result<Vec<Verdict>, CtlError> {
    let key = &args.key;
    let other_key = LockKey::parse(format!("{}.fence-check", key.as_str()))
        .map_err(|e| CtlError::Usage(format!("{key}: no room for a second key: {e}")))?;
    // The paused holder's grant must end before the next one can begin.
    let wait = args.lease * 3 + Duration::from_secs(5);
    let old = take(client, OWNERS[0], key, args.lease, wait).await?;
    let elsewhere = take(client, OWNERS[0], &other_key, args.lease, wait).await?;
    if let Some(answer) = resource.claim(&old).await? {
        if !answer.accepted() {
            return Err(CtlError::Failed(format!(
                "the holder's claim at --claim-url was refused ({}): nothing to check",
                answer.shown()
            )));
        }
    }
    let mut verdicts = bad_write_verdicts(resource, &old, &elsewhere).await?;
    // The old holder stops renewing; the next session is granted the key once its lease ends.
    let new = take(client, OWNERS[1], key, args.lease, wait).await?;
    if new.token <= old.token {
        return Err(CtlError::Failed(format!(
            "the lock service granted token {} after {}: tokens must rise",
            new.token, old.token
        )));
    }
    verdicts.extend(takeover_verdicts(resource, &old, &new).await?);
    // The sessions would end a lease later by themselves; closing them frees the keys now,
    // and a failed close changes nothing the report says.
    let admin = client.admin();
    for session in [old.session, elsewhere.session, new.session] {
        let _ = admin.close_session(session).await;
    }
    Ok(verdicts)
}
