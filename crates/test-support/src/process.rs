//! Child processes for end-to-end tests: output to a log file, killed when dropped (also
//! when a test panics), signals for real pauses and shutdowns.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// A running child process whose stdout and stderr go to `log_path`.
#[derive(Debug)]
pub struct ServiceProcess {
    name: String,
    child: Child,
    log_path: PathBuf,
}

impl ServiceProcess {
    /// Starts `program` with `args` and `envs`, logging to `log_dir/{name}.log`.
    pub fn spawn(
        name: &str,
        program: impl AsRef<Path>,
        args: &[&str],
        envs: &[(&str, String)],
        log_dir: &Path,
    ) -> Self {
        let log_path = log_dir.join(format!("{name}.log"));
        let log = File::create(&log_path).expect("create the child's log file");
        let err_log = log.try_clone().expect("clone the child's log handle");
        let mut command = Command::new(program.as_ref());
        command
            .args(args)
            .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({}): {e}", program.as_ref().display()));
        Self {
            name: name.to_owned(),
            child,
            log_path,
        }
    }

    /// The process id.
    pub fn pid(&self) -> Pid {
        let raw = self.child.id().expect("the child has not been reaped yet");
        Pid::from_raw(i32::try_from(raw).expect("pid fits in i32"))
    }

    /// Sends `signal` to the process (SIGSTOP, SIGCONT, SIGTERM, ...).
    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).unwrap_or_else(|e| panic!("{signal} to {}: {e}", self.name));
    }

    /// Waits for the process to exit.
    pub async fn wait(&mut self) -> ExitStatus {
        self.child.wait().await.expect("wait for child")
    }

    /// Everything the process has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Where the process logs.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
}

/// Starts `script` (POSIX sh) in a session of its own, detached from this process: a
/// watchdog that cleans up what this test process leaves behind once it has gone, however it
/// went (a `kill -9` included). `what` names it in the error.
pub(crate) fn spawn_watchdog(script: &str, what: &str) -> Result<std::process::Child, String> {
    std::process::Command::new("setsid")
        .args(["sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn the {what} watchdog: {e}"))
}
