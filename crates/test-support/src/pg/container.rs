//! PostgreSQL in a container of the locally built image (`testcontainers`), never pulled.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use testcontainers::bollard::errors::Error as BollardError;
use testcontainers::bollard::models::PortBinding;
use testcontainers::core::client::{ClientError, docker_client_instance};
use testcontainers::core::{ExecCommand, IntoContainerPort};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt, TestcontainersError};

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
pub(super) fn on_docker_runtime<T: Send, F: std::future::Future<Output = T>>(
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
pub(super) fn name_and_tag(image: &str) -> (&str, &str) {
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
