//! HTTP calls to payment-resource and rail-proxy. The fencing token travels as an explicit
//! `X-Fencing-Token` header on every write. Bodies are read with tolerant structs (the
//! executor depends on lock-api and lock-client only, never on the services' crates): an
//! error code the executor does not react to is [`Refusal::Other`], never a transport failure.

use std::time::Duration;

use lock_api::{FENCING_PROOF_HEADER, FENCING_TOKEN_HEADER, FencingToken};
use serde::Deserialize;

/// The fields of a payout the executor reads.
#[derive(Debug, Clone, Deserialize)]
pub struct PayoutView {
    /// Its id.
    pub payout_id: i64,
    /// `PENDING`, `CLAIMED`, `SUBMITTED`, `SETTLED`, `REJECTED` or `RAIL_AMBIGUOUS`.
    pub state: String,
}

/// The error codes the executor reacts to; every other code is kept as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `FENCED_OUT`: a token below the payout's fence.
    FencedOut,
    /// `ALREADY_TERMINAL`: the payout has ended.
    AlreadyTerminal,
    /// `ALREADY_SUBMITTED`: the payout's one submission is on record.
    AlreadySubmitted,
    /// Any other code.
    Other(String),
}

impl Refusal {
    /// Reads a wire code.
    pub fn parse(code: &str) -> Self {
        match code {
            "FENCED_OUT" => Self::FencedOut,
            "ALREADY_TERMINAL" => Self::AlreadyTerminal,
            "ALREADY_SUBMITTED" => Self::AlreadySubmitted,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The wire code.
    pub fn as_str(&self) -> &str {
        match self {
            Self::FencedOut => "FENCED_OUT",
            Self::AlreadyTerminal => "ALREADY_TERMINAL",
            Self::AlreadySubmitted => "ALREADY_SUBMITTED",
            Self::Other(code) => code,
        }
    }
}

/// An error body, read tolerantly.
#[derive(Debug, Deserialize)]
struct ErrorView {
    code: String,
    #[serde(default)]
    message: String,
}

/// A refused or failed call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The service answered an error code.
    #[error("{} {}: {}", status, code.as_str(), message)]
    Refused {
        /// HTTP status.
        status: u16,
        /// Its code.
        code: Refusal,
        /// Its message.
        message: String,
    },
    /// No usable answer.
    #[error("unreachable: {0}")]
    Unreachable(String),
}

impl CallError {
    /// The error code, if the service answered one.
    pub fn code(&self) -> Option<&Refusal> {
        match self {
            Self::Refused { code, .. } => Some(code),
            Self::Unreachable(_) => None,
        }
    }
}

/// What a fenced write presents: the handle's token and its proof.
#[derive(Debug, Clone)]
pub struct Fence {
    /// `X-Fencing-Token`.
    pub token: FencingToken,
    /// `X-Fencing-Proof`, when the lock-server signs grants.
    pub proof: Option<String>,
}

impl Fence {
    /// The fence of `handle`'s grant as of now: its token and the newest proof the session
    /// holds for it (a renewal after a signing-key rotation brings one under the new key).
    pub fn of(session: &lock_client::LockClientSession, handle: &lock_client::LockHandle) -> Self {
        Self {
            token: handle.fencing_token(),
            proof: session.fence_proof(handle),
        }
    }
}

/// The two services the executor writes to.
#[derive(Debug, Clone)]
pub struct Services {
    http: reqwest::Client,
    payment_url: String,
    rail_proxy_url: String,
    hop_budget: Duration,
}

impl Services {
    /// Clients for the two base URLs, presenting `credential` (the executors' role) to both
    /// and trusting `tls`'s CA (the lock client's: one `TLS_CA_FILE` per process).
    pub fn new(
        payment_url: &str,
        rail_proxy_url: &str,
        request_timeout: Duration,
        hop_budget: Duration,
        credential: Option<&str>,
        tls: &lock_client::ClientTls,
    ) -> anyhow::Result<Self> {
        let headers = match credential.filter(|c| !c.is_empty()) {
            Some(credential) => {
                lock_client::service::bearer_headers(credential).ok_or_else(|| {
                    anyhow::anyhow!("PAYOUT_EXECUTOR_TOKEN is not a valid header value")
                })?
            }
            None => reqwest::header::HeaderMap::new(),
        };
        Ok(Self {
            http: tls
                .apply(reqwest::Client::builder())?
                .timeout(request_timeout)
                .pool_idle_timeout(Duration::from_millis(
                    lock_client::service::POOL_IDLE_TIMEOUT_MS,
                ))
                .default_headers(headers)
                .build()?,
            payment_url: payment_url.trim_end_matches('/').to_owned(),
            rail_proxy_url: rail_proxy_url.trim_end_matches('/').to_owned(),
            hop_budget,
        })
    }

    async fn read<T: serde::de::DeserializeOwned>(
        request: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        let response = request
            .send()
            .await
            .map_err(|e| CallError::Unreachable(e.to_string()))?;
        let status = response.status();
        if status.is_success() {
            return response
                .json()
                .await
                .map_err(|e| CallError::Unreachable(format!("unreadable answer: {e}")));
        }
        let text = response.text().await.unwrap_or_default();
        match serde_json::from_str::<ErrorView>(&text) {
            Ok(body) => Err(CallError::Refused {
                status: status.as_u16(),
                code: Refusal::parse(&body.code),
                message: body.message,
            }),
            Err(_) => Err(CallError::Unreachable(format!("HTTP {status}: {text}"))),
        }
    }

    /// Up to `limit` non-terminal payouts offered to `executor` alone for `offer`, oldest
    /// first: none that any executor (this one too) holds a live offer for, none in `skip`.
    pub async fn offers(
        &self,
        executor: &str,
        limit: u32,
        offer: Duration,
        skip: &[i64],
    ) -> Result<Vec<PayoutView>, CallError> {
        let offer_ms = u64::try_from(offer.as_millis()).unwrap_or(u64::MAX);
        let body = serde_json::json!({
            "executor": executor, "limit": limit, "offer_ms": offer_ms, "skip": skip
        });
        Self::read(
            self.http
                .post(format!("{}/v1/offers", self.payment_url))
                .json(&body),
        )
        .await
    }

    /// A fenced write: the grant's token and the lock-server's proof, both unchanged.
    fn fenced(&self, url: String, fence: Fence) -> reqwest::RequestBuilder {
        let request = self
            .http
            .post(url)
            .header(FENCING_TOKEN_HEADER, fence.token.0.to_string());
        match fence.proof {
            Some(proof) => request.header(FENCING_PROOF_HEADER, proof),
            None => request,
        }
    }

    /// Claim the payout at payment-resource.
    pub async fn claim(&self, payout_id: i64, fence: Fence) -> Result<PayoutView, CallError> {
        let url = format!("{}/v1/payouts/{payout_id}/claim", self.payment_url);
        Self::read(self.fenced(url, fence)).await
    }

    /// Submit through rail-proxy, within the hop budget.
    pub async fn submit(&self, payout_id: i64, fence: Fence) -> Result<(), CallError> {
        let url = format!("{}/v1/payouts/{payout_id}/submit", self.rail_proxy_url);
        let request = self.fenced(url, fence).timeout(self.hop_budget);
        Self::read::<serde_json::Value>(request).await.map(|_| ())
    }

    /// Post the recorded outcome at payment-resource.
    pub async fn post(&self, payout_id: i64, fence: Fence) -> Result<PayoutView, CallError> {
        let url = format!("{}/v1/payouts/{payout_id}/post", self.payment_url);
        Self::read(self.fenced(url, fence)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_codes_are_kept_not_failures() {
        assert_eq!(Refusal::parse("FENCED_OUT"), Refusal::FencedOut);
        assert_eq!(Refusal::parse("ALREADY_TERMINAL"), Refusal::AlreadyTerminal);
        assert_eq!(
            Refusal::parse("ALREADY_SUBMITTED"),
            Refusal::AlreadySubmitted
        );
        let other = Refusal::parse("SOMETHING_NEW");
        assert_eq!(other, Refusal::Other("SOMETHING_NEW".into()));
        assert_eq!(other.as_str(), "SOMETHING_NEW");
        let body: ErrorView = serde_json::from_str(r#"{"code":"SOMETHING_NEW"}"#)
            .unwrap_or_else(|e| panic!("a body without message reads: {e}"));
        assert_eq!(body.code, "SOMETHING_NEW");
    }
}
