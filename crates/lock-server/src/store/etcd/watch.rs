//! Wake-ups: one watch on the grant and queue keys per store; a freed key with places wakes
//! its queue's head on every replica.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Weak;
use std::time::Duration;

use etcd_client::{
    Client, EventType, GetOptions, TxnOp, WatchFilterType, WatchOptions, WatchStream,
};
use lock_api::{LockKey, SessionId};
use lock_store::{StoreError, Wake};

use super::EtcdStore;
use super::codec::{Place, ReadGrant, read_grant};
use super::members::TXN_OPS_MAX;
use super::wakes::WakeHub;

/// Pause before the wake-up watch is opened again after it broke.
const WATCH_RETRY_MS: u64 = 500;
/// How often an idle wake-up watch checks whether its store is still in use.
const WATCH_IDLE_CHECK_MS: u64 = 5_000;

impl EtcdStore {
    /// Opens the wake-up watch: the places there are now (one read) and, from the next
    /// revision on, every deletion of a grant record and every change of a place.
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
    /// grant record or place frees a key or moves its queue: if the key has places, its
    /// head waiter is woken when the key is free.
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
            let mut touched = BTreeSet::new();
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                let deleted = event.event_type() == EventType::Delete;
                if let Some((key, session)) = self.keys.parse_place_path(kv.key()) {
                    if deleted {
                        watch.queued.remove(&key, session);
                        touched.insert(key);
                    } else {
                        watch.queued.insert(key, session);
                    }
                } else if deleted {
                    if let Ok(key) = self.keys.parse_key_path("g", kv.key()) {
                        touched.insert(key);
                    }
                }
            }
            for key in touched {
                if !watch.queued.has_places(&key) {
                    continue;
                }
                let wake = match self.queue_head(&key).await {
                    Ok(Some(session)) => Wake::Head { key, session },
                    Ok(None) => continue,
                    Err(err) => {
                        tracing::debug!(event = "etcd_queue_head_failed", key = %key, error = %err);
                        Wake::Everyone
                    }
                };
                if let Some(hub) = hub.upgrade() {
                    hub.deliver(&wake);
                }
            }
        }
    }

    /// `key`'s grant record (live or not) and its queue places in arrival order, in one read.
    pub(super) async fn grant_and_places(
        &self,
        key: &LockKey,
    ) -> Result<(Option<ReadGrant>, Vec<Place>), StoreError> {
        let mut read = self
            .members
            .read(vec![
                TxnOp::get(self.keys.grant_key(key), None),
                TxnOp::get(
                    self.keys.queue_prefix(key),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                ),
            ])
            .await?;
        let places = self.keys.read_places(&read.pop().unwrap_or_default())?;
        let grant = read
            .pop()
            .unwrap_or_default()
            .first()
            .map(read_grant)
            .transpose()?;
        Ok((grant, places))
    }

    /// The session first in `key`'s queue with a live session, if the key is free.
    pub(super) async fn queue_head(&self, key: &LockKey) -> Result<Option<SessionId>, StoreError> {
        let (grant, places) = self.grant_and_places(key).await?;
        if places.is_empty() {
            return Ok(None);
        }
        let mut fixed: Vec<String> = grant
            .iter()
            .flat_map(|g| {
                [
                    self.keys.grant_marker(g.value.lease),
                    self.keys.session_marker(g.value.session),
                ]
            })
            .collect();
        for chunk in places.chunks(TXN_OPS_MAX - 2) {
            let skip = fixed.len();
            let mut checks = std::mem::take(&mut fixed);
            checks.extend(chunk.iter().map(|p| self.keys.session_marker(p.session)));
            let live = self.members.exist(&checks).await?;
            if skip == 2 && live[0] && live[1] {
                return Ok(None);
            }
            if let Some(first) = live[skip..].iter().position(|l| *l) {
                return Ok(Some(chunk[first].session));
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
