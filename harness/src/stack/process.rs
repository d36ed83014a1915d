//! A service process as the stack holds it (a local child or a compose container), its
//! signals and its log.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use test_support::ServiceProcess;

use crate::compose::{self, Container};

/// How long a service may take to become ready.
pub const READY_DEADLINE: Duration = Duration::from_secs(30);

/// Whether process `pid` is stopped (state `T` in `/proc/PID/stat`: SIGSTOP).
pub fn pid_stopped(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw()))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// A service as the harness sees it: a local process, or a container (compose mode).
#[derive(Debug)]
pub enum Proc {
    /// A child process of the harness.
    Local(ServiceProcess),
    /// A container.
    Container(Container),
}

/// Where a process's log can be read: its file, or `docker logs` of its container.
#[derive(Debug, Clone)]
pub enum LogSource {
    /// A local process's log file.
    File(PathBuf),
    /// A container's id.
    Docker(String),
}

impl LogSource {
    /// Everything logged so far (empty if unreadable).
    pub fn read(&self) -> String {
        match self {
            Self::File(path) => std::fs::read_to_string(path).unwrap_or_default(),
            Self::Docker(id) => compose::Container::log_of(id),
        }
    }
}

impl Proc {
    /// The host pid of the service process.
    pub fn pid(&self) -> Pid {
        match self {
            Self::Local(p) => p.pid(),
            Self::Container(c) => c.pid().expect("the container's service pid"),
        }
    }

    /// Sends `signal` to the service process.
    pub fn signal(&self, signal: Signal) {
        match self {
            Self::Local(p) => p.signal(signal),
            Self::Container(c) => c.signal(signal).expect("signal the container's service"),
        }
    }

    /// Whether the process is stopped (state `T` in `/proc/PID/stat`: SIGSTOP).
    pub fn is_stopped(&self) -> bool {
        pid_stopped(self.pid())
    }

    /// Polls until the process is stopped; panics naming `what` after `deadline`.
    pub async fn wait_stopped(&self, what: &str, deadline: Duration) {
        test_support::poll_until(what, deadline, || async { self.is_stopped().then_some(()) })
            .await;
    }

    /// Waits up to `deadline` for the process to exit; its exit code.
    pub async fn wait_exit(&mut self, deadline: Duration) -> anyhow::Result<i32> {
        match self {
            Self::Local(p) => {
                let status = tokio::time::timeout(deadline, p.wait())
                    .await
                    .with_context(|| format!("no exit within {deadline:?}"))?;
                status.code().context("killed by a signal")
            }
            Self::Container(c) => {
                let id = c.id.clone();
                let wait = tokio::task::spawn_blocking(move || Container::wait_exit_of(&id));
                tokio::time::timeout(deadline, wait)
                    .await
                    .with_context(|| format!("no exit within {deadline:?}"))??
            }
        }
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        match self {
            Self::Local(p) => p.log(),
            Self::Container(c) => c.log(),
        }
    }

    /// Where its log can be read again later, without the process at hand.
    pub fn log_source(&self) -> LogSource {
        match self {
            Self::Local(p) => LogSource::File(p.log_path().to_path_buf()),
            Self::Container(c) => LogSource::Docker(c.id.clone()),
        }
    }

    /// Where its log is, for humans.
    pub fn describe(&self) -> String {
        match self {
            Self::Local(p) => p.log_path().display().to_string(),
            Self::Container(c) => format!("docker logs {}", c.name),
        }
    }

    /// The container, in compose mode.
    pub fn container(&self) -> Option<&Container> {
        match self {
            Self::Container(c) => Some(c),
            Self::Local(_) => None,
        }
    }
}
