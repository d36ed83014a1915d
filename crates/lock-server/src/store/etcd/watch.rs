//! Wake-ups: one watch on the grant, share and queue keys per store; a freed key (or a freed
//! share that makes room for its head) with places wakes its queue's head on every replica.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Weak;
use std::time::Duration;

use etcd_client::{
    Client, Event, EventType, GetOptions, TxnOp, WatchFilterType, WatchOptions, WatchStream,
};
use lock_api::{Claim, LockKey, SessionId};
use lock_store::{StoreError, Wake};

use super::EtcdStore;
use super::codec::{Place, ReadGrant};
use super::keys::Keys;
use super::members::TXN_OPS_MAX;
use super::wakes::WakeHub;

/// Pause before the wake-up watch is opened again after it broke.
const WATCH_RETRY_MS: u64 = 500;
/// How often an idle wake-up watch checks whether its store is still in use.
const WATCH_IDLE_CHECK_MS: u64 = 5_000;
/// Keys whose free the watch remembers having seen before any of their places: past it
/// they are forgotten (a waiter then missed by its wake-up asks again on its own recheck).
const UNSEEN_FREES_MAX: usize = 16_384;

impl EtcdStore {
    /// Opens the wake-up watch: the places there are now (one read) and, from the next
    /// revision on, every deletion of a grant record or a share record and every change of a
    /// place.
    pub(super) async fn open_watch(&self) -> Result<WakeWatch, StoreError> {
        let place_prefix = self.keys.section("w");
        let (revision, mut read) = self
            .members
            .read_at(vec![TxnOp::get(
                place_prefix.as_str(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )])
            .await?;
        let mut queued = QueuedKeys::default();
        for kv in read.pop().unwrap_or_default() {
            if let Some((key, session)) = self.keys.parse_place_path(kv.key()) {
                queued.insert(key, session);
            }
        }
        let grant_prefix = self.keys.section("g");
        let hold_prefix = self.keys.section("h");
        let from = revision + 1;
        // A client of its own, which pings seldom enough for etcd to keep a long stream
        // open (`WATCH_PING_INTERVAL_MS`), on the member the other calls go to.
        let (index, endpoint, options) = self.members.watch_target();
        let (client, stream) = self
            .members
            .bounded(index, "watch", async move {
                let client = Client::connect([endpoint], Some(options)).await?;
                let mut stream = client
                    .watch_client()
                    .watch(
                        grant_prefix,
                        Some(
                            WatchOptions::new()
                                .with_prefix()
                                .with_start_revision(from)
                                .with_filters([WatchFilterType::NoPut]),
                        ),
                    )
                    .await?;
                stream
                    .watch(
                        hold_prefix,
                        Some(
                            WatchOptions::new()
                                .with_prefix()
                                .with_start_revision(from)
                                .with_filters([WatchFilterType::NoPut]),
                        ),
                    )
                    .await?;
                stream
                    .watch(
                        place_prefix,
                        Some(WatchOptions::new().with_prefix().with_start_revision(from)),
                    )
                    .await?;
                Ok((client, stream))
            })
            .await?;
        Ok(WakeWatch {
            _client: client,
            stream,
            queued,
            unseen_frees: HashMap::new(),
        })
    }

    /// The wake-up watch's task, until the store is gone: serves the watch, and when it
    /// breaks (member lost, leader lost, history compacted) opens it again and wakes every
    /// waiter, since wake-ups may have been missed meanwhile.
    pub(super) async fn run_watch(self, hub: Weak<WakeHub>, mut opened: Option<WakeWatch>) {
        loop {
            let mut watch = match opened.take() {
                Some(watch) => watch,
                None => {
                    let watch = loop {
                        tokio::time::sleep(Duration::from_millis(WATCH_RETRY_MS)).await;
                        if hub.strong_count() == 0 {
                            return;
                        }
                        match self.open_watch().await {
                            Ok(watch) => break watch,
                            Err(err) => {
                                tracing::debug!(event = "etcd_wake_watch_open_failed", error = %err);
                            }
                        }
                    };
                    if let Some(hub) = hub.upgrade() {
                        hub.deliver(&Wake::Everyone);
                    }
                    watch
                }
            };
            let Some(reason) = self.serve_watch(&hub, &mut watch).await else {
                return;
            };
            tracing::warn!(event = "etcd_wake_watch_restarting", reason = %reason);
        }
    }

    /// Serves `watch` until it breaks (the reason) or the store is gone (`None`). A deleted
    /// grant record, share record or place frees a key, makes room in it, or moves its
    /// queue: if the key has places, its head waiter is woken when its claim could now be
    /// granted ([`Self::queue_head`]). (A share granted to a queued reader deletes its place:
    /// the next reader in line is woken to share the key beside it.)
    ///
    /// etcd orders the events of one watched prefix, not those of two: a watcher catching
    /// up (just opened, or fallen behind) may deliver a release after a place created
    /// before it, when the key had no known place yet and nobody was woken. Such a place is
    /// checked when it is seen ([`WakeWatch::take`]): when it is the head and its claim could
    /// be granted, it is woken.
    pub(super) async fn serve_watch(
        &self,
        hub: &Weak<WakeHub>,
        watch: &mut WakeWatch,
    ) -> Option<String> {
        loop {
            if hub.strong_count() == 0 {
                return None;
            }
            let message = tokio::select! {
                message = watch.stream.message() => message,
                () = tokio::time::sleep(Duration::from_millis(WATCH_IDLE_CHECK_MS)) => continue,
            };
            let response = match message {
                Ok(Some(response)) => response,
                Ok(None) => return Some("the watch stream ended".into()),
                Err(err) => return Some(err.to_string()),
            };
            if response.canceled() {
                return Some(format!(
                    "etcd cancelled the watch: {} (compacted to {})",
                    response.cancel_reason(),
                    response.compact_revision()
                ));
            }
            let (touched, missed) = watch.take(&self.keys, response.events());
            for key in &touched {
                self.wake_head(hub, key, None).await;
            }
            for (key, session) in missed {
                if !touched.contains(&key) {
                    self.wake_head(hub, &key, Some(session)).await;
                }
            }
        }
    }

    /// Wakes `key`'s head waiter when its claim could now be granted (only when it is
    /// `only`, if given); everyone when the queue cannot be read.
    async fn wake_head(&self, hub: &Weak<WakeHub>, key: &LockKey, only: Option<SessionId>) {
        let wake = match self.queue_head(key).await {
            Ok(Some(session)) if only.is_none_or(|s| s == session) => Wake::Head {
                key: key.clone(),
                session,
            },
            Ok(_) => return,
            Err(err) => {
                tracing::debug!(event = "etcd_queue_head_failed", key = %key, error = %err);
                Wake::Everyone
            }
        };
        if let Some(hub) = hub.upgrade() {
            hub.deliver(&wake);
        }
    }

    /// The session first in `key`'s queue with a live session, when its claim could now be
    /// granted: the key free, or held by shares that leave it room (a reader beside readers,
    /// a permit beside fewer permits than its count; a writer waits for the last share).
    pub(super) async fn queue_head(&self, key: &LockKey) -> Result<Option<SessionId>, StoreError> {
        let state = self.key_state(key).await?;
        let mut chunks = state.places.chunks(TXN_OPS_MAX);
        let Some(first_chunk) = chunks.next() else {
            return Ok(None);
        };
        // The grant's and the shares' markers in the same reads as the first places'.
        let grants: Vec<&ReadGrant> = state.grant.iter().chain(&state.holds).collect();
        let (live, first_live) = self.live(&grants, first_chunk).await?;
        let granted = usize::from(state.grant.is_some());
        if live[..granted].iter().any(|l| *l) {
            return Ok(None);
        }
        let shares = live[granted..].iter().filter(|l| **l).count();
        let room = |claim: Claim| match claim {
            _ if shares == 0 => true,
            Claim::Shared => true,
            Claim::Permit { permits } => shares < permits as usize,
            Claim::Exclusive => false,
        };
        let head = |chunk: &[Place], live: &[bool]| {
            let first = live.iter().position(|l| *l)?;
            Some(
                Some(&chunk[first])
                    .filter(|p| room(p.claim))
                    .map(|p| p.session),
            )
        };
        if let Some(head) = head(first_chunk, &first_live) {
            return Ok(head);
        }
        for chunk in chunks {
            let (_, live) = self.live(&[], chunk).await?;
            if let Some(head) = head(chunk, &live) {
                return Ok(head);
            }
        }
        Ok(None)
    }
}

/// The wake-up watch: its stream and the keys that have queue places, as it saw them.
pub(super) struct WakeWatch {
    /// The watch's connection (kept open with the stream).
    _client: Client,
    stream: WatchStream,
    queued: QueuedKeys,
    /// Keys freed (a grant or share record deleted) while no place of theirs was known, at
    /// the revision of the latest such free: a place created before it and seen only after
    /// it was missed by it. A key goes once a place event at or after it was seen (the
    /// places' watcher then has delivered every earlier one).
    unseen_frees: HashMap<LockKey, i64>,
}

impl WakeWatch {
    /// What `events` ask of the watch: the keys with places that a deleted grant record,
    /// share record or place may let their head proceed on, and the places created before
    /// a free that was seen without them (each is woken if it is the head).
    fn take(
        &mut self,
        keys: &Keys,
        events: &[Event],
    ) -> (BTreeSet<LockKey>, Vec<(LockKey, SessionId)>) {
        let mut touched = BTreeSet::new();
        let mut missed = Vec::new();
        for event in events {
            let Some(kv) = event.kv() else { continue };
            let deleted = event.event_type() == EventType::Delete;
            if let Some((key, session)) = keys.parse_place_path(kv.key()) {
                let revision = kv.mod_revision();
                let free = self.unseen_frees.get(&key).copied();
                if free.is_some_and(|free| free <= revision) {
                    self.unseen_frees.remove(&key);
                }
                if deleted {
                    self.queued.remove(&key, session);
                    touched.insert(key);
                    continue;
                }
                if free.is_some_and(|free| kv.create_revision() < free) {
                    missed.push((key.clone(), session));
                }
                self.queued.insert(key, session);
            } else if deleted {
                let freed = match keys.parse_hold_path(kv.key()) {
                    Some((key, _)) => Some(key),
                    None => keys.parse_key_path("g", kv.key()).ok(),
                };
                let Some(key) = freed else { continue };
                if self.queued.has_places(&key) {
                    touched.insert(key);
                } else {
                    if self.unseen_frees.len() >= UNSEEN_FREES_MAX {
                        self.unseen_frees.clear();
                    }
                    self.unseen_frees.insert(key, kv.mod_revision());
                }
            }
        }
        touched.retain(|key| self.queued.has_places(key));
        (touched, missed)
    }
}

/// The sessions with a place, per key: only a key with places has anyone to wake.
#[derive(Debug, Default)]
pub(super) struct QueuedKeys(HashMap<LockKey, HashSet<SessionId>>);

impl QueuedKeys {
    pub(super) fn insert(&mut self, key: LockKey, session: SessionId) {
        self.0.entry(key).or_default().insert(session);
    }

    pub(super) fn remove(&mut self, key: &LockKey, session: SessionId) {
        if let Some(sessions) = self.0.get_mut(key) {
            sessions.remove(&session);
            if sessions.is_empty() {
                self.0.remove(key);
            }
        }
    }

    pub(super) fn has_places(&self, key: &LockKey) -> bool {
        self.0.contains_key(key)
    }
}
