//! rail-proxy: stateless, and the only service that may call the rail. A submit must carry
//! the executors' credential and a fencing token with the lock-server's signed proof,
//! verified here offline before anything else. For each submit it
//! reserves the payout's one submission with payment-resource (fence and duplicate check),
//! calls the rail within the per-hop timeout, and records the outcome. A timeout, a lost
//! connection or a 5xx after sending is `TIMEOUT` (the payout ends `RAIL_AMBIGUOUS`) and is
//! never retried. Submits that arrive for a payout with a submission on record are refused
//! before the rail and counted in `rail_duplicate_attempted_total`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use lock_api::{
    CredentialEntry, ErrorCode, FENCING_PROOF_HEADER, FENCING_TOKEN_HEADER, FencingToken,
};
use payment_api::{
    AnyErrorBody, RecordOutcome, Reservation, SubmissionOutcome, SubmitResult, Transfer,
    TransferAnswer,
};
use service_kit::{ApiError, LogFormat, RequestMetrics, Service, common_layers};

/// Submits refused because the payout already has a submission on record.
pub const DUPLICATE_ATTEMPTED_TOTAL: &str = "rail_duplicate_attempted_total";
/// Rail calls by `outcome`.
pub const RAIL_CALLS_TOTAL: &str = "rail_calls_total";
/// Largest request body (submits have none).
const BODY_MAX_BYTES: usize = 1024;

/// rail-proxy settings.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "rail-proxy",
    version,
    about = "The only door to the payment rail",
    args_override_self = true
)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "RAIL_PROXY_BIND", default_value = "127.0.0.1:8083")]
    pub bind: SocketAddr,
    /// payment-resource base URL.
    #[arg(long, env = "PAYMENT_URL", default_value = "https://127.0.0.1:8082")]
    pub payment_url: String,
    /// rail base URL.
    #[arg(long, env = "RAIL_URL", default_value = "https://127.0.0.1:8085")]
    pub rail_url: String,
    /// The bearer credential presented to the rail.
    #[arg(long, env = "RAIL_PROXY_CREDENTIAL", hide_env_values = true)]
    pub rail_credential: String,
    /// The bearer token presented to payment-resource's submission endpoints.
    #[arg(long, env = "PAYMENT_PROXY_TOKEN", hide_env_values = true)]
    pub payment_token: String,
    /// The bearer token executors present to submit (the credential `payout-executor`).
    /// With neither it nor an `executor` in the credentials file, submits answer 403.
    #[arg(long, env = "PAYOUT_EXECUTOR_TOKEN", hide_env_values = true)]
    pub executor_token: Option<String>,
    /// payment-resource's credentials file, shared: its `executor` credentials may submit.
    /// Read again on SIGHUP.
    #[arg(long, env = "PAYMENT_CREDENTIALS_FILE")]
    pub credentials_file: Option<std::path::PathBuf>,
    /// Requests a second and burst per caller.
    #[command(flatten)]
    pub rate: service_kit::RateDefaults,
    /// The lock service's public keys, `key_id=base64[,…]`: a submit's `X-Fencing-Proof`
    /// must be one of their signatures of `payout:{id}` and the token. Required.
    #[arg(long, env = "FENCE_PUBLIC_KEYS")]
    pub fence_public_keys: Option<String>,
    /// A file holding the lock service's public keys instead, read again on SIGHUP: a
    /// signing key rotates without a restart.
    #[arg(long, env = "FENCE_PUBLIC_KEYS_FILE")]
    pub fence_public_keys_file: Option<std::path::PathBuf>,
    /// `rail.hop-timeout`: how long the rail may take to answer one transfer.
    #[arg(long = "rail.hop-timeout", env = "RAIL_HOP_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub rail_timeout: Duration,
    /// `rail.hop-budget`: the whole submit (reserve, rail, record); also the request timeout.
    #[arg(long = "rail.hop-budget", env = "RAIL_HOP_BUDGET", default_value = "3s", value_parser = humantime::parse_duration)]
    pub hop_budget: Duration,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
    /// Connection limits (header-read/idle timeout, connection cap).
    #[command(flatten)]
    pub http: service_kit::HttpLimits,
}

/// The role that may submit.
const EXECUTOR_ROLE: &str = "executor";

#[derive(Debug)]
struct Proxy {
    http: reqwest::Client,
    payment_url: String,
    rail_url: String,
    rail_credential: String,
    payment_token: String,
    callers: Arc<service_kit::Callers>,
    verifier: Arc<fence_kit::TrustedKeys>,
    rail_timeout: Duration,
}

/// A proven fenced write: the token and the lock-server's proof, forwarded unchanged.
#[derive(Debug, Clone)]
struct Fence {
    token: FencingToken,
    proof: String,
}

type ApiResult<T> = Result<T, ApiError>;

fn unavailable(what: &str, err: impl std::fmt::Display) -> ApiError {
    ApiError::new(ErrorCode::StoreUnavailable, format!("{what}: {err}"))
}

impl Proxy {
    async fn reserve(&self, payout_id: i64, fence: &Fence) -> ApiResult<Reservation> {
        let token = fence.token;
        let response = self
            .http
            .post(format!(
                "{}/v1/payouts/{payout_id}/submissions",
                self.payment_url
            ))
            .header(FENCING_TOKEN_HEADER, token.0.to_string())
            .header(FENCING_PROOF_HEADER, &fence.proof)
            .bearer_auth(&self.payment_token)
            .send()
            .await
            .map_err(|e| unavailable("payment-resource", e))?;
        if response.status().is_success() {
            return response
                .json()
                .await
                .map_err(|e| unavailable("payment-resource answer", e));
        }
        let status = response.status();
        let body: AnyErrorBody = response
            .json()
            .await
            .map_err(|e| unavailable("payment-resource answer", e))?;
        let code = body.code();
        // Only a count and a log line hang on the lookup: a failed one never hides the
        // refusal (a stale writer must learn it was fenced).
        let duplicate = code.is_refusal_of_a_stale_write()
            && match self.has_submission(payout_id).await {
                Ok(found) => found,
                Err(err) => {
                    tracing::warn!(event = "submission_lookup_failed", payout_id, error = %err.message, "could not tell whether a submission is on record");
                    false
                }
            };
        if duplicate {
            metrics::counter!(DUPLICATE_ATTEMPTED_TOTAL).increment(1);
            tracing::warn!(
                event = "rail_duplicate_attempted",
                payout_id,
                token = token.0,
                code = body.code.as_str(),
                "refused before the rail"
            );
        }
        match code.wire() {
            Some(wire) if !status.is_server_error() => Err(ApiError::new(wire, body.message)),
            // A 5xx, or a code this build does not know: the store is not answering usefully.
            _ => Err(unavailable(
                "payment-resource",
                format!("{} {}: {}", status.as_u16(), body.code, body.message),
            )),
        }
    }

    /// Whether payment-resource has a submission on record for `payout_id` (200: yes, 404:
    /// no); any other answer is no answer, never a "no".
    async fn has_submission(&self, payout_id: i64) -> ApiResult<bool> {
        let response = self
            .http
            .get(format!(
                "{}/v1/payouts/{payout_id}/submission",
                self.payment_url
            ))
            .bearer_auth(&self.payment_token)
            .send()
            .await
            .map_err(|e| unavailable("payment-resource", e))?;
        match response.status() {
            status if status.is_success() => Ok(true),
            reqwest::StatusCode::NOT_FOUND => Ok(false),
            status => Err(unavailable(
                "payment-resource",
                format!("reading the submission answered {status}"),
            )),
        }
    }

    /// One rail call, never retried. Anything but a clear answer is `TIMEOUT`.
    async fn call_rail(&self, reservation: &Reservation) -> (SubmissionOutcome, Option<String>) {
        let payout = &reservation.payout;
        let transfer = Transfer {
            payout_id: payout.payout_id,
            amount_minor: payout.amount_minor,
            currency: payout.currency.clone(),
            beneficiary: payout.beneficiary.clone(),
            presented_token: reservation.submission.presented_token,
        };
        let sent = self
            .http
            .post(format!("{}/v1/transfers", self.rail_url))
            .bearer_auth(&self.rail_credential)
            .timeout(self.rail_timeout)
            .json(&transfer)
            .send()
            .await;
        let answer = match sent {
            Ok(response) if response.status().is_success() => {
                response.json::<TransferAnswer>().await.ok()
            }
            Ok(response) if response.status().is_client_error() => {
                // The rail refused the request itself (credential, body): nothing was paid,
                // but the submission is on record, so it still ends ambiguous for an operator.
                tracing::error!(
                    event = "rail_refused_request",
                    payout_id = payout.payout_id,
                    status = response.status().as_u16(),
                    "the rail refused our request: check RAIL_PROXY_CREDENTIAL and RAIL_URL"
                );
                None
            }
            Ok(response) => {
                tracing::warn!(
                    event = "rail_error",
                    payout_id = payout.payout_id,
                    status = response.status().as_u16()
                );
                None
            }
            Err(err) => {
                tracing::warn!(event = "rail_timeout", payout_id = payout.payout_id, error = %err, "no answer within the hop timeout");
                None
            }
        };
        match answer {
            Some(a) if a.status == "accepted" => (SubmissionOutcome::Acked, Some(a.rail_reference)),
            Some(a) if a.status == "rejected" => {
                (SubmissionOutcome::Rejected, Some(a.rail_reference))
            }
            _ => (SubmissionOutcome::Timeout, None),
        }
    }

    async fn record(&self, payout_id: i64, fence: &Fence, outcome: RecordOutcome) -> ApiResult<()> {
        let response = self
            .http
            .post(format!(
                "{}/v1/payouts/{payout_id}/submission/outcome",
                self.payment_url
            ))
            .header(FENCING_TOKEN_HEADER, fence.token.0.to_string())
            .header(FENCING_PROOF_HEADER, &fence.proof)
            .bearer_auth(&self.payment_token)
            .json(&outcome)
            .send()
            .await
            .map_err(|e| unavailable("payment-resource", e))?;
        if response.status().is_success() {
            return Ok(());
        }
        let text = response.text().await.unwrap_or_default();
        Err(unavailable("recording the rail outcome", text))
    }
}

async fn submit(
    State(proxy): State<Arc<Proxy>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> ApiResult<Json<SubmitResult>> {
    let caller = proxy.callers.authorize(
        &headers,
        EXECUTOR_ROLE,
        "submits (PAYOUT_EXECUTOR_TOKEN or an `executor` credential)",
    )?;
    proxy.callers.admit(&caller)?;
    match body {
        Ok(bytes) if bytes.is_empty() => {}
        Ok(_) => return Err(ApiError::invalid("body", "submit takes no body")),
        Err(rejection) => {
            return Err(ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("body: {}", rejection.body_text()),
            ));
        }
    }
    let payout_id = payment_api::parse_payout_id(&id)
        .ok_or_else(|| ApiError::invalid("payout_id", "must be a positive integer"))?;
    // Verified here, offline, before anything is reserved or sent; payment-resource
    // verifies the forwarded proof again.
    let fence_kit::ProvenFence { token, proof, .. } =
        fence_kit::FencedWrite::from_headers(&headers)?.verify(
            &proxy.verifier.current(),
            &payment_api::payout_lock_key(payout_id),
        )?;
    let fence = Fence { token, proof };
    let reservation = proxy.reserve(payout_id, &fence).await?;
    let (outcome, rail_reference) = proxy.call_rail(&reservation).await;
    metrics::counter!(RAIL_CALLS_TOTAL, "outcome" => outcome.as_str()).increment(1);
    tracing::info!(
        event = "rail_submitted",
        payout_id,
        token = token.0,
        outcome = outcome.as_str()
    );
    if let Err(err) = proxy
        .record(
            payout_id,
            &fence,
            RecordOutcome {
                outcome,
                rail_reference: rail_reference.clone(),
            },
        )
        .await
    {
        // The submission stays IN_FLIGHT; after the hop budget the executor's post declares it
        // ambiguous.
        tracing::error!(event = "record_failed", payout_id, error = %err.message);
        return Err(err);
    }
    Ok(Json(SubmitResult {
        payout_id,
        outcome,
        rail_reference,
    }))
}

/// Binds: a service ready to run.
pub async fn build(config: &Config) -> anyhow::Result<Service> {
    let verifier = service_kit::trusted_keys(
        config.fence_public_keys.as_deref(),
        config.fence_public_keys_file.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    service_kit::install_metrics();
    describe_metrics();
    let executors = config
        .executor_token
        .as_deref()
        .filter(|t| !t.trim().is_empty())
        .map(|secret| CredentialEntry::from_secret("payout-executor", &[EXECUTOR_ROLE], secret));
    let callers = service_kit::Callers::load(
        lock_api::PAYMENT_CREDENTIAL_ROLES,
        executors.into_iter().collect(),
        config.credentials_file.as_deref(),
        config.rate,
    )
    .map_err(anyhow::Error::msg)?;
    // Its calls follow the same word as its port: plain http:// only with the flag.
    let mut client_tls = tls_kit::ClientTls::from_env();
    client_tls.plaintext |= config.http.tls.unsafe_plaintext_http;
    client_tls.check_url("PAYMENT_URL", &config.payment_url)?;
    client_tls.check_url("RAIL_URL", &config.rail_url)?;
    let http = client_tls
        .apply(reqwest::Client::builder())?
        .timeout(config.hop_budget)
        .build()?;
    let proxy = Arc::new(Proxy {
        http,
        payment_url: config.payment_url.trim_end_matches('/').to_owned(),
        rail_url: config.rail_url.trim_end_matches('/').to_owned(),
        rail_credential: config.rail_credential.clone(),
        payment_token: config.payment_token.clone(),
        callers,
        verifier,
        rail_timeout: config.rail_timeout,
    });
    let routes = Router::new()
        .route("/v1/payouts/{payout_id}/submit", post(submit))
        .route("/health/live", get(service_kit::live))
        .route("/health/ready", get(service_kit::live))
        .route("/metrics", get(service_kit::render_metrics))
        .fallback(service_kit::not_found)
        .with_state(proxy);
    let app = common_layers(
        routes,
        BODY_MAX_BYTES,
        config.hop_budget,
        RequestMetrics::for_service("rail-proxy"),
    );
    Ok(Service::bind(config.bind, app, config.http.clone()).await?)
}

/// HELP text of rail-proxy's own families, each registered at zero at start (an absent
/// series is not a zero). The request families are described by `service_kit`.
fn describe_metrics() {
    metrics::describe_counter!(
        DUPLICATE_ATTEMPTED_TOTAL,
        "Submits refused before the rail because the payout already has a submission on record."
    );
    metrics::describe_counter!(
        RAIL_CALLS_TOTAL,
        "Rail calls (one per successful reserve), by the outcome recorded."
    );
    metrics::counter!(DUPLICATE_ATTEMPTED_TOTAL).increment(0);
    for outcome in [
        SubmissionOutcome::Acked,
        SubmissionOutcome::Rejected,
        SubmissionOutcome::Timeout,
    ] {
        metrics::counter!(RAIL_CALLS_TOTAL, "outcome" => outcome.as_str()).increment(0);
    }
}
