//! Faults a test or the campaign injects into a running stack: kills and restarts with
//! supervision, partitions of an executor.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::Signal;
use test_support::ServiceProcess;

use super::process::Proc;
use super::{RESTART_ATTEMPTS, RESTART_READY_DEADLINE, Stack};

impl Stack {
    /// Restarts replica `index` (after it was killed) on its port, as a new incarnation with
    /// its own log; the old process is kept for its log. Like a supervisor, it starts the
    /// process again until it answers ready (a replica started while the store is down
    /// exits: "cannot open the store").
    pub async fn restart_lock_server(&mut self, index: usize) -> anyhow::Result<()> {
        let (store, env) = self
            .lock_spec
            .clone()
            .context("restarts need local processes")?;
        let url = self.lock_servers[index].url.clone();
        let port = url.rsplit(':').next().unwrap_or_default().to_owned();
        let mut all = store.env();
        all.push(("LOCK_SERVER_BIND", format!("127.0.0.1:{port}")));
        all.extend(env);
        let binary = self.bins[0].clone();
        let name = format!("lock-server-{}", index + 1);
        let process = self.supervise(&name, &binary, &all, &url).await?;
        let old = std::mem::replace(&mut self.lock_servers[index].process, process);
        self.retired.push(old);
        Ok(())
    }

    /// Starts `binary` as a new incarnation of `name` until it answers `url/health/ready`
    /// (each incarnation with its own log, the failed ones retired).
    pub(super) async fn supervise(
        &mut self,
        name: &str,
        binary: &Path,
        env: &[(&str, String)],
        url: &str,
    ) -> anyhow::Result<Proc> {
        for _ in 0..RESTART_ATTEMPTS {
            self.incarnations += 1;
            let log_name = format!("{name}.{}", self.incarnations);
            let process = ServiceProcess::spawn(&log_name, binary, &[], env, &self.log_dir);
            if self.ready_within(url, RESTART_READY_DEADLINE).await {
                return Ok(Proc::Local(process));
            }
            process.signal(Signal::SIGKILL);
            self.retired.push(Proc::Local(process));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        bail!("{name} did not become ready after {RESTART_ATTEMPTS} starts")
    }

    /// Whether `url/health/ready` answers 200 within `deadline` (never panics).
    pub(super) async fn ready_within(&self, url: &str, deadline: Duration) -> bool {
        let started = std::time::Instant::now();
        while started.elapsed() < deadline {
            let ok = self
                .client_for(url)
                .get(format!("{url}/health/ready"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    pub(super) fn service_index(&self, name: &str) -> anyhow::Result<usize> {
        self.service_specs
            .iter()
            .position(|s| s.name == name)
            .with_context(|| format!("no local service {name}"))
    }

    /// kill -9 of service `name` (payment-resource, rail-stub, rail-proxy).
    pub fn kill_service(&self, name: &str) -> anyhow::Result<()> {
        let index = self.service_index(name)?;
        self.services[index].signal(Signal::SIGKILL);
        Ok(())
    }

    /// Starts service `name` again (after a kill), as a new incarnation with its own log,
    /// until it answers ready.
    pub async fn restart_service(&mut self, name: &str) -> anyhow::Result<()> {
        let index = self.service_index(name)?;
        let spec = self.service_specs[index].clone();
        let process = self
            .supervise(spec.name, &spec.binary, &spec.env, &spec.url)
            .await?;
        let old = std::mem::replace(&mut self.services[index], process);
        self.retired.push(old);
        Ok(())
    }

    /// Cuts executor `index` off the project network (`docker network disconnect`), or
    /// reconnects it and learns its new address (compose mode).
    pub fn partition_executor(&mut self, index: usize, cut: bool) -> anyhow::Result<()> {
        let executor = &mut self.executors[index];
        let container = executor
            .process
            .container()
            .context("partitions need compose mode")?;
        if cut {
            container.disconnect()
        } else {
            container.connect()?;
            executor.url = format!("http://{}:8084", container.ip()?);
            Ok(())
        }
    }

    /// Every service answers `/health/ready` (none needs a manual restart).
    pub async fn all_ready(&self) -> anyhow::Result<()> {
        let urls = self
            .lock_servers
            .iter()
            .map(|l| l.url.clone())
            .chain([
                self.payment_url.clone(),
                self.proxy_url.clone(),
                self.rail_url.clone(),
            ])
            .chain(self.executors.iter().map(|e| e.url.clone()));
        for url in urls {
            let status = self
                .client_for(&url)
                .get(format!("{url}/health/ready"))
                .send()
                .await
                .with_context(|| format!("{url} does not answer"))?
                .status();
            if !status.is_success() {
                bail!("{url}/health/ready answered {status}");
            }
        }
        Ok(())
    }
}
