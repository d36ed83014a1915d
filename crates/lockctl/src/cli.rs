//! The command line (clap): commands, flags, their environment fallbacks and value parsers.
//! Flag > environment > default; durations need a unit (`10s`, `500ms`), as in every service's
//! configuration.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lock_api::{FencingToken, LeaderValue, LockKey, OwnerId, RevokeReason, SessionId};

const ABOUT: &str = "Fenced locks from the shell, over the lock service's SDK (lock-client).";

const ENVIRONMENT_AND_EXIT_CODES: &str = "\
Environment:
  LOCK_ENDPOINTS              lock-server base URLs, comma-separated (--endpoints)
  LOCK_CLIENT_TOKEN           the lock clients' bearer credential, presented on every call but revoke
  LOCK_ADMIN_TOKEN            the operators' credential, for revoke (L8) only
  LOCK_SESSION_TTL, LOCK_DEFAULT_TTL, LOCK_CLIENT_SAFETY_MARGIN, LOCK_CLIENT_REQUEST_TIMEOUT,
  LOCK_CLIENT_HEARTBEAT_PERIOD  the SDK's settings (C5), read as the SDK reads them

Exit codes:
  0    done (run: CMD's own exit code passes through; killed by a signal: 128 + signal)
  1    refused by the lock service (unknown session, bad credential, ...), nothing released,
       or fence-check: a promise of the fence broken
  64   bad usage (EX_USAGE): unknown command or flag, bad key, duration, token or session id
  69   lock service unavailable (EX_UNAVAILABLE): no answer, NOT_LEADER, STORE_UNAVAILABLE,
       or over the credential's rate or quota (429)
  70   the lock was lost while CMD ran (run; CMD was stopped)
  75   not acquired within --wait: another session holds the key (EX_TEMPFAIL)
  78   bad configuration in the environment (EX_CONFIG), e.g. LOCK_ADMIN_TOKEN unset for revoke
  126  run: CMD cannot be executed; 127: CMD not found
  128+N  run: interrupted by signal N before CMD started";

const SESSION_ABOUT: &str = "\
Open or close a session kept across invocations. Nothing heartbeats such a session: lockctl \
exits right after each command, so the session expires --ttl after it was opened (the server \
clamps the TTL, at most lock.ttl.max, 60 s by default), and every grant in it with it. To hold \
a lock for as long as a command runs, use `lockctl run`, which heartbeats.";

const RUN_ABOUT: &str = "\
Run CMD while holding KEY. Opens a session, acquires KEY (waiting up to --wait while another \
session holds it), starts CMD in a process group of its own with LOCK_KEY, LOCK_FENCING_TOKEN \
and LOCK_FENCING_PROOF in its environment (and without LOCK_CLIENT_TOKEN or LOCK_ADMIN_TOKEN), \
and heartbeats the session and renews the lease while CMD runs. The moment the SDK declares \
the lock lost (its conservative deadline passed, the server refused a renewal, the session was \
lost) CMD's process group gets SIGTERM, then SIGKILL after --grace, and lockctl exits 70. When \
CMD exits by itself lockctl releases KEY, closes the session and exits with CMD's exit code \
(128 + N for a CMD killed by signal N). SIGTERM, SIGINT and SIGHUP sent to lockctl are \
forwarded to CMD's process group. CMD is not the terminal's foreground process group: a CMD \
that reads the terminal is stopped. A CMD still running when lockctl itself is killed with \
SIGKILL is not stopped by anyone: the lease then expires, and the fencing token is what \
protects the resource. Pass LOCK_FENCING_TOKEN and LOCK_FENCING_PROOF with every write CMD \
makes to a fenced resource. With several keys (`lockctl run KEY KEY... -- CMD`, at most 16) the \
keys are acquired together or not at all (a key set: nothing is held while waiting), CMD gets \
LOCK_KEYS (the keys, sorted, space-separated) and, for each key N (from 0, in that order), \
LOCK_KEY_N, LOCK_FENCING_TOKEN_N and LOCK_FENCING_PROOF_N, and the loss of any key stops CMD. \
With --permits N, KEY is a semaphore and CMD holds one of its N permits; with --shared, CMD holds \
KEY as a reader beside other readers (a `run` without either is the key's writer). CMD then gets \
LOCK_SCOPE (permit-SLOT or shared; exclusive for a writer): a resource fences a permit per slot, \
as KEY#permit-SLOT.";

const ELECT_ABOUT: &str = "\
Run CMD only while leading the election NAME. Opens a session and campaigns: waits in NAME's \
FIFO queue behind earlier candidates (up to --wait), and once elected announces --value (what \
`lockctl leader NAME` shows) and runs CMD exactly as `lockctl run NAME` does: with the term in \
LOCK_FENCING_TOKEN and its proof in LOCK_FENCING_PROOF, CMD stopped (SIGTERM, SIGKILL after \
--grace, exit 70) the moment the SDK declares the leadership lost, and the term resigned when \
CMD exits by itself, which hands NAME to the next candidate at once. Pass the term and proof \
with every write CMD makes: a resource fences a leader that lost its term without knowing it \
(frozen, partitioned) as it fences a lock's holder.";

const FENCE_CHECK_ABOUT: &str = "\
Check that a resource keeps the fence's promises. Takes a grant of KEY (and of a second key, \
KEY.fence-check) from the lock service, then writes to URL: without a token, without a proof, \
with the token relabelled, with a token no lock service issued, with a forged signature and \
with the other key's genuine proof (each must be refused with a 4xx); then lets the grant's \
lease run out, as a paused worker's does, takes KEY in a second session, writes as the new \
holder (must be accepted) and again as the old one (must be refused). With --claim-url each \
holder claims there first (POST), for a resource whose fence another endpoint raises. Prints \
one line per promise (promise, kept, answer) and a summary; exit 0 when every promise is \
kept, 1 when one is broken.";

/// The whole command line.
#[derive(Debug, Parser)]
#[command(
    name = "lockctl",
    version,
    about = ABOUT,
    after_help = ENVIRONMENT_AND_EXIT_CODES
)]
pub struct Cli {
    /// Flags every command takes.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags of every command.
#[derive(Debug, Args)]
pub struct Global {
    /// Lock-server base URLs, comma-separated; a call moves to the next after NOT_LEADER or
    /// no answer.
    #[arg(
        long,
        global = true,
        env = "LOCK_ENDPOINTS",
        value_delimiter = ',',
        default_value = "https://127.0.0.1:8081"
    )]
    pub endpoints: Vec<String>,
    /// Call plain `http://` URLs, the credential and all in clear (a network you trust);
    /// without it an `http://` endpoint or resource URL is refused.
    #[arg(long, global = true, env = "UNSAFE_PLAINTEXT_HTTP")]
    pub unsafe_plaintext_http: bool,
    /// Machine-readable output: one JSON object per line on stdout (run: its events on
    /// stderr, stdout being CMD's); errors as one JSON object on stderr.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Open or close a session kept across invocations (not heartbeated: see `session --help`).
    #[command(subcommand, long_about = SESSION_ABOUT)]
    Session(SessionCommand),
    /// Acquire KEY in SESSION and print the fencing token and its proof.
    Acquire(AcquireArgs),
    /// Release KEY's grant held by SESSION with TOKEN.
    Release(ReleaseArgs),
    /// Show who holds KEY: token, owner and expiry (never a session id).
    Inspect(KeyArgs),
    /// Revoke KEY's grant, with the operators' credential from LOCK_ADMIN_TOKEN.
    Revoke(RevokeArgs),
    /// Run CMD while holding KEY; stop CMD the moment the lock is lost.
    #[command(long_about = RUN_ABOUT)]
    Run(RunArgs),
    /// Run CMD only while leading the election NAME; stop CMD the moment leadership is lost.
    #[command(long_about = ELECT_ABOUT)]
    Elect(ElectArgs),
    /// Show the leader of the election NAME (term, value, owner); with --follow, each change.
    Leader(LeaderArgs),
    /// Print what happens to the keys under PREFIX (granted, released, expired, revoked,
    /// proclaimed), one line per event with its position, until interrupted.
    Watch(WatchArgs),
    /// Check a fenced resource: write to URL with real, stale, forged and missing tokens and
    /// proofs, and report which of the fence's promises it keeps (exit 1 if any is broken).
    #[command(long_about = FENCE_CHECK_ABOUT)]
    FenceCheck(FenceCheckArgs),
    /// Make a caller for a credentials file: its secret to --secret-file (mode 0600), its
    /// line (the secret's digest, roles, owners, limits) to stdout.
    Credential(CredentialArgs),
}

/// `lockctl session ...`.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Open a session and print its id (the session's capability: keep it secret) and TTL.
    /// Nothing heartbeats it: it expires --ttl after it was opened, with its grants.
    Open(OpenArgs),
    /// Close SESSION: the session and all its grants end (idempotent).
    Close(CloseArgs),
}

/// `lockctl session open`.
#[derive(Debug, Args)]
pub struct OpenArgs {
    /// Owner id of the session (1-128 bytes; inspect shows it to anyone with the client
    /// credential).
    #[arg(long, value_parser = owner_id)]
    pub owner: OwnerId,
    /// Session TTL asked for (the server clamps it) [default: LOCK_SESSION_TTL, else 10s].
    #[arg(long, value_parser = positive_duration)]
    pub ttl: Option<Duration>,
}

/// `lockctl session close`.
#[derive(Debug, Args)]
pub struct CloseArgs {
    /// The session id `session open` printed.
    #[arg(value_parser = session_id)]
    pub session: SessionId,
}

/// `lockctl acquire`.
#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// The lock key: 1-200 bytes of [A-Za-z0-9._:-], e.g. payout:42.
    #[arg(value_parser = lock_key)]
    pub key: LockKey,
    /// The session to acquire in (from `session open`).
    #[arg(long, value_parser = session_id)]
    pub session: SessionId,
    /// Lease asked for (the server clamps it); nothing renews it [default: LOCK_DEFAULT_TTL,
    /// else 10s].
    #[arg(long, value_parser = positive_duration)]
    pub ttl: Option<Duration>,
    /// How long to keep trying while another session holds KEY (full-jitter backoff); 0s
    /// tries once.
    #[arg(long, value_parser = duration, default_value = "2s")]
    pub wait: Duration,
}

/// `lockctl release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The lock key.
    #[arg(value_parser = lock_key)]
    pub key: LockKey,
    /// The session holding it.
    #[arg(long, value_parser = session_id)]
    pub session: SessionId,
    /// The grant's fencing token, as `acquire` printed it.
    #[arg(long, value_parser = token)]
    pub token: FencingToken,
}

/// `lockctl inspect` and `lockctl revoke`.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The lock key.
    #[arg(value_parser = lock_key)]
    pub key: LockKey,
}

/// `lockctl fence-check`.
#[derive(Debug, Args)]
pub struct FenceCheckArgs {
    /// The lock key that guards what URL writes, e.g. payout:42.
    #[arg(value_parser = lock_key)]
    pub key: LockKey,
    /// The fenced write: every probe sends X-Fencing-Token and X-Fencing-Proof here.
    pub url: String,
    /// The write's HTTP method.
    #[arg(long, default_value = "PUT")]
    pub method: String,
    /// A header sent with every write and claim, `Name: value` (repeatable). Put secrets in
    /// --bearer-env instead: a command line is visible to every user of the machine.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// The name of an environment variable holding a bearer credential for the resource
    /// (sent as `Authorization: Bearer …`).
    #[arg(long, value_name = "VAR")]
    pub bearer_env: Option<String>,
    /// A JSON body sent with every write.
    #[arg(long)]
    pub body: Option<String>,
    /// Where a holder claims the fence before it writes (POST, same headers), for a resource
    /// whose fence another endpoint raises.
    #[arg(long, value_name = "URL")]
    pub claim_url: Option<String>,
    /// Lease of the probes' grants: the paused holder's grant ends this long after it began,
    /// so a run takes about one lease.
    #[arg(long, value_parser = positive_duration, default_value = "2s")]
    pub lease: Duration,
}

/// `lockctl credential`.
#[derive(Debug, Args)]
pub struct CredentialArgs {
    /// The caller's name, in every audit line (1-64 of A-Z a-z 0-9 - _ .).
    pub name: String,
    /// Its roles, comma-separated: client, admin (LOCK_CREDENTIALS_FILE); creator, executor,
    /// proxy, admin, reader (PAYMENT_CREDENTIALS_FILE).
    #[arg(long, value_delimiter = ',', required = true)]
    pub roles: Vec<String>,
    /// The lock owners it may open sessions as: owner ids or prefixes ending in '*',
    /// comma-separated; '*' any; '-' none [default: -].
    #[arg(long)]
    pub owners: Option<String>,
    /// Where the secret is written (created with mode 0600; must not exist).
    #[arg(long, value_name = "PATH", required_unless_present = "certificate")]
    pub secret_file: Option<std::path::PathBuf>,
    /// Instead of a secret: the caller is whoever presents a client certificate with this DNS
    /// name that the service's client CA verified (mutual TLS, `TLS_CLIENT_CA_FILE`).
    #[arg(long, value_name = "DNS-NAME", conflicts_with = "secret_file")]
    pub certificate: Option<String>,
    /// Its own requests a second per replica [default: the service's].
    #[arg(long)]
    pub rps: Option<u32>,
    /// Its own burst above the rate [default: the service's].
    #[arg(long)]
    pub burst: Option<u32>,
    /// Its own quota of sessions open through one replica [default: the service's].
    #[arg(long)]
    pub sessions: Option<u32>,
    /// Its own quota of acquires waiting on one replica [default: the service's].
    #[arg(long)]
    pub waiters: Option<u32>,
}

/// `lockctl revoke`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// The lock key.
    #[arg(value_parser = lock_key)]
    pub key: LockKey,
    /// Why, told to the holder when its renewal is refused (1-200 bytes of readable text;
    /// counted by its first word: maintenance, incident, security, operator, test).
    #[arg(long, value_parser = revoke_reason)]
    pub reason: Option<RevokeReason>,
}

/// `lockctl run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock key; several keys are acquired together or not at all (a key set, at most
    /// 16), and CMD runs while every one is held.
    #[arg(value_parser = lock_key, required = true, num_args = 1..)]
    pub keys: Vec<LockKey>,
    /// Session TTL and lease asked for; the SDK heartbeats and renews both while CMD runs
    /// [default: LOCK_DEFAULT_TTL, else 10s].
    #[arg(long, value_parser = positive_duration)]
    pub ttl: Option<Duration>,
    /// How long to wait for KEY (every KEY) while another session holds it (full-jitter
    /// backoff); 0s tries once.
    #[arg(long, value_parser = duration, default_value = "30s")]
    pub wait: Duration,
    /// How long CMD has to exit after SIGTERM on a lost lock before SIGKILL; must fit in
    /// half the safety margin of the lease (1.5s of a 10s TTL at the default margin 0.3), so
    /// CMD is dead before the server lets anyone else take KEY [default: that half margin].
    #[arg(long, value_parser = duration)]
    pub grace: Option<Duration>,
    /// Owner id of the session [default: lockctl@HOST:PID].
    #[arg(long, value_parser = owner_id)]
    pub owner: Option<OwnerId>,
    /// Hold one of N permits of KEY, a semaphore: up to N sessions run at once, each in a
    /// slot of its own (CMD gets LOCK_SCOPE=permit-SLOT). One key only.
    #[arg(long, value_parser = permits, conflicts_with = "shared")]
    pub permits: Option<u32>,
    /// Hold KEY shared, as a read/write lock's reader: beside other readers, never beside a
    /// writer (a `run` without it holds the key alone). One key only.
    #[arg(long)]
    pub shared: bool,
    /// The command to run and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
    /// An election's campaign (`lockctl elect`): the grant announces a value.
    #[arg(skip)]
    pub campaign: bool,
    /// The value a campaign announces [default: the owner id].
    #[arg(skip)]
    pub value: Option<LeaderValue>,
}

impl From<ElectArgs> for RunArgs {
    fn from(elect: ElectArgs) -> Self {
        Self {
            keys: vec![elect.name],
            ttl: elect.ttl,
            wait: elect.wait,
            grace: elect.grace,
            owner: elect.owner,
            permits: None,
            shared: false,
            command: elect.command,
            campaign: true,
            value: elect.value,
        }
    }
}

/// `lockctl elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election's name (a lock key).
    #[arg(value_parser = lock_key)]
    pub name: LockKey,
    /// What the leader announces while it leads (at most 4096 bytes) [default: the owner id].
    #[arg(long, value_parser = leader_value)]
    pub value: Option<LeaderValue>,
    /// Session TTL and lease asked for [default: LOCK_DEFAULT_TTL, else 10s].
    #[arg(long, value_parser = positive_duration)]
    pub ttl: Option<Duration>,
    /// How long to wait in line to lead; exit 75 when it runs out.
    #[arg(long, value_parser = duration, default_value = "1h")]
    pub wait: Duration,
    /// How long CMD has to exit after SIGTERM on a lost leadership, as for `run`.
    #[arg(long, value_parser = duration)]
    pub grace: Option<Duration>,
    /// Owner id of the session [default: lockctl@HOST:PID].
    #[arg(long, value_parser = owner_id)]
    pub owner: Option<OwnerId>,
    /// The command to run while leading, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `lockctl watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Keys starting with this are watched ("" for every key).
    #[arg(default_value = "", value_parser = watch_prefix)]
    pub prefix: String,
    /// Resume after this position (one an earlier watch printed) [default: from now].
    #[arg(long)]
    pub after: Option<u64>,
}

/// `lockctl leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The election's name (a lock key).
    #[arg(value_parser = lock_key)]
    pub name: LockKey,
    /// Print the leader, then one line per change (a new term, a new value, no leader),
    /// terms never going backwards, until interrupted.
    #[arg(long)]
    pub follow: bool,
}

/// A permit count, 1 to `PERMITS_MAX`.
pub fn permits(raw: &str) -> Result<u32, String> {
    let n: u32 = raw.parse().map_err(|e| format!("{raw:?}: {e}"))?;
    lock_api::Claim::of(None, Some(n))
        .map(|_| n)
        .map_err(|e| e.to_string())
}

/// A duration with a unit (`10s`, `500ms`, `1m`).
pub fn duration(raw: &str) -> Result<Duration, String> {
    humantime::parse_duration(raw.trim())
        .map_err(|e| format!("{raw:?} is not a duration like 10s or 500ms: {e}"))
}

/// A duration above zero.
pub fn positive_duration(raw: &str) -> Result<Duration, String> {
    let value = duration(raw)?;
    if value.is_zero() {
        return Err(format!("{raw:?}: must be positive"));
    }
    Ok(value)
}

/// A lock key, by the rules both sides share (`LockKey::parse`).
pub fn lock_key(raw: &str) -> Result<LockKey, String> {
    LockKey::parse(raw).map_err(|e| e.to_string())
}

/// An owner id (`OwnerId::parse`).
/// A watch's prefix: empty, or the beginning of a key (a key's characters).
pub fn watch_prefix(raw: &str) -> Result<String, String> {
    if raw.is_empty() {
        return Ok(String::new());
    }
    LockKey::parse(raw.to_owned())
        .map(|key| key.as_str().to_owned())
        .map_err(|e| format!("prefix: {}", e.reason))
}

pub fn leader_value(raw: &str) -> Result<LeaderValue, String> {
    LeaderValue::parse(raw).map_err(|e| e.to_string())
}

pub fn owner_id(raw: &str) -> Result<OwnerId, String> {
    OwnerId::parse(raw).map_err(|e| e.to_string())
}

/// A revoke's reason (`RevokeReason::parse`).
pub fn revoke_reason(raw: &str) -> Result<RevokeReason, String> {
    RevokeReason::parse(raw).map_err(|e| e.to_string())
}

/// A session id (a UUID).
pub fn session_id(raw: &str) -> Result<SessionId, String> {
    SessionId::parse(raw.trim()).map_err(|e| e.to_string())
}

/// A fencing token: digits only, 1 ..= `FencingToken::MAX`.
pub fn token(raw: &str) -> Result<FencingToken, String> {
    let raw = raw.trim();
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{raw:?} is not a token (digits only)"));
    }
    let value: u64 = raw
        .parse()
        .map_err(|_| format!("{raw} is above the largest token {}", FencingToken::MAX))?;
    if value == 0 {
        return Err("tokens start at 1".into());
    }
    FencingToken(value).validate().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn values_are_parsed_by_the_shared_rules() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(duration("10").is_err(), "a bare number has no unit");
        assert!(positive_duration("0s").is_err());
        assert!(lock_key("payout:42").is_ok());
        assert!(lock_key("no spaces").is_err());
        assert!(lock_key("..").is_err());
        assert_eq!(token("7"), Ok(FencingToken(7)));
        for bad in ["0", "+7", "-1", "x", "", "9223372036854775808"] {
            assert!(token(bad).is_err(), "{bad:?}");
        }
        assert!(session_id("not-a-uuid").is_err());
    }

    #[test]
    fn run_takes_its_command_after_the_double_dash() {
        let cli = Cli::try_parse_from([
            "lockctl", "run", "k", "--wait", "1s", "--", "sh", "-c", "exit 3",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(run.keys, [lock_key("k").unwrap()]);
        assert_eq!(run.command, ["sh", "-c", "exit 3"]);
        assert_eq!(run.wait, Duration::from_secs(1));
        let set = Cli::try_parse_from(["lockctl", "run", "b", "a", "--", "true"]).unwrap();
        let Command::Run(set) = set.command else {
            panic!("parsed as {:?}", set.command);
        };
        assert_eq!(set.keys.len(), 2, "several keys: a set");
        assert!(
            Cli::try_parse_from(["lockctl", "run", "k"]).is_err(),
            "CMD is required"
        );
    }
}
