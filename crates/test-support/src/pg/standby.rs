//! A PostgreSQL primary with one streaming standby, both [`ThrowawayCluster`]s, for failover
//! tests and benchmarks: the standby is a base backup of the primary (`pg_basebackup -R`)
//! streaming as [`STANDBY_NAME`]. Synchronous, the primary names it in
//! `synchronous_standby_names` with `synchronous_commit=on`: a commit is answered only once
//! the standby has flushed it, so a promoted standby has every answered commit.
//! Asynchronous, it streams as well, but a commit does not wait for it.
//!
//! [`ReplicatedCluster::kill_primary`] is a real crash (SIGKILL to the postmaster and its
//! children); [`ReplicatedCluster::promote_standby`] makes the standby the primary.

use std::time::{Duration, Instant};

use super::cluster::{POLL_EVERY, ThrowawayCluster};

/// The standby's `application_name`, as the primary's `synchronous_standby_names` names it.
pub const STANDBY_NAME: &str = "standby1";
/// How long the standby may take to stream (and, synchronous, to be the sync standby).
const STREAMING_DEADLINE: Duration = Duration::from_secs(30);
/// How long a promotion may take to end recovery.
const PROMOTION_DEADLINE: Duration = Duration::from_secs(30);

/// A primary and its streaming standby, stopped and deleted on drop.
#[derive(Debug)]
pub struct ReplicatedCluster {
    primary: ThrowawayCluster,
    standby: ThrowawayCluster,
    sync: bool,
}

impl ReplicatedCluster {
    /// Starts a primary with durable commits (`fsync=on`), a standby streaming from it, and
    /// waits until the primary's `pg_stat_replication` shows the standby streaming, with
    /// `sync_state = 'sync'` when `sync` (the primary then runs with
    /// `synchronous_standby_names` naming it and `synchronous_commit=on`).
    pub fn start(sync: bool) -> Result<Self, String> {
        let mut settings = vec![
            ("fsync", "on"),
            ("synchronous_commit", "on"),
            ("wal_level", "replica"),
            ("max_wal_senders", "10"),
        ];
        if sync {
            settings.push(("synchronous_standby_names", STANDBY_NAME));
        }
        let primary = ThrowawayCluster::start(&settings)?;
        // Not the primary's synchronous_standby_names: promoted, it has no standby to wait for.
        let standby = ThrowawayCluster::standby_of(
            &primary,
            STANDBY_NAME,
            &[("fsync", "on"), ("synchronous_commit", "on")],
        )?;
        let cluster = Self {
            primary,
            standby,
            sync,
        };
        cluster.wait_streaming()?;
        Ok(cluster)
    }

    /// Whether commits wait for the standby.
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// The URL of `database` on the primary.
    pub fn primary_url(&self, database: &str) -> String {
        self.primary.url(database)
    }

    /// The URL of `database` on the standby (read-only until promoted).
    pub fn standby_url(&self, database: &str) -> String {
        self.standby.url(database)
    }

    /// A libpq-style multi-host URL of `database`: the primary first, then the standby.
    pub fn failover_url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{database}",
            self.primary.port(),
            self.standby.port()
        )
    }

    /// The primary's server.
    pub fn primary(&self) -> &ThrowawayCluster {
        &self.primary
    }

    /// The standby's server.
    pub fn standby(&self) -> &ThrowawayCluster {
        &self.standby
    }

    /// SIGKILL to the primary's postmaster and all its children; returns once they are gone.
    pub fn kill_primary(&self) -> Result<(), String> {
        self.primary.kill_hard()
    }

    /// Waits until the standby has replayed all the WAL it received (after the primary is
    /// gone, nothing more comes): what a read on it shows then is what a promotion keeps.
    pub fn wait_standby_replayed(&self) -> Result<(), String> {
        wait_for(
            "the standby to replay all it received",
            STREAMING_DEADLINE,
            || {
                let caught_up = self.standby.psql(
                    "postgres",
                    "SELECT pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()",
                )?;
                Ok(caught_up == "t")
            },
        )
    }

    /// `pg_ctl promote` on the standby, then waits until `pg_is_in_recovery()` is false.
    pub fn promote_standby(&self) -> Result<(), String> {
        self.standby.promote()?;
        wait_for(
            "the promoted standby to leave recovery",
            PROMOTION_DEADLINE,
            || {
                Ok(self
                    .standby
                    .psql("postgres", "SELECT pg_is_in_recovery()")?
                    == "f")
            },
        )
    }

    /// Waits until the primary reports the standby streaming (as its sync standby when
    /// synchronous).
    fn wait_streaming(&self) -> Result<(), String> {
        let wanted = if self.sync { "sync" } else { "async" };
        let query = format!(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}' \
             AND state = 'streaming' AND sync_state = '{wanted}'"
        );
        wait_for(
            "the standby to stream from the primary",
            STREAMING_DEADLINE,
            || Ok(self.primary.psql("postgres", &query)? == "1"),
        )
    }
}

/// Calls `check` until it answers `true`; an error of the last call if `timeout` passes.
fn wait_for(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<bool, String>,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let last = match check() {
            Ok(true) => return Ok(()),
            Ok(false) => String::from("not yet"),
            Err(e) => e,
        };
        if started.elapsed() > timeout {
            return Err(format!(
                "timed out after {timeout:?} waiting for {what}: {last}"
            ));
        }
        std::thread::sleep(POLL_EVERY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_standby_has_every_answered_commit_and_takes_over() {
        let cluster = ReplicatedCluster::start(true).expect("start a primary and a sync standby");
        assert!(cluster.is_sync());
        let primary = cluster.primary();
        primary
            .psql(
                "postgres",
                "CREATE TABLE t (v int); INSERT INTO t VALUES (7)",
            )
            .expect("write on the primary");
        assert!(
            cluster
                .standby()
                .psql("postgres", "INSERT INTO t VALUES (8)")
                .expect_err("the standby is read-only")
                .contains("read-only"),
        );
        cluster.kill_primary().expect("SIGKILL the primary");
        assert!(
            primary.psql("postgres", "SELECT 1").is_err(),
            "nothing answers on the killed primary's port"
        );
        cluster.wait_standby_replayed().expect("replayed");
        cluster.promote_standby().expect("promote the standby");
        let standby = cluster.standby();
        standby
            .psql("postgres", "INSERT INTO t VALUES (8)")
            .expect("the promoted standby takes writes");
        assert_eq!(
            standby.psql(
                "postgres",
                "SELECT string_agg(v::text, ',' ORDER BY v) FROM t"
            ),
            Ok("7,8".to_owned())
        );
    }

    #[test]
    fn an_async_standby_streams_without_being_waited_for() {
        let cluster = ReplicatedCluster::start(false).expect("start a primary and a standby");
        assert!(!cluster.is_sync());
        let primary = cluster.primary();
        assert_eq!(
            primary.psql("postgres", "SHOW synchronous_standby_names"),
            Ok(String::new())
        );
        assert_eq!(
            primary.psql(
                "postgres",
                "SELECT application_name || ' ' || sync_state FROM pg_stat_replication"
            ),
            Ok(format!("{STANDBY_NAME} async"))
        );
    }
}
