//! `lockctl run KEY... -- CMD`: hold KEY (or every KEY, a set acquired all or nothing) for as
//! long as CMD runs, and stop CMD the moment the SDK declares a lock lost.
//!
//! One `LockClient` and one session (its heartbeat thread keeps the session alive and renews
//! the lease), an acquire within `--wait`, CMD started in a process group of its own with
//! the token and proof in its environment, then a supervision loop that ends on the first of:
//! - CMD exits by itself: release, close, exit with CMD's code (or 70 if the release shows
//!   the grant was already gone: CMD's work may overlap another holder's);
//! - the lock is lost: the SDK's `on_lock_lost` listener fires, or the SDK's own guard
//!   (`remaining`, checked whenever the conservative deadline comes due) refuses the handle.
//!   CMD's group gets SIGTERM, SIGKILL after `--grace` (at most half the lease's safety
//!   margin, so CMD is gone before the server's expiry); exit 70.
//!
//! SIGTERM, SIGINT and SIGHUP sent to lockctl are forwarded to CMD's group and supervision
//! goes on (CMD's exit then releases the lock as usual).

use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Duration;

use lock_api::{
    Claim, FencingToken, LeaderValue, LockKey, LockLost, LockMode, OwnerId, SET_KEYS_MAX,
};
use lock_client::{LockClient, LockClientSession, LockHandle, LockSet};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::cli::{Global, RunArgs};
use crate::commands::{self, ADMIN_TOKEN_ENV, shown, wait_policy};
use crate::error::{CtlError, signal_code};
use crate::output::{self, Fields};

/// The environment CMD gets: the key, the grant's token and its proof (for a set, each
/// name with `_N` for key N, and [`KEYS_ENV`]).
pub const KEY_ENV: &str = "LOCK_KEY";
/// A set's keys, sorted, space-separated.
pub const KEYS_ENV: &str = "LOCK_KEYS";
/// The fencing token CMD passes with every write it makes (`X-Fencing-Token`).
pub const TOKEN_ENV: &str = "LOCK_FENCING_TOKEN";
/// The lock-server's proof of the token (`X-Fencing-Proof`); unset when the server signs no
/// grants.
pub const PROOF_ENV: &str = "LOCK_FENCING_PROOF";
/// What the grant holds of its key (`exclusive`, `shared`, `permit-SLOT`: ADR 0007).
pub const SCOPE_ENV: &str = "LOCK_SCOPE";
/// Never handed to CMD: lockctl's credentials (CMD gets the token, not the right to act on
/// the lock service).
const WITHHELD_ENV: [&str; 2] = ["LOCK_CLIENT_TOKEN", ADMIN_TOKEN_ENV];
/// Slack added to a deadline check so the timer fires after, not at, the deadline.
const DEADLINE_SLACK: Duration = Duration::from_millis(1);

/// The signals forwarded to CMD.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self, CtlError> {
        let install = |kind: SignalKind| {
            signal(kind).map_err(|e| CtlError::Failed(format!("install a signal handler: {e}")))
        };
        Ok(Self {
            term: install(SignalKind::terminate())?,
            int: install(SignalKind::interrupt())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }
}

/// How supervision ended.
enum Ended {
    Exited(ExitStatus),
    Lost(LockLost),
}

/// `lockctl run`. Returns the exit code: CMD's own, or the failure's.
pub async fn run(global: &Global, mut args: RunArgs) -> Result<u8, CtlError> {
    let json = global.json;
    args.keys = lock_api::key_set(args.keys)
        .map_err(|refused| CtlError::Usage(format!("run: {}", refused.reason)))?;
    let builder = commands::config(global)?;
    let settings = commands::settings(&builder)?;
    let ttl = args.ttl.unwrap_or(settings.default_ttl());
    // Checked before anything starts against the TTL asked for, and again against the lease
    // granted (the server may clamp it shorter).
    fit_grace(args.grace, settings.stop_grace_limit(ttl), ttl)?;
    let builder = builder.session_ttl(ttl);
    let owner = match args.owner {
        Some(ref owner) => owner.clone(),
        None => default_owner()?,
    };
    // Installed first: from here on a SIGTERM or SIGINT is ours to handle, never a silent
    // death that leaves CMD unsupervised.
    let mut signals = Signals::install()?;
    let client = commands::client(builder)?;
    let session = client.open_session(owner.as_str()).await?;
    let held = match acquire(&session, &mut signals, &args, &owner, ttl).await {
        Ok(held) => held,
        Err(err) => {
            finish(session, client).await;
            return Err(err);
        }
    };
    let mut started = match start_cmd(&session, &client, &held, &args) {
        Ok(started) => started,
        Err(err) => {
            release_all(&session, held).await;
            finish(session, client).await;
            return Err(err);
        }
    };
    let group = started
        .child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw)
        .ok_or_else(|| CtlError::Failed("CMD has no process id".into()))?;
    let mut acquired = granted(&held);
    acquired.extend([
        ("session_ttl_ms", session.ttl_ms().into()),
        ("pid", group.as_raw().into()),
    ]);
    output::event(&acquired, json);

    let ended = supervise(&session, &held, &mut started, group, &mut signals, json).await?;

    match ended {
        Ended::Exited(status) => after_cmd_exited(status, session, client, held, json).await,
        Ended::Lost(lost) => {
            report_lost(&lost, json);
            let what = stop(&mut started.child, group, started.grace, json).await;
            release_all(&session, held).await;
            finish(session, client).await;
            Err(CtlError::Lost { lost, what })
        }
    }
}

/// The `acquired` event's fields: the key, token and lease (a set: each key's, in arrays).
fn granted(held: &[LockHandle]) -> Fields {
    let lease_ms = held.iter().map(LockHandle::lease_ms).min().unwrap_or(0);
    if let [handle] = held {
        return vec![
            ("event", "acquired".into()),
            ("lock_key", handle.lock_key().as_str().into()),
            ("fencing_token", handle.fencing_token().0.into()),
            ("scope", handle.scope().as_text().into()),
            ("lease_ms", lease_ms.into()),
        ];
    }
    let keys: Vec<Value> = held.iter().map(|h| h.lock_key().as_str().into()).collect();
    let tokens: Vec<Value> = held.iter().map(|h| h.fencing_token().0.into()).collect();
    vec![
        ("event", "acquired".into()),
        ("lock_keys", keys.into()),
        ("fencing_tokens", tokens.into()),
        ("lease_ms", lease_ms.into()),
    ]
}

/// Acquires `args.keys` for `ttl` within `--wait` (several: as a set, all or nothing),
/// unless a signal comes first: one handle per key, sorted, or why there is none (the
/// session left open).
async fn acquire(
    session: &LockClientSession,
    signals: &mut Signals,
    args: &RunArgs,
    owner: &OwnerId,
    ttl: Duration,
) -> Result<Vec<LockHandle>, CtlError> {
    let policy = wait_policy(args.wait);
    let named = match args.keys.as_slice() {
        [key] => key.to_string(),
        keys => {
            let keys: Vec<&str> = keys.iter().map(LockKey::as_str).collect();
            format!("a key of the set {}", keys.join(", "))
        }
    };
    let claim = Claim::of(args.shared.then_some(LockMode::Shared), args.permits)
        .map_err(|e| CtlError::Usage(e.to_string()))?;
    if claim != Claim::Exclusive && args.keys.len() > 1 {
        return Err(CtlError::Usage(
            "--permits and --shared hold one key; a set holds each key alone".into(),
        ));
    }
    let campaign = args.campaign.then(|| match &args.value {
        Some(value) => Ok(value.clone()),
        None => LeaderValue::parse(owner.as_str()),
    });
    let campaign = campaign
        .transpose()
        .map_err(|e| CtlError::Usage(e.to_string()))?;
    let acquiring = async {
        match (args.keys.as_slice(), campaign) {
            ([name], Some(value)) => Ok(session
                .campaign(name, value, ttl, &policy)
                .await?
                .map(|leadership| vec![leadership.into_handle()])),
            ([key], None) => Ok::<_, lock_api::LockError>(
                session
                    .acquire_claim(key, claim, ttl, &policy)
                    .await?
                    .map(|h| vec![h]),
            ),
            (keys, _) => Ok(session
                .acquire_set(keys, ttl, &policy)
                .await?
                .map(LockSet::into_handles)),
        }
    };
    let acquired = tokio::select! {
        acquired = acquiring => acquired,
        signal = signals.recv() => {
            return Err(CtlError::Interrupted { key: named, signal: signal as i32 });
        }
    };
    match acquired {
        Ok(Some(held)) => Ok(held),
        Ok(None) => Err(CtlError::NotAcquired {
            key: named,
            wait: shown(args.wait),
        }),
        Err(err) => Err(err.into()),
    }
}

/// Releases every grant held; the first loss a release reports.
async fn release_all(session: &LockClientSession, held: Vec<LockHandle>) -> Option<LockLost> {
    let mut first_loss = None;
    for handle in held {
        if let Err(lost) = session.release(handle).await {
            first_loss.get_or_insert(lost);
        }
    }
    first_loss
}

/// CMD running under the grant, and what supervising it needs.
struct Started {
    child: Child,
    /// Between SIGTERM and SIGKILL, fitted to the lease granted.
    grace: Duration,
    /// The grant's loss, as the SDK's `on_lock_lost` listener reports it.
    lost_rx: mpsc::UnboundedReceiver<LockLost>,
}

/// Readies CMD under `held`: the grace fitted to the shortest lease granted, the loss
/// listener (any grant held), a last check that every lock is still held, then CMD started.
/// On an error the grants are still held.
fn start_cmd(
    session: &LockClientSession,
    client: &LockClient,
    held: &[LockHandle],
    args: &RunArgs,
) -> Result<Started, CtlError> {
    let lease_ms = held.iter().map(LockHandle::lease_ms).min().unwrap_or(0);
    let lease = Duration::from_millis(lease_ms);
    let grace = fit_grace(args.grace, client.config().stop_grace_limit(lease), lease)?;
    // The listener only passes the loss on: it runs on the heartbeat thread and must not
    // block or do I/O.
    let (lost_tx, lost_rx) = mpsc::unbounded_channel::<LockLost>();
    let grants: Vec<(LockKey, FencingToken)> = held
        .iter()
        .map(|h| (h.lock_key().clone(), h.fencing_token()))
        .collect();
    session.on_lock_lost(move |lost| {
        if grants.contains(&(lost.lock_key.clone(), lost.fencing_token)) {
            let _ = lost_tx.send(lost.clone());
        }
    });
    for handle in held {
        if let Err(lost) = session.check_still_held(handle) {
            return Err(CtlError::Lost {
                lost,
                what: "CMD was not started".into(),
            });
        }
    }
    let child = spawn(&args.command, held)?;
    Ok(Started {
        child,
        grace,
        lost_rx,
    })
}

/// Waits for CMD to exit or the lock to be lost, forwarding signals to CMD's `group`
/// meanwhile.
async fn supervise(
    session: &LockClientSession,
    held: &[LockHandle],
    started: &mut Started,
    group: Pid,
    signals: &mut Signals,
    json: bool,
) -> Result<Ended, CtlError> {
    loop {
        let due = match soonest_due(session, held) {
            Ok(due) => due,
            Err(lost) => return Ok(Ended::Lost(lost)),
        };
        tokio::select! {
            status = started.child.wait() => match status {
                Ok(status) => return Ok(Ended::Exited(status)),
                Err(err) => return Err(CtlError::Failed(format!("wait for CMD: {err}"))),
            },
            Some(lost) = started.lost_rx.recv() => return Ok(Ended::Lost(lost)),
            // The SDK's guard, whenever the conservative deadline comes due (the heartbeat
            // moves it on; the loop then waits for the new one).
            () = tokio::time::sleep(due + DEADLINE_SLACK) => {}
            signal = signals.recv() => {
                let _ = killpg(group, signal);
                output::event(
                    &[("event", "signal_forwarded".into()), ("signal", signal.as_str().into())],
                    json,
                );
            }
        }
    }
}

/// Time left before the soonest conservative deadline of `held`, or the first loss.
fn soonest_due(session: &LockClientSession, held: &[LockHandle]) -> Result<Duration, LockLost> {
    let mut soonest = Duration::MAX;
    for handle in held {
        soonest = soonest.min(session.remaining(handle)?);
    }
    Ok(soonest)
}

/// CMD exited by itself with `status`: release, close, and CMD's exit code, or the loss if the
/// release shows the grant was already gone.
async fn after_cmd_exited(
    status: ExitStatus,
    session: LockClientSession,
    client: LockClient,
    held: Vec<LockHandle>,
    json: bool,
) -> Result<u8, CtlError> {
    let code = exit_code(status);
    let released = release_all(&session, held).await;
    finish(session, client).await;
    if let Some(lost) = released {
        return Err(CtlError::Lost {
            lost,
            what: format!(
                "CMD had exited ({}), but its work may overlap another holder's",
                describe(status)
            ),
        });
    }
    output::event(&exited(status, code), json);
    Ok(code)
}

/// The `lost` event, naming the SIGTERM CMD is about to get.
fn report_lost(lost: &LockLost, json: bool) {
    output::event(
        &[
            ("event", "lost".into()),
            ("lock_key", lost.lock_key.as_str().into()),
            ("fencing_token", lost.fencing_token.0.into()),
            ("reason", lost.reason.as_str().into()),
            (
                "detail",
                lost.detail.clone().map_or(Value::Null, Value::from),
            ),
            ("signal", Signal::SIGTERM.as_str().into()),
        ],
        json,
    );
}

/// The grace CMD gets between SIGTERM and SIGKILL: `asked` if it fits within `limit` (half
/// the margin of `lease`), else a usage error; `limit` when none was asked for. A longer
/// grace would let CMD run past the server's expiry, beside the next holder.
fn fit_grace(
    asked: Option<Duration>,
    limit: Duration,
    lease: Duration,
) -> Result<Duration, CtlError> {
    match asked {
        None => Ok(limit),
        Some(grace) if grace <= limit => Ok(grace),
        Some(grace) => Err(CtlError::Usage(format!(
            "--grace {}: longer than half the safety margin of a {} lease ({}): CMD could outlive the lease",
            shown(grace),
            shown(lease),
            shown(limit)
        ))),
    }
}

/// SIGTERM to CMD's group, SIGKILL after `grace`; what became of CMD.
async fn stop(child: &mut Child, group: Pid, grace: Duration, json: bool) -> String {
    let _ = killpg(group, Signal::SIGTERM);
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            let _ = killpg(group, Signal::SIGKILL);
            output::event(
                &[
                    ("event", "killed".into()),
                    ("signal", Signal::SIGKILL.as_str().into()),
                    ("grace_ms", millis(grace).into()),
                ],
                json,
            );
            child.wait().await
        }
    };
    match status {
        Ok(status) => format!(
            "CMD was stopped (SIGTERM, SIGKILL after {}): {}",
            shown(grace),
            describe(status)
        ),
        Err(err) => format!("CMD was sent SIGTERM; waiting for it failed: {err}"),
    }
}

/// Starts CMD in a process group of its own, with the grants in its environment.
fn spawn(command: &[OsString], held: &[LockHandle]) -> Result<Child, CtlError> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| CtlError::Usage("run: CMD is required after --".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(args).process_group(0).kill_on_drop(false);
    // Every grant name is cleared first, so that CMD never reads one an outer `lockctl run`
    // gave lockctl itself (the other form's names would otherwise pass through).
    cmd.env_remove(KEYS_ENV).env_remove(SCOPE_ENV);
    for suffix in std::iter::once(String::new()).chain((0..SET_KEYS_MAX).map(|n| format!("_{n}"))) {
        for name in [KEY_ENV, TOKEN_ENV, PROOF_ENV] {
            cmd.env_remove(format!("{name}{suffix}"));
        }
    }
    if let [handle] = held {
        grant_env(&mut cmd, handle, "");
        cmd.env(SCOPE_ENV, handle.scope().as_text());
    } else {
        let keys: Vec<&str> = held.iter().map(|h| h.lock_key().as_str()).collect();
        cmd.env(KEYS_ENV, keys.join(" "));
        for (n, handle) in held.iter().enumerate() {
            grant_env(&mut cmd, handle, &format!("_{n}"));
        }
    }
    for key in WITHHELD_ENV {
        cmd.env_remove(key);
    }
    cmd.spawn().map_err(|source| CtlError::Spawn {
        program: program.to_string_lossy().into_owned(),
        source,
    })
}

/// A grant's key, token and proof in CMD's environment, each name ending in `suffix`.
fn grant_env(cmd: &mut Command, handle: &LockHandle, suffix: &str) {
    cmd.env(format!("{KEY_ENV}{suffix}"), handle.lock_key().as_str())
        .env(
            format!("{TOKEN_ENV}{suffix}"),
            handle.fencing_token().0.to_string(),
        );
    let proof = format!("{PROOF_ENV}{suffix}");
    match handle.fence_proof() {
        Some(value) => cmd.env(proof, value),
        None => cmd.env_remove(proof),
    };
}

/// Closes the session (ending it on the server) and the client (joins the heartbeat thread).
async fn finish(session: LockClientSession, client: LockClient) {
    session.close().await;
    client.close();
}

/// CMD's exit code: its own, or 128 + the signal that killed it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(u8::MAX),
        (None, Some(signal)) => signal_code(signal),
        (None, None) => u8::MAX,
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => Signal::try_from(signal).map_or_else(
            |_| format!("killed by signal {signal}"),
            |s| format!("killed by {}", s.as_str()),
        ),
        (None, None) => "ended".into(),
    }
}

fn exited(status: ExitStatus, code: u8) -> Fields {
    use std::os::unix::process::ExitStatusExt;
    vec![
        ("event", "exited".into()),
        ("exit_code", code.into()),
        (
            "signal",
            status
                .signal()
                .and_then(|s| Signal::try_from(s).ok())
                .map_or(Value::Null, |s| s.as_str().into()),
        ),
    ]
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `lockctl@HOST:PID`.
fn default_owner() -> Result<OwnerId, CtlError> {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into());
    OwnerId::parse(format!("lockctl@{host}:{}", std::process::id()))
        .map_err(|e| CtlError::Usage(format!("--owner: {e}")))
}
