//! Executors: started, stopped and given payouts to work on.

use anyhow::Context;
use payment_api::{CreatePayout, Payout};
use test_support::{ServiceProcess, free_port, wait_until_ok_with};

use super::process::{Proc, READY_DEADLINE};
use super::{Executor, Stack, tls};
use crate::compose::{self, Container, etcd_selected};

impl Stack {
    /// Starts an executor named `name` with `extra_env`, and waits until it serves health.
    pub async fn start_executor(
        &mut self,
        name: &str,
        extra_env: &[(&str, String)],
    ) -> anyhow::Result<&Executor> {
        self.spawn_executor(name, extra_env, true).await
    }

    /// Starts an executor; waits for its health only when `wait_ready` (an executor armed
    /// to stop itself may do so before it ever answers).
    pub async fn spawn_executor(
        &mut self,
        name: &str,
        extra_env: &[(&str, String)],
        wait_ready: bool,
    ) -> anyhow::Result<&Executor> {
        let common = [
            ("EXECUTOR_ID", name.to_owned()),
            ("LOCK_SESSION_TTL", self.options.session_ttl.to_owned()),
            ("LOCK_DEFAULT_TTL", self.options.lease.to_owned()),
            ("RAIL_HOP_BUDGET", self.options.hop_budget.to_owned()),
            ("EXECUTOR_POLL_INTERVAL", "50ms".to_owned()),
            ("LOCK_CLIENT_TOKEN", self.secrets.lock_client.clone()),
            ("PAYOUT_EXECUTOR_TOKEN", self.secrets.executor.clone()),
        ];
        let (process, url) = if self.compose {
            // Clients of the stack's services on HTTPS, trusting its CA in its volume; the
            // metrics port the harness reads by the container's address, plain, said so.
            let mut env = vec![
                ("EXECUTOR_BIND", "0.0.0.0:8084".to_owned()),
                ("PAYMENT_URL", "https://payment-resource:8082".to_owned()),
                ("RAIL_PROXY_URL", "https://rail-proxy:8083".to_owned()),
                (
                    "LOCK_ENDPOINTS",
                    "https://lock-server-1:8081,https://lock-server-2:8081".to_owned(),
                ),
                ("TLS_CA_FILE", compose::CA_IN_CONTAINERS.to_owned()),
                ("UNSAFE_PLAINTEXT_HTTP", "true".to_owned()),
            ];
            env.extend(common.iter().cloned());
            env.extend(extra_env.iter().cloned());
            let container = tokio::task::block_in_place(|| Container::run_executor(name, &env))?;
            let url = format!("http://{}:8084", container.ip()?);
            (Proc::Container(container), url)
        } else {
            let port = free_port();
            let endpoints: Vec<&str> = self.lock_servers.iter().map(|l| l.url.as_str()).collect();
            let mut env = vec![
                ("EXECUTOR_BIND", format!("127.0.0.1:{port}")),
                ("PAYMENT_URL", self.payment_url.clone()),
                ("RAIL_PROXY_URL", self.proxy_url.clone()),
                ("LOCK_ENDPOINTS", endpoints.join(",")),
            ];
            env.extend(tls::client_env(self.tls.as_ref()));
            env.extend(tls::server_env(self.tls.as_ref()));
            env.extend(common.iter().cloned());
            env.extend(extra_env.iter().cloned());
            let process = ServiceProcess::spawn(name, &self.bins[4], &[], &env, &self.log_dir);
            let scheme = tls::scheme(self.tls.as_ref());
            (Proc::Local(process), format!("{scheme}://127.0.0.1:{port}"))
        };
        if wait_ready {
            wait_until_ok_with(
                self.client_for(&url),
                &format!("{name} to become ready"),
                &format!("{url}/health/ready"),
                READY_DEADLINE,
            )
            .await;
        }
        self.executors.push(Executor {
            name: name.to_owned(),
            process,
            url,
        });
        self.executors.last().context("just pushed")
    }

    /// Creates `count` payouts (idempotency keys `{prefix}-{i}`) and returns their ids.
    pub async fn create_payouts(&self, prefix: &str, count: usize) -> anyhow::Result<Vec<i64>> {
        let mut ids = Vec::with_capacity(count);
        for i in 0..count {
            let body = CreatePayout {
                amount_minor: 1_000 + i as i64,
                currency: "EUR".into(),
                beneficiary: format!("beneficiary {i}"),
            };
            let payout: Payout = self
                .http
                .post(format!("{}/v1/payouts", self.payment_url))
                .bearer_auth(&self.secrets.creator)
                .header(payment_api::IDEMPOTENCY_KEY_HEADER, format!("{prefix}-{i}"))
                .json(&body)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            ids.push(payout.payout_id);
            self.last_payout
                .fetch_max(payout.payout_id, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(ids)
    }

    /// The lock-servers' backend (`backend` label of lock metrics).
    pub fn lock_backend(&self) -> &'static str {
        match &self.lock_spec {
            Some((store, _)) => store.backend(),
            None if etcd_selected().unwrap_or(false) => "etcd",
            None => "postgres",
        }
    }

    /// The highest payout id created so far.
    pub async fn last_payout_id(&self) -> Option<i64> {
        let id = self.last_payout.load(std::sync::atomic::Ordering::SeqCst);
        (id > 0).then_some(id)
    }
}
