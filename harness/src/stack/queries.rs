//! What a test asks of a running stack: logs, payouts, submissions, the rail, proofs, fenced
//! writes, the lock holder, the audit trail, metrics, the ledger.

use std::time::Duration;

use anyhow::bail;
use lock_client::ClientBuilder;
use payment_api::{Fault, LedgerSummary, Payout, Received, Submission};
use reqwest::StatusCode;

use super::Stack;
use super::lock_server::lock_client_builder_with;
use super::process::Proc;
use crate::audit::{Audit, DeclaredLoss, declared_losses};
use crate::metrics::Metrics;

impl Stack {
    /// The logs of every lock-server incarnation.
    pub fn lock_server_logs(&self) -> Vec<String> {
        self.lock_servers
            .iter()
            .map(|l| l.process.log())
            .chain(
                self.retired
                    .iter()
                    .filter(|p| p.describe().contains("lock-server"))
                    .map(Proc::log),
            )
            .collect()
    }

    /// Each executor's name and log.
    pub fn executor_logs(&self) -> Vec<(String, String)> {
        self.executors
            .iter()
            .map(|e| (e.name.clone(), e.process.log()))
            .collect()
    }

    /// One payout.
    pub async fn payout(&self, id: i64) -> anyhow::Result<Payout> {
        Ok(self
            .http
            .get(format!("{}/v1/payouts/{id}", self.payment_url))
            .bearer_auth(&self.secrets.reader)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// The payout's submission, if any.
    pub async fn submission(&self, id: i64) -> anyhow::Result<Option<Submission>> {
        let response = self
            .http
            .get(format!("{}/v1/payouts/{id}/submission", self.payment_url))
            .bearer_auth(&self.secrets.reader)
            .send()
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Ok(Some(response.error_for_status()?.json().await?))
    }

    /// Everything rail-stub received for `id`.
    pub async fn rail_received(&self, id: i64) -> anyhow::Result<Vec<Received>> {
        Ok(self
            .http
            .get(format!("{}/v1/received?payout_id={id}", self.rail_url))
            .bearer_auth(&self.secrets.rail_admin)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Scripts a rail fault.
    pub async fn rail_fault(&self, fault: &Fault) -> anyhow::Result<()> {
        self.http
            .post(format!("{}/v1/faults", self.rail_url))
            .bearer_auth(&self.secrets.rail_admin)
            .json(fault)
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// rail-stub's admin credential (faults, the received list).
    pub fn rail_admin_token(&self) -> &str {
        &self.secrets.rail_admin
    }

    /// The proof the stack's lock-servers gave the grant of `payout:{payout_id}` with `token`
    /// (its session read from their audit trail), or would give one to a fixed session when
    /// they never granted that token (a forged or future token).
    pub fn proof(&self, payout_id: i64, token: i64) -> String {
        let key = payment_api::payout_lock_key(payout_id);
        let granted = self.audit().ok().and_then(|audit| {
            audit
                .grants
                .iter()
                .rev()
                .find(|g| g.key == key.as_str() && g.token == token)
                .and_then(|g| lock_api::GrantId::parse(&g.grant))
        });
        let token = lock_api::FencingToken(u64::try_from(token).unwrap_or_default());
        let grant = granted.unwrap_or_else(|| test_support::test_grant(1, &key, token));
        self.signer.sign(&key, token, &grant)
    }

    /// A lock-client configuration for this stack's lock-servers and credential.
    pub fn lock_client_builder(&self) -> ClientBuilder {
        let builder = lock_client_builder_with(self.lock_endpoints(), &self.secrets.lock_client);
        match &self.tls {
            Some(files) => builder.tls(files.client()),
            None => builder,
        }
    }

    /// A fenced write to `url` for `payout_id` presenting `token`, as an executor sends it.
    pub fn fenced_request(
        &self,
        method: reqwest::Method,
        url: &str,
        payout_id: i64,
        token: i64,
    ) -> reqwest::RequestBuilder {
        self.http
            .request(method, url)
            .bearer_auth(&self.secrets.executor)
            .header(lock_api::FENCING_TOKEN_HEADER, token.to_string())
            .header(lock_api::FENCING_PROOF_HEADER, self.proof(payout_id, token))
    }

    /// A claim with `token` (and its genuine proof), as a stale executor would send it: the
    /// status and the error code, if any.
    pub async fn try_claim(&self, id: i64, token: i64) -> anyhow::Result<(u16, Option<String>)> {
        let url = format!("{}/v1/payouts/{id}/claim", self.payment_url);
        self.try_write(url, id, token).await
    }

    /// A submit through rail-proxy with `token` (and its genuine proof): the status and the
    /// error code, if any.
    pub async fn try_submit(&self, id: i64, token: i64) -> anyhow::Result<(u16, Option<String>)> {
        let url = format!("{}/v1/payouts/{id}/submit", self.proxy_url);
        self.try_write(url, id, token).await
    }

    pub(super) async fn try_write(
        &self,
        url: String,
        id: i64,
        token: i64,
    ) -> anyhow::Result<(u16, Option<String>)> {
        let response = self
            .fenced_request(reqwest::Method::POST, &url, id, token)
            .send()
            .await?;
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        Ok((status, body["code"].as_str().map(str::to_owned)))
    }

    /// Inspect on the first replica: the holder's token of `key`, or `None` when nobody holds it.
    pub async fn lock_holder(&self, key: &str) -> anyhow::Result<Option<i64>> {
        let response = self
            .http
            .get(format!("{}/v1/locks/{key}", self.lock_servers[0].url))
            .bearer_auth(&self.secrets.lock_client)
            .send()
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let info: serde_json::Value = response.error_for_status()?.json().await?;
        Ok(info["fencing_token"].as_i64())
    }

    /// The lock-servers' audit trail, merged over the replicas and their incarnations.
    pub fn audit(&self) -> anyhow::Result<Audit> {
        let logs = self.lock_server_logs();
        Audit::from_logs(logs.iter().map(String::as_str))
    }

    /// Every loss the executors' SDKs declared.
    pub fn declared_losses(&self) -> anyhow::Result<Vec<DeclaredLoss>> {
        let mut losses = Vec::new();
        for executor in &self.executors {
            losses.extend(declared_losses(&executor.process.log())?);
        }
        Ok(losses)
    }

    /// The lock-servers' endpoints, as an SDK's `LOCK_ENDPOINTS` lists them.
    pub fn lock_endpoints(&self) -> Vec<String> {
        self.lock_servers.iter().map(|l| l.url.clone()).collect()
    }

    /// The ledger balance check.
    pub async fn ledger(&self) -> anyhow::Result<LedgerSummary> {
        Ok(self
            .http
            .get(format!("{}/v1/ledger/summary", self.payment_url))
            .bearer_auth(&self.secrets.reader)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// One scrape of `url/metrics`.
    pub async fn metrics(&self, url: &str) -> anyhow::Result<Metrics> {
        let text = self
            .client_for(url)
            .get(format!("{url}/metrics"))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        Metrics::parse(&text)
    }

    /// The sum of the series of `name` whose labels include `labels`, from `url/metrics`.
    /// A series that is not exported is an error, never 0.
    pub async fn metric(
        &self,
        url: &str,
        name: &str,
        labels: &[(&str, &str)],
    ) -> anyhow::Result<f64> {
        self.metrics(url).await?.sum(name, labels)
    }

    /// Polls until every payout in `ids` is terminal, or fails after `deadline`.
    pub async fn wait_terminal(
        &self,
        ids: &[i64],
        deadline: Duration,
    ) -> anyhow::Result<Vec<Payout>> {
        let started = std::time::Instant::now();
        loop {
            let mut payouts = Vec::with_capacity(ids.len());
            for id in ids {
                payouts.push(self.payout(*id).await?);
            }
            if payouts.iter().all(|p| p.state.is_terminal()) {
                return Ok(payouts);
            }
            if started.elapsed() > deadline {
                let open: Vec<_> = payouts
                    .iter()
                    .filter(|p| !p.state.is_terminal())
                    .map(|p| (p.payout_id, p.state))
                    .collect();
                bail!("payouts still open after {deadline:?}: {open:?}");
            }
            tokio::time::sleep(Duration::from_millis(
                test_support::poll::POLL_INTERVAL_MS * 5,
            ))
            .await;
        }
    }
}
