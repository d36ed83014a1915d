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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::{Connection, Executor, PgConnection};
use tempfile::TempDir;
use testcontainers::bollard::errors::Error as BollardError;
use testcontainers::bollard::models::PortBinding;
use testcontainers::core::client::{ClientError, docker_client_instance};
use testcontainers::core::{ExecCommand, IntoContainerPort};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt, TestcontainersError};
use url::Url;

use crate::net::free_port;

/// How many times a cluster start is retried when its port was taken meanwhile.
const START_ATTEMPTS: u32 = 3;

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

/// A PostgreSQL cluster in a temporary directory, stopped and deleted on drop and, through
/// a watchdog process, when the owning process exits without dropping it.
#[derive(Debug)]
pub struct ThrowawayCluster {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres_user: bool,
    watchdog: Option<std::process::Child>,
    env: Vec<(&'static str, String)>,
}

impl ThrowawayCluster {
    /// Initialises and starts a cluster with `settings` (`-c name=value` each).
    pub fn start(settings: &[(&str, &str)]) -> Result<Self, String> {
        Self::start_with_env(settings, Vec::new())
    }

    /// [`ThrowawayCluster::start`] with `env` in the server's environment (e.g. a
    /// [`crate::faketime::FakeClock`]'s).
    pub fn start_with_env(
        settings: &[(&str, &str)],
        env: Vec<(&'static str, String)>,
    ) -> Result<Self, String> {
        let bin = postgres_bin_dir()?;
        let as_postgres_user = nix::unistd::geteuid().is_root();
        let dir = tempfile::Builder::new()
            .prefix("lockpg-")
            .tempdir()
            .map_err(|e| format!("create a temp dir: {e}"))?;
        if as_postgres_user {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path()))?;
        }
        let mut cluster = Self {
            dir,
            bin,
            port: 0,
            as_postgres_user,
            watchdog: None,
            env,
        };
        let data = cluster.data_dir();
        cluster.run_pg(
            "initdb",
            &[
                "-D",
                path_str(&data)?,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            cluster.port = free_port();
            let mut options = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300",
                cluster.port,
                path_str(cluster.dir.path())?
            );
            for (name, value) in settings {
                options.push_str(&format!(" -c {name}={value}"));
            }
            let log = cluster.dir.path().join("postgres.log");
            match cluster.run_pg(
                "pg_ctl",
                &[
                    "-D",
                    path_str(&data)?,
                    "-l",
                    path_str(&log)?,
                    "-o",
                    &options,
                    "-w",
                    "start",
                ],
            ) {
                Ok(()) => {
                    cluster.watchdog = Some(cluster.spawn_watchdog()?);
                    return Ok(cluster);
                }
                Err(e) => {
                    last_error =
                        format!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default())
                }
            }
        }
        Err(format!(
            "PostgreSQL did not start after {START_ATTEMPTS} attempts: {last_error}"
        ))
    }

    /// The URL of `database` on this cluster.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The TCP port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the cluster's binaries (`pgbench` and friends).
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A fast restart (`pg_ctl restart -m fast`: clients disconnected, a clean shutdown, the
    /// same settings), waiting until it accepts connections again.
    pub fn restart_fast(&self) -> Result<(), String> {
        let data = self.data_dir();
        let log = self.dir.path().join("postgres.log");
        self.run_pg(
            "pg_ctl",
            &[
                "-D",
                path_str(&data)?,
                "-l",
                path_str(&log)?,
                "-m",
                "fast",
                "-w",
                "restart",
            ],
        )
    }

    /// The postmaster's pid and its children's (every backend and helper): what a stall
    /// stops with SIGSTOP.
    pub fn pids(&self) -> Vec<i32> {
        let Some(postmaster) = std::fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
        else {
            return Vec::new();
        };
        let children =
            std::fs::read_to_string(format!("/proc/{postmaster}/task/{postmaster}/children"))
                .unwrap_or_default();
        std::iter::once(postmaster)
            .chain(children.split_whitespace().filter_map(|p| p.parse().ok()))
            .collect()
    }

    fn pg_command(&self, tool: &str) -> Command {
        let program = self.bin.join(tool);
        let mut command = if self.as_postgres_user {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.envs(self.env.iter().map(|(k, v)| (*k, v.as_str())));
        command
    }

    fn run_pg(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        run(self.pg_command(tool).args(args))
    }

    /// A detached shell that waits for this process to exit, then stops the cluster and
    /// removes its directory.
    fn spawn_watchdog(&self) -> Result<std::process::Child, String> {
        let pg_ctl = self.bin.join("pg_ctl");
        let runner = if self.as_postgres_user {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {runner}'{pg_ctl}' -D '{data}' -m immediate stop >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            pg_ctl = pg_ctl.display(),
            data = self.data_dir().display(),
            dir = self.dir.path().display(),
        );
        Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn the cluster watchdog: {e}"))
    }
}

impl Drop for ThrowawayCluster {
    fn drop(&mut self) {
        let data = self.data_dir();
        if let Some(data) = data.to_str() {
            let _ = self.run_pg("pg_ctl", &["-D", data, "-m", "immediate", "stop"]);
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// How long a PostgreSQL container may take to accept connections.
const CONTAINER_START_DEADLINE_MS: u64 = 60_000;

/// The label naming the test process (and start) a container belongs to: its watchdog removes
/// every container carrying it.
const OWNER_LABEL: &str = "payouts.test-support.owner";

/// PostgreSQL in a container of a locally built image, started with `testcontainers` and
/// published on a free loopback port. Removed on drop and, through a watchdog process, when
/// the owning process exits without dropping it (the one [`server_url`] starts lives in a
/// static and is never dropped), however it exits.
#[derive(Debug)]
pub struct PgContainer {
    /// The container id.
    pub id: String,
    /// URL of the `postgres` database.
    pub url: String,
    container: Option<ContainerAsync<GenericImage>>,
    watchdog: Option<std::process::Child>,
}

impl PgContainer {
    /// Starts the image named by `TEST_POSTGRES_IMAGE` (default `payouts/postgres:15`).
    pub fn start() -> Result<Self, String> {
        let image =
            std::env::var("TEST_POSTGRES_IMAGE").unwrap_or_else(|_| "payouts/postgres:15".into());
        Self::start_image(&image)
    }

    /// Starts `image`. `Err` says what is missing: the engine, the image, or the docker CLI
    /// the watchdog needs. An image that is not on this machine is never pulled.
    pub fn start_image(image: &str) -> Result<Self, String> {
        on_docker_runtime(|| check_engine_and_image(image))??;
        let owner = format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
        // First the watchdog: it also removes a container that a failed start left behind.
        let watchdog = spawn_container_watchdog(&owner)?;
        let password = uuid::Uuid::new_v4().simple().to_string();
        // On an error the watchdog is left running: it removes what is left at exit.
        let (container, port) = on_docker_runtime(|| start_container(image, &owner, &password))??;
        Ok(Self {
            id: container.id().to_owned(),
            url: format!("postgres://postgres:{password}@127.0.0.1:{port}/postgres"),
            container: Some(container),
            watchdog: Some(watchdog),
        })
    }
}

impl Drop for PgContainer {
    fn drop(&mut self) {
        let Some(container) = self.container.take() else {
            return;
        };
        let removed = on_docker_runtime(|| async move { container.rm().await.is_ok() });
        // Not removed (the engine did not answer): the watchdog tries again at exit.
        if removed == Ok(true)
            && let Some(mut watchdog) = self.watchdog.take()
        {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// Runs the future `task` makes on the runtime that drives every Docker call of this module,
/// from a thread of its own, and waits for it. Callers are sync functions, often inside a
/// test's tokio runtime, where blocking on a runtime would panic.
fn on_docker_runtime<T: Send, F: std::future::Future<Output = T>>(
    task: impl FnOnce() -> F + Send,
) -> Result<T, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    let runtime = RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("test-support-docker")
                .enable_all()
                .build()
                .map_err(|e| format!("build the Docker client's runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| runtime.block_on(task()))
            .join()
            .map_err(|_| "a Docker call panicked".to_owned())
    })
}

/// Checks that an engine answers and has `image`, so that `testcontainers` never tries to pull
/// it (no registry is assumed reachable).
async fn check_engine_and_image(image: &str) -> Result<(), String> {
    let no_engine = |e: &dyn std::fmt::Display| format!("no Docker engine answers ({e})");
    let docker = docker_client_instance().await.map_err(|e| no_engine(&e))?;
    docker.ping().await.map_err(|e| no_engine(&e))?;
    match docker.inspect_image(image).await {
        Ok(_) => Ok(()),
        Err(BollardError::DockerResponseServerError {
            status_code: 404, ..
        }) => Err(missing_image(image)),
        Err(e) => Err(format!("inspect image {image}: {e}")),
    }
}

/// `NAME[:TAG]` split as Docker reads it (a registry's `host:port/` is part of the name).
fn name_and_tag(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (image, "latest"),
    }
}

fn missing_image(image: &str) -> String {
    format!("image {image} is not on this machine: build it with deploy/build-images.sh")
}

/// Starts a container of `image` labelled with `owner`, its port 5432 on a free loopback
/// port, and waits until the server accepts connections. Returns it and that port.
async fn start_container(
    image: &str,
    owner: &str,
    password: &str,
) -> Result<(ContainerAsync<GenericImage>, u16), String> {
    let started = std::time::Instant::now();
    let (name, tag) = name_and_tag(image);
    let container = GenericImage::new(name, tag)
        .with_exposed_port(5432.tcp())
        .with_env_var("POSTGRES_PASSWORD", password)
        .with_label(OWNER_LABEL, owner)
        .with_startup_timeout(Duration::from_millis(CONTAINER_START_DEADLINE_MS))
        // Published on loopback only (testcontainers' own mappings listen on every interface).
        .with_host_config_modifier(|host| {
            host.publish_all_ports = Some(false);
            host.port_bindings = Some(HashMap::from([(
                "5432/tcp".to_owned(),
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(String::new()),
                }]),
            )]));
        })
        .start()
        .await
        .map_err(|e| match e {
            // The image went away after the check: testcontainers tried to pull it.
            TestcontainersError::Client(ClientError::PullImage { .. }) => {
                format!("{}; {e}", missing_image(image))
            }
            e => format!("start a container of {image}: {e}"),
        })?;
    let ready = async {
        let port = container
            .get_host_port_ipv4(5432.tcp())
            .await
            .map_err(|e| format!("container {}: {e}", container.id()))?;
        wait_until_accepting(&container, started).await?;
        Ok::<_, String>(port)
    };
    match ready.await {
        Ok(port) => Ok((container, port)),
        Err(e) => {
            let logs = container.stderr_to_vec().await.unwrap_or_default();
            let logs = String::from_utf8_lossy(&logs);
            let tail: Vec<&str> = logs.lines().rev().take(20).collect();
            let _ = container.rm().await;
            Err(format!(
                "{e}\nlast lines of its log:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ))
        }
    }
}

/// Waits until the server in `container` accepts TCP connections. The image's entrypoint
/// listens on TCP only once initialisation is done, but the published port answers at once
/// (Docker's proxy), so `pg_isready` asks inside the container. Its log is not a signal: the
/// entrypoint's initialisation server logs "ready to accept connections" too.
async fn wait_until_accepting(
    container: &ContainerAsync<GenericImage>,
    started: std::time::Instant,
) -> Result<(), String> {
    let deadline = started + Duration::from_millis(CONTAINER_START_DEADLINE_MS);
    loop {
        let probe = container
            .exec(ExecCommand::new([
                "pg_isready",
                "-q",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
            ]))
            .await;
        match probe {
            Ok(probe) => loop {
                match probe.exit_code().await {
                    Ok(Some(0)) => return Ok(()),
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if std::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(20)).await
                    }
                    Ok(None) => break,
                }
            },
            Err(e) if !container.is_running().await.unwrap_or(false) => {
                return Err(format!(
                    "container {} exited before accepting connections ({e})",
                    container.id()
                ));
            }
            Err(_) => {}
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "container {} did not accept connections within {CONTAINER_START_DEADLINE_MS} ms",
                container.id()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A detached shell that waits for this process to exit, then removes every container
/// labelled with `owner` (the Docker CLI: by then this process and its client are gone).
fn spawn_container_watchdog(owner: &str) -> Result<std::process::Child, String> {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("docker").is_file()));
    if !on_path {
        return Err(
            "no docker CLI on PATH: the container watchdog needs it to remove the \
                    container if this process is killed"
                .into(),
        );
    }
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         ids=$(docker ps -aq --filter 'label={OWNER_LABEL}={owner}'); \
         [ -z \"$ids\" ] || docker rm -f $ids >/dev/null 2>&1",
        pid = std::process::id(),
    );
    crate::process::spawn_watchdog(&script, "container")
}

fn path_str(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("path is not UTF-8: {}", path.display()))
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("run {command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} exited with {}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Finds PostgreSQL's server binaries: `PG_BIN` when set, else `pg_config --bindir`, else
/// the newest `/usr/lib/postgresql/*/bin`.
pub fn postgres_bin_dir() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        let dir = PathBuf::from(dir);
        if !dir.join("initdb").exists() {
            return Err(format!(
                "PG_BIN={} has no initdb: point it at PostgreSQL's server binaries",
                dir.display()
            ));
        }
        return Ok(dir);
    }
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    candidates.retain(|dir| dir.join("initdb").exists());
    candidates.sort_by_key(|dir| {
        dir.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(dir) = candidates.pop() {
        return Ok(dir);
    }
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    Err(
        "no PostgreSQL server binaries (initdb, pg_ctl) found: run `apt-get install postgresql` \
         (script/bootstrap does), set PG_BIN to their directory, or set DATABASE_URL to a server"
            .into(),
    )
}

#[cfg(test)]
mod tests {
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
