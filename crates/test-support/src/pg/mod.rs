//! PostgreSQL for tests.
//!
//! [`fresh_database`] gives each test its own database on one server per test process:
//! 1. the server at `DATABASE_URL` when that is set;
//! 2. with `TEST_POSTGRES=container`, a [`PgContainer`] (`testcontainers`) of the locally
//!    built image (`TEST_POSTGRES_IMAGE`, default `payouts/postgres:15` from
//!    `deploy/build-images.sh`; never pulled), removed by a watchdog when the test process
//!    exits, however it exits. No Docker engine or no image is a test failure with a message
//!    saying so, never a silent fall back to a local cluster;
//! 3. otherwise a [`ThrowawayCluster`] started from the machine's PostgreSQL binaries in a
//!    temporary directory on a free port (as root, run as the `postgres` user). A watchdog
//!    stops it and deletes its directory when the test process exits, however it exits.
//!
//! [`ReplicatedCluster`] is a primary with a streaming standby (synchronous or not) for
//! failover tests and benchmarks.

use std::sync::OnceLock;

use sqlx::{Connection, Executor, PgConnection};
use url::Url;

mod cluster;
mod container;
mod standby;
mod tools;

pub use cluster::ThrowawayCluster;
pub use container::PgContainer;
pub use standby::{ReplicatedCluster, STANDBY_NAME};
pub use tools::postgres_bin_dir;

/// Settings for test clusters: durability off (data is thrown away), small footprint.
pub const TEST_SETTINGS: &[(&str, &str)] = &[
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
];

/// Settings for benchmark clusters: durable commits, as production would run.
pub const DURABLE_SETTINGS: &[(&str, &str)] = &[("fsync", "on"), ("synchronous_commit", "on")];

/// A database created for one test.
#[derive(Debug, Clone)]
pub struct TestDb {
    /// Connection URL of the database.
    pub url: String,
    /// Its name.
    pub name: String,
}

/// Creates a fresh, empty database for one test and returns its URL.
pub async fn fresh_database() -> TestDb {
    fresh_database_on(server_url()).await
}

/// Creates a fresh, empty database on the server at `base` (a maintenance database URL).
pub async fn fresh_database_on(base: &str) -> TestDb {
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut conn = PgConnection::connect(base)
        .await
        .unwrap_or_else(|e| panic!("connect to the test PostgreSQL at {base}: {e}"));
    conn.execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap_or_else(|e| panic!("create test database {name}: {e}"));
    conn.close().await.ok();
    TestDb {
        url: with_database(base, &name),
        name,
    }
}

/// The URL of the server tests use (a maintenance database on it).
pub fn server_url() -> &'static str {
    static SERVER: OnceLock<(Option<ThrowawayCluster>, Option<PgContainer>, String)> =
        OnceLock::new();
    let (_, _, url) = SERVER.get_or_init(|| {
        if let Ok(url) = std::env::var("DATABASE_URL")
            && !url.trim().is_empty()
        {
            return (None, None, url);
        }
        if std::env::var("TEST_POSTGRES").is_ok_and(|v| v == "container") {
            let container = PgContainer::start().unwrap_or_else(|e| {
                panic!("TEST_POSTGRES=container, but no PostgreSQL container could start: {e}")
            });
            let url = container.url.clone();
            return (None, Some(container), url);
        }
        let cluster = ThrowawayCluster::start(TEST_SETTINGS)
            .unwrap_or_else(|e| panic!("start a throwaway PostgreSQL: {e}"));
        let url = cluster.url("postgres");
        (Some(cluster), None, url)
    });
    url
}

/// Replaces the database name in a PostgreSQL URL.
pub fn with_database(url: &str, database: &str) -> String {
    let mut parsed = Url::parse(url).unwrap_or_else(|e| panic!("parse database URL {url}: {e}"));
    parsed.set_path(&format!("/{database}"));
    parsed.to_string()
}

#[cfg(test)]
mod tests {
    use testcontainers::bollard::errors::Error as BollardError;
    use testcontainers::core::client::docker_client_instance;

    use super::container::{name_and_tag, on_docker_runtime};
    use super::*;

    #[test]
    fn with_database_replaces_only_the_path() {
        assert_eq!(
            with_database("postgres://u:p@h:5/old?sslmode=disable", "new"),
            "postgres://u:p@h:5/new?sslmode=disable"
        );
    }

    #[test]
    fn image_names_split_into_name_and_tag() {
        assert_eq!(
            name_and_tag("payouts/postgres:15"),
            ("payouts/postgres", "15")
        );
        assert_eq!(
            name_and_tag("payouts/postgres"),
            ("payouts/postgres", "latest")
        );
        assert_eq!(
            name_and_tag("localhost:5000/pg"),
            ("localhost:5000/pg", "latest")
        );
        assert_eq!(
            name_and_tag("localhost:5000/pg:15"),
            ("localhost:5000/pg", "15")
        );
    }

    #[test]
    fn a_missing_image_is_an_error_that_says_so() {
        let err = PgContainer::start_image("payouts/no-such-image:0")
            .expect_err("no container from an image that does not exist");
        assert!(
            err.starts_with("no Docker engine answers")
                || (err.contains("payouts/no-such-image:0")
                    && err.contains("deploy/build-images.sh")),
            "{err}"
        );
    }

    /// With `TEST_POSTGRES=container` only (it needs the engine and the image).
    #[tokio::test]
    async fn pg_container_serves_queries_on_loopback_and_is_removed_on_drop() {
        if !std::env::var("TEST_POSTGRES").is_ok_and(|v| v == "container") {
            eprintln!("skipped: needs TEST_POSTGRES=container");
            return;
        }
        let container = PgContainer::start().expect("start a PostgreSQL container");
        assert!(container.url.contains("@127.0.0.1:"), "{}", container.url);
        let mut conn = PgConnection::connect(&container.url)
            .await
            .expect("connect");
        let one: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&mut conn)
            .await
            .expect("query");
        assert_eq!(one, 1);
        conn.close().await.ok();
        let id = container.id.clone();
        drop(container);
        let inspected = on_docker_runtime(|| async move {
            let docker = docker_client_instance().await.expect("docker client");
            match docker.inspect_container(&id, None).await {
                Err(BollardError::DockerResponseServerError {
                    status_code: 404, ..
                }) => Ok(()),
                other => Err(format!("container {id} still there: {other:?}")),
            }
        })
        .expect("ask the engine");
        inspected.expect("removed on drop");
    }

    #[tokio::test]
    async fn throwaway_cluster_serves_queries_and_is_removed_on_drop() {
        let cluster = ThrowawayCluster::start(TEST_SETTINGS).expect("start cluster");
        let dir = cluster.dir.path().to_path_buf();
        let mut conn = PgConnection::connect(&cluster.url("postgres"))
            .await
            .expect("connect");
        let one: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&mut conn)
            .await
            .expect("query");
        assert_eq!(one, 1);
        conn.close().await.ok();
        drop(cluster);
        assert!(
            !dir.exists(),
            "cluster directory {} left behind",
            dir.display()
        );
    }

    #[tokio::test]
    async fn fresh_databases_are_distinct_and_empty() {
        let a = fresh_database().await;
        let b = fresh_database().await;
        assert_ne!(a.name, b.name);
        let mut conn = PgConnection::connect(&a.url)
            .await
            .expect("connect to fresh db");
        let tables: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
        )
        .fetch_one(&mut conn)
        .await
        .expect("count tables");
        assert_eq!(tables, 0);
    }
}
