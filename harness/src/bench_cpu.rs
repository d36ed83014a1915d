//! Where a grant's CPU goes: the CPU time the lock-server, the store's processes and the
//! load generator (the client) each spent during one side of `harness bench locks`, read
//! from `/proc` before and after the side.
//!
//! A process's time is its own (every thread) plus its children's that it has waited for
//! (`cutime`, `cstime`); a store's time adds its live children's (PostgreSQL's backends are
//! children of the postmaster). The client is the harness itself (the SDK's tasks and
//! heartbeat threads) and the children it has reaped (`pgbench`), never its live children
//! (the lock-server and etcd are counted as what they are). Counted in clock ticks
//! (`CLK_TCK`, 10 ms here): over a side of seconds and thousands of grants, a few µs a grant.

use anyhow::Context;

/// Microseconds of CPU (user + system) process `pid` has used so far (its CPU clock).
pub(crate) fn cpu_micros(pid: nix::unistd::Pid) -> anyhow::Result<f64> {
    use nix::time::{ClockId, clock_gettime};
    let clock = ClockId::pid_cpu_clock_id(pid).context("the CPU clock of a process")?;
    let spent = clock_gettime(clock).context("read a process's CPU clock")?;
    Ok(spent.tv_sec() as f64 * 1e6 + spent.tv_nsec() as f64 / 1e3)
}

/// Microseconds in one second.
const MICROS_PER_SECOND: f64 = 1e6;

/// The processes one side's CPU is read from.
#[derive(Debug, Clone, Default)]
pub(crate) struct CpuParts {
    /// The lock-server measured (none for pgbench's and etcd's own sides).
    pub(crate) server: Option<i32>,
    /// The store's root processes: the postmasters (primary, standby) or etcd's members.
    pub(crate) store: Vec<i32>,
}

/// CPU microseconds spent so far by each part.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuReading {
    server_us: Option<f64>,
    store_us: f64,
    client_us: f64,
}

/// CPU microseconds per grant spent by each part during a side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CpuPerGrant {
    pub(crate) server_us: Option<f64>,
    pub(crate) store_us: Option<f64>,
    pub(crate) client_us: f64,
}

impl CpuParts {
    /// What each part has spent so far.
    pub(crate) fn read(&self) -> anyhow::Result<CpuReading> {
        let ticks = clock_ticks_per_second()?;
        let server_us = match self.server {
            Some(pid) => Some(process_ticks(pid, true)? as f64 / ticks * MICROS_PER_SECOND),
            None => None,
        };
        let mut store_ticks = 0;
        for &root in &self.store {
            store_ticks += tree_ticks(root)?;
        }
        let client_ticks = process_ticks(std::process::id() as i32, true)?;
        Ok(CpuReading {
            server_us,
            store_us: store_ticks as f64 / ticks * MICROS_PER_SECOND,
            client_us: client_ticks as f64 / ticks * MICROS_PER_SECOND,
        })
    }
}

impl CpuReading {
    /// What each part spent from `self` to `later`, per grant of `granted`.
    pub(crate) fn per_grant(
        &self,
        later: &CpuReading,
        granted: u64,
        has_store: bool,
    ) -> CpuPerGrant {
        let grants = granted.max(1) as f64;
        CpuPerGrant {
            server_us: later
                .server_us
                .zip(self.server_us)
                .map(|(after, before)| (after - before) / grants),
            store_us: has_store.then(|| (later.store_us - self.store_us) / grants),
            client_us: (later.client_us - self.client_us) / grants,
        }
    }
}

/// `sysconf(_SC_CLK_TCK)`: the unit of `/proc/<pid>/stat`'s times.
fn clock_ticks_per_second() -> anyhow::Result<f64> {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .context("sysconf(CLK_TCK)")?
        .context("CLK_TCK has no value")?;
    Ok(ticks as f64)
}

/// The fields of `/proc/<pid>/stat` after the command's closing parenthesis (the command
/// may hold spaces): field 3 (`state`) is the first.
fn stat_fields(pid: i32) -> anyhow::Result<Vec<u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    let after = text
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("a /proc stat line without its command")?;
    // Non-numeric fields (the state letter) read as 0: only times and pids are used.
    Ok(after
        .split_whitespace()
        .map(|field| field.parse().unwrap_or(0))
        .collect())
}

/// Index (into [`stat_fields`]) of `ppid`, field 4.
const STAT_PPID: usize = 1;
/// Index of `utime`, field 14; `stime`, `cutime`, `cstime` follow.
const STAT_UTIME: usize = 11;

/// Clock ticks `pid` has spent (user + system), with its reaped children's when `reaped`.
fn process_ticks(pid: i32, reaped: bool) -> anyhow::Result<u64> {
    let fields = stat_fields(pid)?;
    let times = fields
        .get(STAT_UTIME..STAT_UTIME + 4)
        .context("a /proc stat line too short")?;
    let own = times[0] + times[1];
    Ok(if reaped {
        own + times[2] + times[3]
    } else {
        own
    })
}

/// Clock ticks of `root`, its reaped children and its live children (with theirs): a
/// postmaster and every backend, or an etcd member.
fn tree_ticks(root: i32) -> anyhow::Result<u64> {
    let mut total = process_ticks(root, true)?;
    let children = std::fs::read_to_string(format!("/proc/{root}/task/{root}/children"))
        .with_context(|| format!("read the children of {root}"))?;
    for child in children.split_whitespace().filter_map(|p| p.parse().ok()) {
        // A child that ended between the two reads is in `root`'s reaped time next time.
        if let Ok(fields) = stat_fields(child)
            && fields.get(STAT_PPID) == Some(&(root as u64))
        {
            total += process_ticks(child, true).unwrap_or(0);
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_is_charged_for_its_own_work() {
        let parts = CpuParts::default();
        let before = parts.read().unwrap();
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(200) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let per = before.per_grant(&parts.read().unwrap(), 1, false);
        assert!(
            per.client_us >= 100_000.0,
            "200 ms of spinning read as {per:?}"
        );
        assert_eq!(per.server_us, None);
        assert_eq!(per.store_us, None);
    }
}
