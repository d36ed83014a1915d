//! A PostgreSQL cluster from the machine's binaries in a temporary directory, on a free port.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use super::tools::{path_str, postgres_bin_dir, run};
use crate::net::free_port;

/// How many times a cluster start is retried when its port was taken meanwhile.
const START_ATTEMPTS: u32 = 3;
/// How long the processes of a SIGKILLed server may take to be gone.
const KILL_DEADLINE: Duration = Duration::from_secs(10);
/// How often a wait of this fixture looks again.
pub(super) const POLL_EVERY: Duration = Duration::from_millis(20);

/// A PostgreSQL cluster in a temporary directory, stopped and deleted on drop and, through
/// a watchdog process, when the owning process exits without dropping it.
#[derive(Debug)]
pub struct ThrowawayCluster {
    pub(super) dir: TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres_user: bool,
    watchdog: Option<std::process::Child>,
    env: Vec<(&'static str, String)>,
}

impl ThrowawayCluster {
    /// Initialises and starts a cluster with `settings` (`-c name=value` each).
    pub fn start(settings: &[(&str, &str)]) -> Result<Self, String> {
        Self::start_with_env(settings, Vec::new())
    }

    /// [`ThrowawayCluster::start`] with `env` in the server's environment (e.g. a
    /// [`crate::faketime::FakeClock`]'s).
    pub fn start_with_env(
        settings: &[(&str, &str)],
        env: Vec<(&'static str, String)>,
    ) -> Result<Self, String> {
        let mut cluster = Self::unstarted(env)?;
        let data = cluster.data_dir();
        cluster.run_pg(
            "initdb",
            &[
                "-D",
                path_str(&data)?,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        cluster.start_on_a_free_port(settings)?;
        Ok(cluster)
    }

    /// A hot standby of `primary`: a base backup (`pg_basebackup -R`, streaming as
    /// `application_name`), started with `settings` on a port of its own.
    pub(super) fn standby_of(
        primary: &Self,
        application_name: &str,
        settings: &[(&str, &str)],
    ) -> Result<Self, String> {
        let mut standby = Self::unstarted(Vec::new())?;
        let data = standby.data_dir();
        let source = format!(
            "host=127.0.0.1 port={} user=postgres application_name={application_name}",
            primary.port
        );
        standby.run_pg(
            "pg_basebackup",
            &[
                "-D",
                path_str(&data)?,
                "-d",
                &source,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
        )?;
        standby.start_on_a_free_port(settings)?;
        Ok(standby)
    }

    /// A temporary directory for a cluster, owned by the user the server runs as.
    fn unstarted(env: Vec<(&'static str, String)>) -> Result<Self, String> {
        let bin = postgres_bin_dir()?;
        let as_postgres_user = nix::unistd::geteuid().is_root();
        let dir = tempfile::Builder::new()
            .prefix("lockpg-")
            .tempdir()
            .map_err(|e| format!("create a temp dir: {e}"))?;
        if as_postgres_user {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path()))?;
        }
        Ok(Self {
            dir,
            bin,
            port: 0,
            as_postgres_user,
            watchdog: None,
            env,
        })
    }

    /// Starts the server of the data directory on a free port, with its watchdog.
    fn start_on_a_free_port(&mut self, settings: &[(&str, &str)]) -> Result<(), String> {
        let data = self.data_dir();
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            self.port = free_port();
            let mut options = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300",
                self.port,
                path_str(self.dir.path())?
            );
            for (name, value) in settings {
                options.push_str(&format!(" -c {name}={value}"));
            }
            let log = self.dir.path().join("postgres.log");
            match self.run_pg(
                "pg_ctl",
                &[
                    "-D",
                    path_str(&data)?,
                    "-l",
                    path_str(&log)?,
                    "-o",
                    &options,
                    "-w",
                    "start",
                ],
            ) {
                Ok(()) => {
                    self.watchdog = Some(self.spawn_watchdog()?);
                    return Ok(());
                }
                Err(e) => {
                    last_error =
                        format!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default())
                }
            }
        }
        Err(format!(
            "PostgreSQL did not start after {START_ATTEMPTS} attempts: {last_error}"
        ))
    }

    /// The URL of `database` on this cluster.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The TCP port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the cluster's binaries (`pgbench` and friends).
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A fast restart (`pg_ctl restart -m fast`: clients disconnected, a clean shutdown, the
    /// same settings), waiting until it accepts connections again.
    pub fn restart_fast(&self) -> Result<(), String> {
        let data = self.data_dir();
        let log = self.dir.path().join("postgres.log");
        self.run_pg(
            "pg_ctl",
            &[
                "-D",
                path_str(&data)?,
                "-l",
                path_str(&log)?,
                "-m",
                "fast",
                "-w",
                "restart",
            ],
        )
    }

    /// The postmaster's pid and its children's (every backend and helper): what a stall
    /// stops with SIGSTOP.
    pub fn pids(&self) -> Vec<i32> {
        let Some(postmaster) = std::fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
        else {
            return Vec::new();
        };
        let children =
            std::fs::read_to_string(format!("/proc/{postmaster}/task/{postmaster}/children"))
                .unwrap_or_default();
        std::iter::once(postmaster)
            .chain(children.split_whitespace().filter_map(|p| p.parse().ok()))
            .collect()
    }

    /// SIGKILL to the postmaster and every child it has (a crash: no shutdown checkpoint, no
    /// goodbye to clients or standbys). Returns once none of them runs any more.
    pub fn kill_hard(&self) -> Result<(), String> {
        let pids = self.pids();
        if pids.is_empty() {
            return Err(format!("no postmaster runs on port {}", self.port));
        }
        for pid in &pids {
            // One that exited meanwhile is what the signal was for.
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        let started = Instant::now();
        while pids.iter().any(|pid| runs(*pid)) {
            if started.elapsed() > KILL_DEADLINE {
                return Err(format!(
                    "PostgreSQL processes {pids:?} still run {KILL_DEADLINE:?} after SIGKILL"
                ));
            }
            std::thread::sleep(POLL_EVERY);
        }
        Ok(())
    }

    /// `pg_ctl promote`, waiting until the server has left recovery.
    pub(super) fn promote(&self) -> Result<(), String> {
        let data = self.data_dir();
        self.run_pg("pg_ctl", &["-D", path_str(&data)?, "-w", "promote"])
    }

    /// One statement through `psql` on `database`: its output, unaligned, without headers.
    pub(super) fn psql(&self, database: &str, sql: &str) -> Result<String, String> {
        let output = self
            .pg_command("psql")
            .args([
                "-X",
                "-q",
                "-t",
                "-A",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                database,
            ])
            .args(["-c", sql])
            .output()
            .map_err(|e| format!("run psql: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
        } else {
            Err(format!(
                "psql on port {} ({sql}): {}",
                self.port,
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }

    fn pg_command(&self, tool: &str) -> Command {
        let program = self.bin.join(tool);
        let mut command = if self.as_postgres_user {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.envs(self.env.iter().map(|(k, v)| (*k, v.as_str())));
        command
    }

    fn run_pg(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        run(self.pg_command(tool).args(args))
    }

    /// A detached shell that waits for this process to exit, then stops the cluster and
    /// removes its directory.
    fn spawn_watchdog(&self) -> Result<std::process::Child, String> {
        let pg_ctl = self.bin.join("pg_ctl");
        let runner = if self.as_postgres_user {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {runner}'{pg_ctl}' -D '{data}' -m immediate stop >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            pg_ctl = pg_ctl.display(),
            data = self.data_dir().display(),
            dir = self.dir.path().display(),
        );
        Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn the cluster watchdog: {e}"))
    }
}

impl Drop for ThrowawayCluster {
    fn drop(&mut self) {
        let data = self.data_dir();
        if let Some(data) = data.to_str() {
            let _ = self.run_pg("pg_ctl", &["-D", data, "-m", "immediate", "stop"]);
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// Whether process `pid` runs (a zombie has stopped running: only its parent's wait is left).
fn runs(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name, which is in parentheses and may hold spaces.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}
