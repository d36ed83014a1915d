//! The stores a benchmark runs on, in the shape asked: one PostgreSQL server (or
//! `DATABASE_URL`) or a primary with a synchronous standby; one etcd member or three, with
//! their data on disk. An etcd is started whenever one is installed, for etcd's lock API.

use anyhow::Context;
use sqlx::{Connection, Executor, PgConnection};
use test_support::etcd::EtcdCluster;
use test_support::pg::{DURABLE_SETTINGS, ReplicatedCluster, ThrowawayCluster, with_database};

use crate::stack::LockStoreAt;

/// The store `harness bench locks` runs the lock-server on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchBackend {
    /// PostgreSQL, next to pgbench running the same SQL.
    Postgres,
    /// etcd, next to etcd's own lock API.
    Etcd,
}

/// How the stores of a run are deployed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// One PostgreSQL server, one etcd member.
    Single,
    /// A PostgreSQL primary with a synchronous standby (an answered commit is on both),
    /// three etcd members: how a lock service is deployed. All on this machine's loopback.
    Replicated,
}

impl Shape {
    /// etcd members in this shape.
    fn etcd_members(self) -> usize {
        match self {
            Self::Single => 1,
            Self::Replicated => ETCD_REPLICATED_MEMBERS,
        }
    }
}

/// etcd members of the replicated shape.
const ETCD_REPLICATED_MEMBERS: usize = 3;

/// The stores a run needs, kept alive until it ends.
pub(crate) struct Stores {
    _work: tempfile::TempDir,
    postgres: Option<PostgresAt>,
    /// lockdb's URL and the pgbench binary (PostgreSQL backend).
    pub(crate) pgbench: Option<(String, std::path::PathBuf)>,
    /// The etcd member (whenever an `etcd` binary is installed).
    etcd_member: Option<EtcdCluster>,
    /// A client of the etcd member, for etcd's lock API.
    pub(crate) etcd: Option<etcd_client::Client>,
    /// Where the lock-server keeps its state.
    pub(crate) lock_store: LockStoreAt,
}

impl Stores {
    /// One PostgreSQL server or one etcd member, as `backend` asks.
    pub async fn start(backend: BenchBackend) -> anyhow::Result<Self> {
        Self::start_shaped(backend, Shape::Single).await
    }

    /// The stores of `backend` in `shape`; an etcd for its lock API whenever one is installed.
    pub(crate) async fn start_shaped(backend: BenchBackend, shape: Shape) -> anyhow::Result<Self> {
        let work = tempfile::Builder::new().prefix("lock-bench-").tempdir()?;
        let members = shape.etcd_members();
        let etcd = match EtcdCluster::start_on_disk(members, work.path()).await {
            Ok(cluster) => Some(cluster),
            Err(err) if backend == BenchBackend::Postgres => {
                println!("no etcd for its lock API ({err}): that column stays empty");
                None
            }
            Err(err) => anyhow::bail!("--backend etcd: {err}"),
        };
        let etcd_client = match &etcd {
            Some(cluster) => Some(
                etcd_client::Client::connect(cluster.endpoints(), None)
                    .await
                    .context("connect to etcd")?,
            ),
            None => None,
        };
        let (postgres, pgbench, lock_store) = match backend {
            BenchBackend::Etcd => {
                let endpoints = etcd
                    .as_ref()
                    .map(EtcdCluster::endpoints)
                    .unwrap_or_default();
                println!("lock-server on etcd ({members} member(s), data on disk)");
                let store = LockStoreAt::Etcd {
                    endpoints,
                    prefix: "/lock-bench/".into(),
                };
                (None, None, store)
            }
            BenchBackend::Postgres => {
                let (cluster, pgbench, lock_server_url) = start_postgres(shape).await?;
                (
                    cluster,
                    Some(pgbench),
                    LockStoreAt::Postgres(lock_server_url),
                )
            }
        };
        Ok(Self {
            _work: work,
            postgres,
            pgbench,
            etcd_member: etcd,
            etcd: etcd_client,
            lock_store,
        })
    }

    /// lockdb's URL (PostgreSQL backend).
    pub(crate) fn database_url(&self) -> Option<&str> {
        self.pgbench.as_ref().map(|(url, _)| url.as_str())
    }

    /// The etcd member's client URLs, when one was started.
    pub(crate) fn etcd_endpoints(&self) -> Option<Vec<String>> {
        self.etcd_member.as_ref().map(EtcdCluster::endpoints)
    }

    /// The root processes of the lock-server's store (postmasters, or etcd's members);
    /// empty for a `DATABASE_URL` the run did not start.
    pub(crate) fn lock_store_pids(&self) -> Vec<i32> {
        match (&self.lock_store, &self.postgres) {
            (LockStoreAt::Postgres(_), Some(postgres)) => postgres.postmasters(),
            (LockStoreAt::Postgres(_), None) => Vec::new(),
            _ => self.etcd_pids(),
        }
    }

    /// Whether the lock-server's store is etcd.
    pub(crate) fn lock_store_on_etcd(&self) -> bool {
        matches!(self.lock_store, LockStoreAt::Etcd { .. })
    }

    /// etcd's members' pids (none when no etcd runs).
    pub(crate) fn etcd_pids(&self) -> Vec<i32> {
        self.etcd_member
            .as_ref()
            .map(EtcdCluster::pids)
            .unwrap_or_default()
    }
}

/// PostgreSQL in `shape` (or `DATABASE_URL`, single shape only) with a fresh `lockbench`
/// database: the run's cluster; lockdb's URL on the primary (the harness's own connections
/// and pgbench) with pgbench's binary; and the URL the lock-server is given (primary and
/// standby when replicated: sqlx, which the harness connects with, reads one host only).
async fn start_postgres(
    shape: Shape,
) -> anyhow::Result<(Option<PostgresAt>, (String, std::path::PathBuf), String)> {
    let (cluster, admin_url, pgbench) = match std::env::var("DATABASE_URL") {
        // A `DATABASE_URL` is one server: the replicated shape starts its own.
        Ok(url) if !url.is_empty() && shape == Shape::Single => (None, url, "pgbench".into()),
        _ => {
            let cluster = PostgresAt::start(shape)?;
            let url = cluster.primary().url("postgres");
            let pgbench = cluster.primary().bin_dir().join("pgbench");
            (Some(cluster), url, pgbench)
        }
    };
    let mut admin = PgConnection::connect(&admin_url)
        .await
        .context("connect to PostgreSQL")?;
    admin.execute("DROP DATABASE IF EXISTS lockbench").await?;
    admin.execute("CREATE DATABASE lockbench").await?;
    let show = |setting: &'static str| format!("SHOW {setting}");
    let sync: String = sqlx::query_scalar(&show("synchronous_commit"))
        .fetch_one(&mut admin)
        .await?;
    let fsync: String = sqlx::query_scalar(&show("fsync"))
        .fetch_one(&mut admin)
        .await?;
    let standbys: Vec<String> = sqlx::query_scalar(
        "SELECT application_name || ' (' || sync_state || ')' FROM pg_stat_replication",
    )
    .fetch_all(&mut admin)
    .await?;
    let standbys = match standbys.is_empty() {
        true => "none".to_owned(),
        false => standbys.join(", "),
    };
    println!(
        "lock-server on PostgreSQL (fsync = {fsync}, synchronous_commit = {sync}, standbys: {standbys})"
    );
    let db_url = with_database(&admin_url, "lockbench");
    let lock_server_url = match &cluster {
        Some(cluster) => cluster.lock_server_url("lockbench"),
        None => db_url.clone(),
    };
    Ok((cluster, (db_url, pgbench), lock_server_url))
}

/// The PostgreSQL a run started: one server, or a primary with a synchronous standby.
enum PostgresAt {
    Single(ThrowawayCluster),
    Replicated(ReplicatedCluster),
}

impl PostgresAt {
    fn start(shape: Shape) -> anyhow::Result<Self> {
        Ok(match shape {
            Shape::Single => {
                Self::Single(ThrowawayCluster::start(DURABLE_SETTINGS).map_err(anyhow::Error::msg)?)
            }
            Shape::Replicated => {
                Self::Replicated(ReplicatedCluster::start(true).map_err(anyhow::Error::msg)?)
            }
        })
    }

    /// The server that takes writes.
    fn primary(&self) -> &ThrowawayCluster {
        match self {
            Self::Single(cluster) => cluster,
            Self::Replicated(cluster) => cluster.primary(),
        }
    }

    /// What the lock-server is given: the primary and its standby as one multi-host URL when
    /// replicated, as an operator deploys it.
    fn lock_server_url(&self, database: &str) -> String {
        match self {
            Self::Single(cluster) => cluster.url(database),
            Self::Replicated(cluster) => cluster.failover_url(database),
        }
    }

    /// The postmasters' pids: the root of every PostgreSQL process of the run.
    fn postmasters(&self) -> Vec<i32> {
        let first = |cluster: &ThrowawayCluster| cluster.pids().into_iter().take(1);
        match self {
            Self::Single(cluster) => first(cluster).collect(),
            Self::Replicated(cluster) => first(cluster.primary())
                .chain(first(cluster.standby()))
                .collect(),
        }
    }
}
