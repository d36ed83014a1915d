//! What of PostgreSQL's settings can lose an answered grant (`LockStore::durability_risks`):
//! a crash that undoes a commit (`fsync` or `synchronous_commit` off), or a failover to a
//! standby that lacks it. With standbys streaming from the primary, or a URL that names
//! several hosts (failover intended), a commit must wait for a standby's flush:
//! `synchronous_standby_names` names one and `synchronous_commit` is `on` or `remote_apply`.

use super::{PostgresStore, map_err};
use crate::store::StoreError;

/// Settings whose `off` lets PostgreSQL acknowledge a commit that a crash undoes.
const DURABILITY_SETTINGS: [&str; 2] = ["fsync", "synchronous_commit"];
/// The `synchronous_commit` values whose answered commit a synchronous standby has flushed.
const STANDBY_FLUSHED: [&str; 2] = ["on", "remote_apply"];

/// Standbys streaming this server's WAL: not a base backup being taken, nor a logical
/// replication consumer (change data capture), which no failover promotes.
const PHYSICAL_STANDBYS: &str = "
SELECT count(*) FROM pg_stat_replication r
 WHERE r.state <> 'backup'
   AND NOT EXISTS (SELECT 1 FROM pg_replication_slots s
                    WHERE s.active_pid = r.pid AND s.slot_type = 'logical')";

impl PostgresStore {
    /// Each setting that can lose an answered grant, as one line naming it.
    pub(super) async fn settings_risks(&self) -> Result<Vec<String>, StoreError> {
        let mut risks = Vec::new();
        // `off` is the only value of either that acknowledges a commit a crash can undo.
        for setting in DURABILITY_SETTINGS {
            if self.show(setting).await? == "off" {
                risks.push(format!(
                    "PostgreSQL runs with {setting}=off: a crash can undo committed grants and a token can be handed out twice"
                ));
            }
        }
        let standbys: i64 = sqlx::query_scalar(PHYSICAL_STANDBYS)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        let hosts = self.hosts.count();
        if standbys == 0 && hosts < 2 {
            return Ok(risks);
        }
        let why = if standbys > 0 {
            format!("{standbys} standby(s) stream from the primary")
        } else {
            format!("DATABASE_URL names {hosts} hosts to fail over to")
        };
        let commit = self.show("synchronous_commit").await?;
        if self
            .show("synchronous_standby_names")
            .await?
            .trim()
            .is_empty()
        {
            risks.push(format!(
                "{why} but synchronous_standby_names is empty: a standby promoted after a crash can lack answered grants and hand a token out twice"
            ));
        } else if commit != "off" && !STANDBY_FLUSHED.contains(&commit.as_str()) {
            risks.push(format!(
                "{why} but synchronous_commit={commit}: a commit is answered before the synchronous standby has flushed it (needs on or remote_apply)"
            ));
        }
        Ok(risks)
    }

    async fn show(&self, setting: &str) -> Result<String, StoreError> {
        sqlx::query_scalar(&format!("SHOW {setting}"))
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)
    }
}
