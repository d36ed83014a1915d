//! etcd for tests, from the machine's `etcd` binary (Debian's `etcd-server`).
//!
//! - [`endpoints`]: one single-member etcd per test process (or the members named by
//!   `TEST_ETCD_ENDPOINTS`), with [`fresh_prefix`] giving each test its own key space. A
//!   watchdog stops the member and deletes its directory when the test process exits.
//! - [`EtcdCluster`]: a three-member cluster owned by one test, for leader kills and pauses;
//!   its members are killed when it is dropped.
//!
//! Members run with a 50 ms heartbeat and a 500 ms election timeout (a lost leader is
//! replaced in about a second) and keep their data on tmpfs when there is one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use nix::sys::signal::Signal;
use tempfile::TempDir;

use crate::net::free_port;
use crate::poll::poll_until;
use crate::process::ServiceProcess;

/// Raft heartbeat of test members.
const HEARTBEAT_INTERVAL_MS: u64 = 50;
/// Raft election timeout of test members: ten heartbeats.
const ELECTION_TIMEOUT_MS: u64 = 500;
/// How long a member (or a cluster) may take to report healthy.
pub const START_DEADLINE: Duration = Duration::from_secs(20);

/// The client URLs of the test process's etcd.
pub fn endpoints() -> Vec<String> {
    static SHARED: OnceLock<(Option<SharedMember>, Vec<String>)> = OnceLock::new();
    let (_, endpoints) = SHARED.get_or_init(|| {
        if let Ok(list) = std::env::var("TEST_ETCD_ENDPOINTS") {
            let endpoints: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect();
            if !endpoints.is_empty() {
                return (None, endpoints);
            }
        }
        let member = SharedMember::start()
            .unwrap_or_else(|e| panic!("start a throwaway etcd for the tests: {e}"));
        let endpoints = vec![member.endpoint.clone()];
        (Some(member), endpoints)
    });
    endpoints.clone()
}

/// A key prefix no other test uses.
pub fn fresh_prefix() -> String {
    format!("/t-{}/", uuid::Uuid::new_v4().simple())
}

/// The `etcd` binary.
fn etcd_binary() -> Result<PathBuf, String> {
    let path = std::env::var_os("ETCD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: run `apt-get install etcd-server` (script/test does) or set ETCD_BIN",
            path.display()
        ))
    }
}

/// A temporary directory on tmpfs when the machine has one (fsync there is free).
fn data_root() -> Result<TempDir, String> {
    let builder = {
        let mut b = tempfile::Builder::new();
        b.prefix("etcd-test-");
        b
    };
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = builder.tempdir_in(shm)
    {
        return Ok(dir);
    }
    builder
        .tempdir()
        .map_err(|e| format!("create a temp dir: {e}"))
}

/// Ports and flags of one member of a cluster named by `initial_cluster`.
#[derive(Debug, Clone)]
struct MemberSpec {
    name: String,
    client_port: u16,
    peer_port: u16,
}

impl MemberSpec {
    fn new(name: String) -> Self {
        Self {
            name,
            client_port: free_port(),
            peer_port: free_port(),
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    fn args(&self, data_root: &Path, initial_cluster: &str) -> Vec<String> {
        let data_dir = data_root.join(&self.name);
        [
            "--name",
            &self.name,
            "--data-dir",
            &data_dir.display().to_string(),
            "--listen-client-urls",
            &self.endpoint(),
            "--advertise-client-urls",
            &self.endpoint(),
            "--listen-peer-urls",
            &self.peer_url(),
            "--initial-advertise-peer-urls",
            &self.peer_url(),
            "--initial-cluster",
            initial_cluster,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            "lock-service-tests",
            "--heartbeat-interval",
            &HEARTBEAT_INTERVAL_MS.to_string(),
            "--election-timeout",
            &ELECTION_TIMEOUT_MS.to_string(),
            "--logger",
            "zap",
            "--log-level",
            "warn",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }
}

fn initial_cluster(specs: &[MemberSpec]) -> String {
    specs
        .iter()
        .map(|s| format!("{}={}", s.name, s.peer_url()))
        .collect::<Vec<_>>()
        .join(",")
}

/// What `POST /v3/maintenance/status` says about one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberStatus {
    /// This member's id.
    pub member_id: u64,
    /// The leader it follows (0: none).
    pub leader_id: u64,
}

/// Asks the member at `endpoint` for its status (etcd's JSON gateway).
pub async fn member_status(endpoint: &str) -> Result<MemberStatus, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .map_err(|e| e.to_string())?;
    let body: serde_json::Value = client
        .post(format!("{endpoint}/v3/maintenance/status"))
        .body("{}")
        .send()
        .await
        .map_err(|e| format!("status of {endpoint}: {e}"))?
        .json()
        .await
        .map_err(|e| format!("status of {endpoint}: {e}"))?;
    let number = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .or_else(|| v.as_u64())
    };
    Ok(MemberStatus {
        member_id: number(&body["header"]["member_id"])
            .ok_or_else(|| format!("no member_id in {body}"))?,
        leader_id: number(&body["leader"]).unwrap_or(0),
    })
}

/// The test process's own single member, stopped by a watchdog when the process exits.
#[derive(Debug)]
struct SharedMember {
    endpoint: String,
    _dir: TempDir,
    _child: std::process::Child,
}

impl SharedMember {
    fn start() -> Result<Self, String> {
        let binary = etcd_binary()?;
        let dir = data_root()?;
        let spec = MemberSpec::new("solo".into());
        let log = std::fs::File::create(dir.path().join("etcd.log"))
            .map_err(|e| format!("create the etcd log: {e}"))?;
        let child = Command::new(&binary)
            .args(spec.args(dir.path(), &initial_cluster(std::slice::from_ref(&spec))))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", binary.display()))?;
        let script = format!(
            "while kill -0 {me} 2>/dev/null; do sleep 1; done; kill -9 {etcd} 2>/dev/null; rm -rf '{dir}'",
            me = std::process::id(),
            etcd = child.id(),
            dir = dir.path().display(),
        );
        crate::process::spawn_watchdog(&script, "etcd")?;
        let endpoint = spec.endpoint();
        wait_healthy_blocking(&endpoint, dir.path())?;
        Ok(Self {
            endpoint,
            _dir: dir,
            _child: child,
        })
    }
}

/// Polls `/health` from a plain thread (the shared member starts outside any runtime).
fn wait_healthy_blocking(endpoint: &str, dir: &Path) -> Result<(), String> {
    let endpoint = endpoint.to_owned();
    let healthy = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let deadline = tokio::time::Instant::now() + START_DEADLINE;
            while tokio::time::Instant::now() < deadline {
                if member_status(&endpoint)
                    .await
                    .is_ok_and(|s| s.leader_id != 0)
                {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(format!(
                "etcd at {endpoint} has no leader after {START_DEADLINE:?}"
            ))
        })
    })
    .join()
    .map_err(|_| "the etcd health poller panicked".to_owned())?;
    healthy.map_err(|e| {
        let log = std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default();
        format!("{e}\n{log}")
    })
}

/// A three-member (or `n`-member) cluster owned by one test; members are killed on drop.
#[derive(Debug)]
pub struct EtcdCluster {
    specs: Vec<MemberSpec>,
    members: Vec<Option<ServiceProcess>>,
    binary: PathBuf,
    data: TempDir,
    logs: PathBuf,
}

impl EtcdCluster {
    /// Starts `n` members logging under `log_dir` and waits until they agree on a leader.
    /// Their data is on tmpfs when there is one.
    pub async fn start(n: usize, log_dir: &Path) -> Result<Self, String> {
        Self::start_with(n, log_dir, data_root()?).await
    }

    /// As [`EtcdCluster::start`], with the data on disk (every commit really fsynced), for
    /// benchmarks.
    pub async fn start_on_disk(n: usize, log_dir: &Path) -> Result<Self, String> {
        let data = tempfile::Builder::new()
            .prefix("etcd-bench-")
            .tempdir()
            .map_err(|e| format!("create a temp dir: {e}"))?;
        Self::start_with(n, log_dir, data).await
    }

    async fn start_with(n: usize, log_dir: &Path, data: TempDir) -> Result<Self, String> {
        let binary = etcd_binary()?;
        let specs: Vec<MemberSpec> = (0..n)
            .map(|i| MemberSpec::new(format!("etcd-{i}")))
            .collect();
        let mut cluster = Self {
            members: Vec::new(),
            specs,
            binary,
            data,
            logs: log_dir.to_path_buf(),
        };
        for i in 0..n {
            let member = cluster.spawn(i);
            cluster.members.push(Some(member));
        }
        cluster.leader(START_DEADLINE).await?;
        Ok(cluster)
    }

    fn spawn(&self, index: usize) -> ServiceProcess {
        let spec = &self.specs[index];
        let args = spec.args(self.data.path(), &initial_cluster(&self.specs));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ServiceProcess::spawn(&spec.name, &self.binary, &args, &[], &self.logs)
    }

    /// The running members' pids.
    pub fn pids(&self) -> Vec<i32> {
        (self.members.iter().flatten())
            .map(|member| member.pid().as_raw())
            .collect()
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.specs.iter().map(MemberSpec::endpoint).collect()
    }

    /// Polls until the running, unpaused members agree on one leader among them; its index.
    pub async fn leader(&self, deadline: Duration) -> Result<usize, String> {
        let started = tokio::time::Instant::now();
        loop {
            let mut ids = Vec::new();
            let mut leaders = Vec::new();
            for (i, spec) in self.specs.iter().enumerate() {
                if self.members[i].is_none() {
                    continue;
                }
                if let Ok(status) = member_status(&spec.endpoint()).await {
                    ids.push((i, status.member_id));
                    leaders.push(status.leader_id);
                }
            }
            let agreed = leaders.first().copied().filter(|l| {
                *l != 0 && leaders.len() * 2 > self.specs.len() && leaders.iter().all(|x| x == l)
            });
            if let Some(leader) = agreed
                && let Some((index, _)) = ids.iter().find(|(_, id)| *id == leader)
            {
                return Ok(*index);
            }
            if started.elapsed() > deadline {
                return Err(format!(
                    "no agreed leader after {deadline:?}: members {ids:?} follow {leaders:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// SIGKILLs member `index` and waits for it to exit.
    pub async fn kill(&mut self, index: usize) {
        if let Some(mut member) = self.members[index].take() {
            member.signal(Signal::SIGKILL);
            member.wait().await;
        }
    }

    /// Starts a killed member again on its data directory.
    pub fn restart(&mut self, index: usize) {
        assert!(self.members[index].is_none(), "member {index} is running");
        self.members[index] = Some(self.spawn(index));
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to member `index`.
    pub fn signal(&self, index: usize, signal: Signal) {
        if let Some(member) = &self.members[index] {
            member.signal(signal);
        }
    }

    /// Polls until member `index` follows a leader again (after a restart or SIGCONT).
    pub async fn wait_member_healthy(&self, index: usize) {
        let endpoint = self.specs[index].endpoint();
        poll_until(
            "the etcd member to follow a leader again",
            START_DEADLINE,
            || async {
                member_status(&endpoint)
                    .await
                    .ok()
                    .filter(|s| s.leader_id != 0)
            },
        )
        .await;
    }
}
