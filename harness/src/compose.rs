//! Compose mode of the stack: the infrastructure from `compose.yaml` (PostgreSQL, two
//! lock-server replicas, payment-resource, rail-proxy, rail-stub) as one compose project,
//! and executors as containers on its network, started with the env each scenario needs.
//! Selected with `HARNESS_STACK=compose`; needs the images of `deploy/build-images.sh`.
//! With `HARNESS_LOCK_BACKEND=etcd` the lock-servers run on compose.etcd.yaml's etcd cluster.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The compose project the harness runs (one at a time: the ports are the published ones).
pub const PROJECT: &str = "payouts-harness";
/// The services the harness takes from compose.yaml.
const INFRA: [&str; 6] = [
    "postgres",
    "lock-server-1",
    "lock-server-2",
    "payment-resource",
    "rail-proxy",
    "rail-stub",
];
/// The image executors run.
pub const EXECUTOR_IMAGE: &str = "payouts/payout-executor:local";
/// Where the stack's TLS volume (compose.yaml's `tls`) is mounted in its containers.
const TLS_DIR_IN_CONTAINERS: &str = "/tls";
/// The stack's CA certificate, as its containers read it.
pub const CA_IN_CONTAINERS: &str = "/tls/ca.pem";

/// The stack's CA certificate as compose.yaml's tls-init exports it to the host.
pub fn exported_ca() -> PathBuf {
    repo_root().join("deploy/ca/ca.pem")
}

/// Whether the harness should run against compose.
pub fn selected() -> bool {
    std::env::var("HARNESS_STACK").is_ok_and(|v| v == "compose")
}

/// Whether `HARNESS_LOCK_BACKEND=etcd` puts the lock-servers on etcd instead of PostgreSQL:
/// local stacks on the test process's own member (a fresh prefix per stack), compose with
/// compose.etcd.yaml layered over compose.yaml.
pub fn etcd_selected() -> anyhow::Result<bool> {
    match std::env::var("HARNESS_LOCK_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("postgres") => Ok(false),
        Ok("etcd") => Ok(true),
        Ok(other) => anyhow::bail!("HARNESS_LOCK_BACKEND={other}: expected postgres or etcd"),
    }
}

/// The repository root (where compose.yaml is).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn run(command: &mut Command) -> anyhow::Result<String> {
    let output = command
        .output()
        .with_context(|| format!("run {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// `docker-compose` on the project; with `HARNESS_LOCK_BACKEND=etcd`, compose.etcd.yaml is
/// layered over compose.yaml (the lock-servers on a three-member etcd cluster).
fn compose() -> Command {
    let mut command = Command::new("docker-compose");
    command.current_dir(repo_root()).args(["-p", PROJECT]);
    if etcd_selected().unwrap_or(false) {
        command.args(["-f", "compose.yaml", "-f", "compose.etcd.yaml"]);
    }
    command
}

/// Reads `KEY=value` lines of the project's `.env` after `deploy/prepare-env.sh` has filled
/// in any secret (and the signing key) it lacks: what an operator runs before `up -d`.
pub fn env_file() -> anyhow::Result<Vec<(String, String)>> {
    let prepare = repo_root().join("deploy/prepare-env.sh");
    let output = Command::new(&prepare)
        .current_dir(repo_root())
        .output()
        .with_context(|| format!("cannot run {}", prepare.display()))?;
    if !output.status.success() {
        anyhow::bail!(
            "{} failed: {}",
            prepare.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = std::fs::read_to_string(repo_root().join(".env"))?;
    Ok(text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect())
}

/// Brings the infrastructure up from a clean state (volumes included).
pub fn up() -> anyhow::Result<()> {
    let _ = run(compose().args(["down", "-v", "--remove-orphans"]));
    run(compose().args(["up", "-d"]).args(INFRA))?;
    Ok(())
}

/// Brings the whole of compose.yaml up from a clean state (executors and Prometheus too),
/// with `.env` filled in as for [`up`]: what an operator's `docker-compose up -d` runs.
pub fn up_all() -> anyhow::Result<()> {
    env_file()?;
    let _ = run(compose().args(["down", "-v", "--remove-orphans"]));
    run(compose().args(["up", "-d"]))?;
    Ok(())
}

/// Tears the project down, volumes included.
pub fn down() {
    if let Err(err) = run(compose().args(["down", "-v", "--remove-orphans"])) {
        eprintln!("compose down failed: {err}");
    }
}

/// The project's network.
pub fn network() -> String {
    format!("{PROJECT}_default")
}

/// A container the harness started or that compose runs.
#[derive(Debug)]
pub struct Container {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Remove it when dropped (executors: yes; compose services: compose does).
    pub owned: bool,
}

impl Container {
    /// Starts an executor container on the project's network with `env`.
    pub fn run_executor(name: &str, env: &[(&str, String)]) -> anyhow::Result<Self> {
        let full = format!("{PROJECT}-{name}");
        let _ = run(Command::new("docker").args(["rm", "-f", &full]));
        let mut command = Command::new("docker");
        command.args([
            "run",
            "-d",
            "--init",
            "--name",
            &full,
            "--network",
            &network(),
            "--volume",
            &format!("{PROJECT}_tls:{TLS_DIR_IN_CONTAINERS}:ro"),
        ]);
        for (key, value) in env {
            command.args(["-e", &format!("{key}={value}")]);
        }
        command.arg(EXECUTOR_IMAGE);
        let id = run(&mut command)?;
        Ok(Self {
            id,
            name: full,
            owned: true,
        })
    }

    /// A compose service's container.
    pub fn of_service(service: &str) -> anyhow::Result<Self> {
        let id = run(compose().args(["ps", "-q", service]))?;
        if id.is_empty() {
            bail!("compose service {service} has no container");
        }
        Ok(Self {
            id,
            name: service.to_owned(),
            owned: false,
        })
    }

    /// Its address on the project network.
    pub fn ip(&self) -> anyhow::Result<String> {
        let format = format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            network()
        );
        run(Command::new("docker").args(["inspect", "-f", &format, &self.id]))
    }

    /// The host pid of the service process (the child of the container's init).
    pub fn pid(&self) -> anyhow::Result<Pid> {
        let init: i32 =
            run(Command::new("docker").args(["inspect", "-f", "{{.State.Pid}}", &self.id]))?
                .parse()?;
        let children = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
            .unwrap_or_default();
        let pid = children
            .split_whitespace()
            .next()
            .map_or(Ok(init), str::parse)?;
        Ok(Pid::from_raw(pid))
    }

    /// Sends `signal` to the service process (the kernel's signal, not through init: SIGSTOP
    /// cannot be forwarded).
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        kill(self.pid()?, signal)?;
        Ok(())
    }

    /// What the container logged.
    pub fn log(&self) -> String {
        Self::log_of(&self.id)
    }

    /// Everything container `id` logged so far (stdout and stderr), empty if unreadable.
    pub fn log_of(id: &str) -> String {
        Command::new("docker")
            .args(["logs", id])
            .output()
            .map(|o| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .unwrap_or_default()
    }

    /// Waits until container `id` exits; its exit code.
    pub fn wait_exit_of(id: &str) -> anyhow::Result<i32> {
        Ok(run(Command::new("docker").args(["wait", id]))?.parse()?)
    }

    /// Cuts it off the project network.
    pub fn disconnect(&self) -> anyhow::Result<()> {
        run(Command::new("docker").args(["network", "disconnect", &network(), &self.id]))
            .map(|_| ())
    }

    /// Reconnects it to the project network.
    pub fn connect(&self) -> anyhow::Result<()> {
        run(Command::new("docker").args(["network", "connect", &network(), &self.id])).map(|_| ())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if self.owned {
            let _ = Command::new("docker").args(["rm", "-f", &self.id]).output();
        }
    }
}
