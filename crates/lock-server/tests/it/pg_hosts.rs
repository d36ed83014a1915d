//! PostgreSQL with a standby: a multi-host `DATABASE_URL` connects to the host that takes
//! writes and moves there on its own after a failover; the durability guard refuses a primary
//! whose standby a commit does not wait for, and starts on one it does.

use std::sync::Arc;
use std::time::Duration;

use lock_server::store::{LockStore, PostgresStore, SessionOwner, StoreError};
use test_support::pg::ReplicatedCluster;
use test_support::{free_port, fresh_database_on, poll_until};

use crate::process::{BIN, base_env, ready, run_to_exit, stop};
use crate::support::{Api, StoreAt};

/// How long the store may take to find the promoted standby.
const SWITCH_DEADLINE: Duration = Duration::from_secs(20);

fn start(sync: bool) -> ReplicatedCluster {
    ReplicatedCluster::start(sync).expect("start a primary and a standby")
}

/// The port of the server the store's pool talks to.
async fn server_port(store: &PostgresStore) -> u16 {
    let port: i32 = sqlx::query_scalar("SELECT inet_server_port()")
        .fetch_one(store.pool())
        .await
        .unwrap();
    u16::try_from(port).unwrap()
}

fn url(ports: &[u16], database: &str) -> String {
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    format!("postgres://postgres@{}/{database}", hosts.join(","))
}

#[tokio::test]
async fn a_multi_host_url_connects_to_the_host_that_takes_writes() {
    let cluster = start(true);
    let db = fresh_database_on(&cluster.primary_url("postgres")).await;
    let (primary, standby) = (cluster.primary().port(), cluster.standby().port());
    let nobody = free_port();

    // A standby first, or a host where nothing listens: skipped, as libpq's read-write does.
    for ports in [[standby, primary], [nobody, primary]] {
        let store = PostgresStore::connect(&url(&ports, &db.name), 2)
            .await
            .unwrap_or_else(|e| panic!("{ports:?}: {e}"));
        assert_eq!(server_port(&store).await, primary, "{ports:?}");
    }
    // No host takes writes: unavailable, naming what each host answered (no password).
    let err = PostgresStore::connect(&url(&[nobody, standby], &db.name), 2)
        .await
        .expect_err("no writable host");
    let StoreError::Unavailable(message) = &err else {
        panic!("unavailable, not {err:?}");
    };
    assert!(
        message.contains("no host of DATABASE_URL takes writes")
            && message.contains(&format!("127.0.0.1:{standby}: read-only"))
            && message.contains(&format!("127.0.0.1:{nobody}: ")),
        "{message}"
    );
    // A bad host list is refused before any connection, with the host named.
    let err = PostgresStore::connect(&format!("postgres://a:1,b:x/{}", db.name), 2)
        .await
        .expect_err("a bad port");
    assert!(err.to_string().contains("DATABASE_URL host b:x"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_moves_to_the_promoted_standby_on_its_own() {
    let cluster = Arc::new(start(true));
    let db = fresh_database_on(&cluster.primary_url("postgres")).await;
    let store = PostgresStore::connect(&cluster.failover_url(&db.name), 4)
        .await
        .unwrap();
    assert_eq!(server_port(&store).await, cluster.primary().port());
    let opener = SessionOwner {
        owner: lock_api::OwnerId::parse("mover".to_owned()).unwrap(),
        credential: "test".into(),
    };
    let before = store.open_session(&opener, 30_000).await.unwrap();

    let crashed = cluster.clone();
    tokio::task::spawn_blocking(move || {
        crashed.kill_primary()?;
        crashed.promote_standby()
    })
    .await
    .unwrap()
    .expect("kill the primary, promote the standby");

    // Nothing but failing calls tells the store: it finds the new primary and moves there.
    let after = poll_until(
        "a write on the promoted standby",
        SWITCH_DEADLINE,
        || async { store.open_session(&opener, 30_000).await.ok() },
    )
    .await;
    assert_eq!(server_port(&store).await, cluster.standby().port());
    assert!(
        store
            .session_owner(before.session_id)
            .await
            .unwrap()
            .is_some(),
        "the session opened on the old primary is on the new one"
    );
    assert_ne!(after.session_id, before.session_id);
}

#[tokio::test]
async fn a_primary_with_an_asynchronous_standby_is_refused() {
    let cluster = start(false);
    let db = fresh_database_on(&cluster.primary_url("postgres")).await;
    // The standby streams: refused on the primary's own URL as on the failover URL.
    for url in [db.url.clone(), cluster.failover_url(&db.name)] {
        let mut env = StoreAt::Postgres(url.clone()).env();
        env.extend(base_env(free_port()));
        let (status, stderr) = run_to_exit(&env).await;
        assert_eq!(status.code(), Some(1), "{url}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.contains("refusing to start: 1 standby(s) stream from the primary")
                && stderr.contains("synchronous_standby_names is empty")
                && stderr.contains("LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE"),
            "names the setting and the override: {stderr}"
        );
    }
}

#[tokio::test]
async fn a_commit_answered_before_the_standby_has_it_is_refused() {
    let cluster = start(true);
    let db = fresh_database_on(&cluster.primary_url("postgres")).await;
    for value in ["local", "remote_write"] {
        let mut admin =
            <sqlx::PgConnection as sqlx::Connection>::connect(&cluster.primary_url("postgres"))
                .await
                .unwrap();
        sqlx::Executor::execute(
            &mut admin,
            format!(
                "ALTER DATABASE {} SET synchronous_commit = {value}",
                db.name
            )
            .as_str(),
        )
        .await
        .unwrap();
        let store = PostgresStore::connect(&db.url, 1).await.unwrap();
        assert_eq!(
            store.durability_risks().await.unwrap(),
            [format!(
                "1 standby(s) stream from the primary but synchronous_commit={value}: a commit is answered before the synchronous standby has flushed it (needs on or remote_apply)"
            )]
        );
    }
}

#[tokio::test]
async fn a_primary_with_a_synchronous_standby_starts_on_the_failover_url() {
    let cluster = start(true);
    let db = fresh_database_on(&cluster.primary_url("postgres")).await;
    let store = PostgresStore::connect(&cluster.failover_url(&db.name), 1)
        .await
        .unwrap();
    assert_eq!(
        store.durability_risks().await.unwrap(),
        Vec::<String>::new()
    );

    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut env = StoreAt::Postgres(cluster.failover_url(&db.name)).env();
    env.extend(base_env(port));
    let process = test_support::ServiceProcess::spawn("sync", BIN, &[], &env, logs.path());
    ready(&Api::new(format!("http://127.0.0.1:{port}"))).await;
    let log = stop(process).await;
    assert!(
        !log.contains("non_durable_store"),
        "started without the override:\n{log}"
    );
}

#[tokio::test]
async fn a_url_naming_two_hosts_without_a_synchronous_standby_is_refused() {
    // No standby at all, but failover intended: what it would fail over to may lack grants.
    let db = test_support::fresh_database().await;
    let store = PostgresStore::connect(&twice(&db.url), 1).await.unwrap();
    let risks = store.durability_risks().await.unwrap();
    assert!(
        risks.iter().any(|r| r.starts_with(
            "DATABASE_URL names 2 hosts to fail over to but synchronous_standby_names is empty"
        )),
        "{risks:?}"
    );
}

/// `url` with its host named twice (`h:p,h:p`).
fn twice(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, host) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    format!("{scheme}://{userinfo}{host},{host}{tail}")
}
