//! Watching on real processes (C3 W1, C2 §2.4d): the SDK's watcher follows a prefix through
//! two lock-server replicas; the one it reads from is killed while events keep coming, and it
//! resumes on the other after its last position with every event once, in order. On
//! PostgreSQL, a watcher resuming after a position the store forgot is told of the gap.

use std::time::Duration;

use harness::stack::{LockServer, LockStoreAt, spawn_lock_server_at};
use lock_api::{EventKind, LockKey};
use lock_client::admin::watch::{WatchItem, Watcher};
use lock_client::{AcquirePolicy, LockClient};

const ITEM_DEADLINE: Duration = Duration::from_secs(15);

async fn next(watcher: &mut Watcher) -> WatchItem {
    tokio::time::timeout(ITEM_DEADLINE, watcher.next())
        .await
        .expect("an item within the deadline")
        .expect("a watch item")
}

/// The next `count` events' (key, kind, token).
async fn take(watcher: &mut Watcher, count: usize) -> Vec<(String, EventKind, u64)> {
    let mut seen = Vec::new();
    while seen.len() < count {
        match next(watcher).await {
            WatchItem::Event(e) => seen.push((e.lock_key.to_string(), e.kind, e.fencing_token.0)),
            WatchItem::Gap(gap) => panic!("no gap while every event is kept: {gap:?}"),
        }
    }
    seen
}

/// Takes and releases `key` once in a session of `client`: its token.
async fn cycle(client: &LockClient, key: &str) -> u64 {
    let session = client.open_session("cycler").await.unwrap();
    let key = LockKey::parse(key).unwrap();
    let held = session
        .acquire(&key, Duration::from_secs(10), &AcquirePolicy::TRY_ONCE)
        .await
        .unwrap()
        .expect("a free key");
    let token = held.fencing_token().0;
    session.release(held).await.unwrap();
    session.close().await;
    token
}

async fn a_watch_resumes_on_another_replica_with_every_event_once(store: LockStoreAt) {
    let logs = tempfile::tempdir().unwrap();
    let start = |name: &'static str| spawn_lock_server_at(name, &store, &[], logs.path(), None);
    let (a, b): (LockServer, LockServer) = (
        start("replica-a").await.unwrap(),
        start("replica-b").await.unwrap(),
    );
    let watching = harness::stack::lock_client_builder([a.url.as_str(), b.url.as_str()])
        .build()
        .unwrap();
    let writing = harness::stack::lock_client_builder([b.url.as_str()])
        .build()
        .unwrap();
    let mut watcher = watching.admin().watch("w:", None).await.unwrap();
    let first = cycle(&writing, "w:1").await;
    let _ = cycle(&writing, "other:1").await;
    use EventKind::*;
    assert_eq!(
        take(&mut watcher, 2).await,
        [
            ("w:1".into(), Granted, first),
            ("w:1".into(), Released, first)
        ]
    );
    let position = watcher.position().expect("a position");
    drop(a);
    let second = cycle(&writing, "w:2").await;
    let third = cycle(&writing, "w:1").await;
    assert_eq!(
        take(&mut watcher, 4).await,
        [
            ("w:2".into(), Granted, second),
            ("w:2".into(), Released, second),
            ("w:1".into(), Granted, third),
            ("w:1".into(), Released, third)
        ],
        "resumed after {position} on the other replica"
    );
    assert!(watcher.position() > Some(position));
    watching.close();
    writing.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_another_replica_with_every_event_once_postgres() {
    let db = test_support::fresh_database().await;
    a_watch_resumes_on_another_replica_with_every_event_once(LockStoreAt::Postgres(db.url.clone()))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_another_replica_with_every_event_once_etcd() {
    a_watch_resumes_on_another_replica_with_every_event_once(LockStoreAt::Etcd {
        endpoints: test_support::etcd::endpoints(),
        prefix: test_support::etcd::fresh_prefix(),
    })
    .await;
}

/// The store forgot events (as its retention does): a watcher after them is told, then
/// goes on with the events it keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_after_forgotten_events_is_told_of_the_gap() {
    let db = test_support::fresh_database().await;
    let logs = tempfile::tempdir().unwrap();
    let store = LockStoreAt::Postgres(db.url.clone());
    let server = spawn_lock_server_at("lock-server", &store, &[], logs.path(), None)
        .await
        .unwrap();
    let client = harness::stack::lock_client_builder([server.url.as_str()])
        .build()
        .unwrap();
    let mut watcher = client.admin().watch("g:", Some(0)).await.unwrap();
    let first = cycle(&client, "g:1").await;
    assert_eq!(take(&mut watcher, 2).await.len(), 2);
    let kept_from = watcher.position().unwrap();
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    sqlx::query("DELETE FROM lock_events WHERE position <= $1")
        .bind(kept_from as i64)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE lock_event_floor SET floor = $1")
        .bind(kept_from as i64)
        .execute(&pool)
        .await
        .unwrap();
    let second = cycle(&client, "g:1").await;
    let mut late = client.admin().watch("g:", Some(0)).await.unwrap();
    assert_eq!(
        next(&mut late).await,
        WatchItem::Gap(lock_api::WatchGap {
            after: 0,
            resume_from: kept_from
        })
    );
    assert_eq!(
        take(&mut late, 2).await,
        [
            ("g:1".into(), EventKind::Granted, second),
            ("g:1".into(), EventKind::Released, second)
        ]
    );
    assert!(second > first);
    client.close();
}
