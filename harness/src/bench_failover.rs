//! `harness bench failover`: how long an election is without a serving leader when its
//! leader dies (SIGKILL) or freezes (SIGSTOP), on real processes. Each round starts a leader
//! and a follower, both `lockctl elect` with a lease of `--ttl`, waits until the follower
//! stands in line, faults the leader, and times from the fault to the follower's CMD
//! starting (the new leader serving). p50, p99 and max per backend and fault.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::bench::LoneServer;
use crate::bench_stores::BenchBackend;

/// `harness bench failover`.
#[derive(Debug, Clone, clap::Args)]
pub struct FailoverBenchOptions {
    /// Rounds per backend and fault.
    #[arg(long, default_value_t = 20)]
    pub rounds: usize,
    /// The candidates' session TTL and lease (lockctl's `--ttl`).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    pub ttl: Duration,
    /// The backends measured.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "postgres,etcd"
    )]
    pub backends: Vec<BenchBackend>,
}

/// How the leader is taken away.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL: nothing releases; the lease lapses.
    Kill,
    /// SIGSTOP: the leader's heartbeat stops with it; its CMD runs on, unaware.
    Freeze,
}

/// How long a round may take before it fails.
const ROUND_DEADLINE: Duration = Duration::from_secs(60);
/// How often a round looks at its files.
const POLL: Duration = Duration::from_millis(5);

/// Runs the benchmark and prints a table, one row per backend and fault.
pub async fn run_failover(options: &FailoverBenchOptions) -> anyhow::Result<()> {
    let lockctl = test_support::cargo_bin("lockctl").map_err(anyhow::Error::msg)?;
    let mut rows = vec![
        "| backend | fault | lease | rounds | p50 ms | p99 ms | max ms |".to_owned(),
        "|---|---|---|---|---|---|---|".to_owned(),
    ];
    for &backend in &options.backends {
        let lone = LoneServer::start(backend).await?;
        let (server, logs) = (&lone.server, &lone.logs);
        for fault in [Fault::Kill, Fault::Freeze] {
            let mut times_ms = Vec::with_capacity(options.rounds);
            for round in 0..options.rounds {
                let name = format!("failover-{fault:?}-{round}").to_lowercase();
                let rig = Round {
                    lockctl: &lockctl,
                    url: &server.url,
                    dir: logs.path(),
                    ttl: options.ttl,
                };
                times_ms.push(rig.run(&name, fault).await.with_context(|| name.clone())?);
            }
            times_ms.sort_by(f64::total_cmp);
            let at = |q: f64| times_ms[((times_ms.len() - 1) as f64 * q).round() as usize];
            rows.push(format!(
                "| {} | {fault:?} | {:?} | {} | {:.0} | {:.0} | {:.0} |",
                backend_name(backend),
                options.ttl,
                times_ms.len(),
                at(0.5),
                at(0.99),
                at(1.0)
            ));
        }
    }
    println!("{}", rows.join("\n"));
    Ok(())
}

fn backend_name(backend: BenchBackend) -> &'static str {
    match backend {
        BenchBackend::Postgres => "PostgreSQL",
        BenchBackend::Etcd => "etcd",
    }
}

/// What one round needs.
struct Round<'a> {
    lockctl: &'a Path,
    url: &'a str,
    dir: &'a Path,
    ttl: Duration,
}

impl Round<'_> {
    /// One failover: milliseconds from the fault to the follower's CMD starting.
    async fn run(&self, name: &str, fault: Fault) -> anyhow::Result<f64> {
        let leading = self.dir.join(format!("{name}.leader"));
        let followed = self.dir.join(format!("{name}.follower"));
        let mut leader = self.candidate(name, &leading)?;
        let cmd_pid = self.wait_for(&leading).await?;
        let mut follower = self.candidate(name, &followed)?;
        self.wait_in_line(name).await?;
        let pid = Pid::from_raw(leader.id().context("leader pid")? as i32);
        let faulted = now_nanos();
        kill(
            pid,
            match fault {
                Fault::Kill => Signal::SIGKILL,
                Fault::Freeze => Signal::SIGSTOP,
            },
        )?;
        let follower_cmd = self.wait_for(&followed).await?;
        let written = std::fs::read_to_string(&followed)?;
        let started: u128 = written
            .lines()
            .nth(1)
            .context("start time")?
            .trim()
            .parse()?;
        if matches!(fault, Fault::Freeze) {
            kill(pid, Signal::SIGCONT)?;
        }
        // CMDs run in process groups of their own: each is ended here, as are the lockctls.
        for cmd in [cmd_pid, follower_cmd] {
            let _ = kill(Pid::from_raw(cmd), Signal::SIGKILL);
        }
        let _ = leader.kill().await;
        let _ = follower.kill().await;
        Ok(started.saturating_sub(faulted) as f64 / 1e6)
    }

    /// `lockctl elect NAME` whose CMD writes its pid and its start time (ns) to `file`.
    fn candidate(&self, name: &str, file: &Path) -> anyhow::Result<Child> {
        let script = format!(
            "echo $$ > {f}.tmp; date +%s%N >> {f}.tmp; mv {f}.tmp {f}; exec sleep 600",
            f = file.display()
        );
        Command::new(self.lockctl)
            .args(["elect", name, "--ttl"])
            .arg(format!("{}ms", self.ttl.as_millis()))
            .args(["--", "sh", "-c", &script])
            .env("LOCK_ENDPOINTS", self.url)
            .env("LOCK_CLIENT_TOKEN", test_support::keys::LOCK_CLIENT_TOKEN)
            .env("UNSAFE_PLAINTEXT_HTTP", "true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("start lockctl elect")
    }

    /// The pid of the CMD that wrote `file`, once it has.
    async fn wait_for(&self, file: &Path) -> anyhow::Result<i32> {
        let deadline = tokio::time::Instant::now() + ROUND_DEADLINE;
        loop {
            if let Ok(text) = std::fs::read_to_string(file) {
                if let Some(pid) = text.lines().next().and_then(|p| p.trim().parse().ok()) {
                    return Ok(pid);
                }
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "{} never written",
                file.display()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Until the election `name` has one candidate in line.
    async fn wait_in_line(&self, name: &str) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + ROUND_DEADLINE;
        loop {
            let out = Command::new(self.lockctl)
                .args(["--json", "inspect", name])
                .env("LOCK_ENDPOINTS", self.url)
                .env("LOCK_CLIENT_TOKEN", test_support::keys::LOCK_CLIENT_TOKEN)
                .env("UNSAFE_PLAINTEXT_HTTP", "true")
                .output()
                .await?;
            let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            if info["waiters"] == 1 {
                return Ok(());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the follower never stood in line"
            );
            tokio::time::sleep(POLL * 10).await;
        }
    }
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}
