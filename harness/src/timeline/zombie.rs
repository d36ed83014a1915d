//! Zombie episodes: a paused holder whose stale write was fenced, numbered in the order the
//! checker found them, each with the name of its own picture (the whole run's picture links
//! to it).

use chrono::{DateTime, Utc};

use crate::history::{History, WriteOp};

/// One zombie episode: the fenced stale write and when its grant began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zombie<'h> {
    /// Its number in the run (`N` of `zombie-N-payout-ID.svg`).
    pub number: usize,
    /// The stale write the resource fenced.
    pub write: &'h WriteOp,
    /// When the stale grant was logged: the episode's start.
    pub granted_at: DateTime<Utc>,
}

impl Zombie<'_> {
    /// The file of the episode's own picture, beside the whole run's `timeline.svg`.
    pub fn file_name(&self) -> String {
        format!("zombie-{}-payout-{}.svg", self.number, self.write.payout_id)
    }

    /// The key of the payout it wrote to.
    pub fn key(&self) -> String {
        format!("payout:{}", self.write.payout_id)
    }
}

/// The zombie episodes: each write of `refused` (the fenced writes after a pause) whose grant
/// the history holds, numbered from 0.
pub fn episodes<'h>(history: &'h History, refused: &'h [WriteOp]) -> Vec<Zombie<'h>> {
    refused
        .iter()
        .filter_map(|w| {
            let key = format!("payout:{}", w.payout_id);
            let granted_at = history
                .spans
                .get(&key)?
                .iter()
                .find(|s| s.token == w.token)?
                .granted_at;
            Some((w, granted_at))
        })
        .enumerate()
        .map(|(number, (write, granted_at))| Zombie {
            number,
            write,
            granted_at,
        })
        .collect()
}
