//! What operators change under live traffic, as they would: rotating the lock service's
//! signing key (the resources trust a new key, their keys file rewritten, then SIGHUP; the
//! replicas switch to it one at a time, drain, exit, start with the new key, so the service
//! never stops; the resources retire the old key), and the named credentials every service
//! accepts (files rewritten, then SIGHUP). Local processes only.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::Signal;

use super::process::Proc;
use super::{LOCK_CREDENTIALS_FILE, PAYMENT_CREDENTIALS_FILE, Stack, TRUSTED_KEYS_FILE};

/// How long a replica may take to drain and exit after SIGTERM.
const DRAIN_DEADLINE: Duration = Duration::from_secs(15);
/// How long a service may take to log a reload after SIGHUP.
const RELOAD_DEADLINE: Duration = Duration::from_secs(10);

impl Stack {
    /// Everything service `name`'s current incarnation logged so far.
    pub fn service_log(&self, name: &str) -> anyhow::Result<String> {
        Ok(self.services[self.service_index(name)?].log())
    }

    /// The file payment-resource and rail-proxy read their trusted keys from.
    pub fn trusted_keys_file(&self) -> PathBuf {
        self.log_dir.join(TRUSTED_KEYS_FILE)
    }

    /// payment-resource and rail-proxy trust exactly `entries` (`key_id=base64` each) once
    /// this returns: the file is rewritten, each gets SIGHUP, and each logged the reload.
    pub async fn trust_keys(&self, entries: &[String]) -> anyhow::Result<()> {
        anyhow::ensure!(!self.compose, "key rotation needs local processes");
        std::fs::write(self.trusted_keys_file(), entries.join("\n") + "\n")?;
        for name in ["payment-resource", "rail-proxy"] {
            let service = &self.services[self.service_index(name)?];
            hang_up(
                service,
                "fence_keys_reloaded",
                &format!("{name} to reload its trusted keys"),
            )
            .await;
        }
        Ok(())
    }

    /// From the moment this returns, the lock-servers accept exactly `lock_lines` besides
    /// the environment's role secrets, and payment-resource and rail-proxy exactly
    /// `payment_lines` (credentials-file lines): both files are rewritten, every service
    /// gets SIGHUP, and each logged the reload.
    pub async fn accept_credentials(
        &self,
        lock_lines: &[String],
        payment_lines: &[String],
    ) -> anyhow::Result<()> {
        anyhow::ensure!(!self.compose, "credential files need local processes");
        let text = |lines: &[String]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        std::fs::write(self.log_dir.join(LOCK_CREDENTIALS_FILE), text(lock_lines))?;
        std::fs::write(
            self.log_dir.join(PAYMENT_CREDENTIALS_FILE),
            text(payment_lines),
        )?;
        let mut services: Vec<(&str, &Proc)> = self
            .lock_servers
            .iter()
            .map(|l| ("a lock-server", &l.process))
            .collect();
        for name in ["payment-resource", "rail-proxy"] {
            services.push((name, &self.services[self.service_index(name)?]));
        }
        for (name, service) in services {
            hang_up(
                service,
                "credentials_reloaded",
                &format!("{name} to reload its credentials"),
            )
            .await;
        }
        Ok(())
    }

    /// Every replica signs with `key_id`'s `secret` (base64) from now on: one at a time, each
    /// drains (SIGTERM), exits and starts again with the new key, so another replica always
    /// serves.
    pub async fn sign_with(&mut self, key_id: &str, secret: &str) -> anyhow::Result<()> {
        let (_, env) = self
            .lock_spec
            .as_mut()
            .context("key rotation needs local processes")?;
        env.retain(|(k, _)| !matches!(*k, "LOCK_SIGNING_KEY" | "LOCK_SIGNING_KEY_ID"));
        env.push(("LOCK_SIGNING_KEY", secret.to_owned()));
        env.push(("LOCK_SIGNING_KEY_ID", key_id.to_owned()));
        for index in 0..self.lock_servers.len() {
            let replica = &mut self.lock_servers[index].process;
            replica.signal(Signal::SIGTERM);
            replica.wait_exit(DRAIN_DEADLINE).await?;
            self.restart_lock_server(index).await?;
        }
        Ok(())
    }
}

/// Sends `service` SIGHUP and waits until it logged `event` once more than before.
async fn hang_up(service: &Proc, event: &str, what: &str) {
    let needle = format!("\"{event}\"");
    let reloads = || service.log().matches(needle.as_str()).count();
    let before = reloads();
    service.signal(Signal::SIGHUP);
    test_support::poll_until(what, RELOAD_DEADLINE, || async {
        (reloads() > before).then_some(())
    })
    .await;
}
