//! What happens to locks, as a watch stream tells it (C3 W1): [`LockEvent`] with its
//! position, and [`WatchGap`], the answer to a watcher whose position the store no longer
//! keeps. Positions rise in the order the store committed the events, across keys.

use serde::{Deserialize, Serialize};

use crate::ids::{FencingToken, LeaderValue, LockKey, OwnerId};
use crate::proof::GrantScope;

/// What happened to a grant.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A grant began (an acquire, a hand-over, a key set's member, a share): a lock's or a
    /// term's start.
    Granted,
    /// Its holder released it (L6, a closed session, an abandoned request's grant).
    Released,
    /// Its lease or its session's ended, and the store noticed (a take-over or the reaper).
    Expired,
    /// An operator revoked it (L8).
    Revoked,
    /// The grant announced a value (an election's leader: L4 `value`, L9).
    Proclaimed,
}

/// One event of a watch stream.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockEvent {
    /// Where the event stands in the store's order: a watcher resumes after it.
    pub position: u64,
    /// The key.
    pub lock_key: LockKey,
    /// What happened.
    pub kind: EventKind,
    /// The grant's token (a leader's term).
    pub fencing_token: FencingToken,
    /// The holder's owner (`granted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<OwnerId>,
    /// A share's scope (`granted`): absent for the whole key.
    #[serde(default, skip_serializing_if = "GrantScope::is_exclusive")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub scope: GrantScope,
    /// What the grant announces (`proclaimed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub value: Option<LeaderValue>,
}

impl LockEvent {
    /// An event of `kind` for `lock_key`'s grant `fencing_token`, positioned later by the store.
    pub fn new(lock_key: LockKey, kind: EventKind, fencing_token: FencingToken) -> Self {
        Self {
            position: 0,
            lock_key,
            kind,
            fencing_token,
            owner_id: None,
            scope: GrantScope::Exclusive,
            value: None,
        }
    }
}

/// The answer to a watcher resuming after a position the store no longer keeps: events after
/// `after` up to `resume_from` are gone; the stream goes on after `resume_from`, and the
/// watcher re-reads the state (L7) it cares about.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchGap {
    /// The position the watcher asked to resume after.
    pub after: u64,
    /// The stream resumes after this position.
    pub resume_from: u64,
}

/// The first event of a watch stream (`open`): the position it starts after.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchOpen {
    /// The stream sends the events after this position.
    pub after: u64,
}

/// One server-sent event of a watch stream, as it is carried (the document's schema of W1's
/// body, which schemathesis checks each event against; the server writes the events itself).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchFrame {
    /// `open`, `lock` or `gap`.
    #[cfg_attr(feature = "openapi", schema(pattern = "^(open|lock|gap)$"))]
    pub event: String,
    /// The position (`open`, `lock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// JSON: a [`WatchOpen`] (`open`), a [`LockEvent`] (`lock`) or a [`WatchGap`] (`gap`).
    pub data: String,
}

/// Whether `key` is watched by a watch of `prefix` (a key's own name is a prefix of it).
pub fn watched(prefix: &str, key: &LockKey) -> bool {
    key.as_str().starts_with(prefix)
}
