//! A singleton scheduler, the example of leader election to copy. Any number of copies run;
//! the one that leads the election `SCHEDULE_ELECTION` runs the job every
//! `SCHEDULE_EVERY_MS`, and each run writes its record to a fenced resource (`PUT
//! SCHEDULE_URL`, e.g. the fenced-kv example's `/kv/schedule`, whose lock key is
//! `kv:schedule`: the election's name) with the leader's term and proof. A leader that lost
//! its term without knowing it (frozen, partitioned) has its next write refused by the fence,
//! never applied; it then stands in line again.
//!
//! Environment: the SDK's (`LOCK_ENDPOINTS`, `LOCK_CLIENT_TOKEN`, `TLS_CA_FILE` or
//! `UNSAFE_PLAINTEXT_HTTP`, `LOCK_SESSION_TTL`, ...), `SCHEDULE_URL` (required),
//! `SCHEDULE_ELECTION` (default `kv:schedule`), `SCHEDULE_EVERY_MS` (default 1000),
//! `SCHEDULE_NODE` (what the leader announces, default `scheduler-PID`), `SCHEDULE_RUNS`
//! (stop after this many runs; default never). One line per event on stdout.

use std::time::Duration;

use lock_client::election::{LeaderValue, Leadership};
use std::process::ExitCode;

use lock_client::{
    AcquirePolicy, ClientBuilder, LockClient, LockClientSession, LockError, LockKey,
};

/// How long a candidate waits in line per campaign; it then campaigns again.
const CAMPAIGN_BUDGET: Duration = Duration::from_secs(3600);
/// The job's own request timeout.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

type Error = Box<dyn std::error::Error>;

struct Settings {
    url: String,
    election: LockKey,
    every: Duration,
    node: LeaderValue,
    runs: Option<u64>,
}

impl Settings {
    fn from_env() -> Result<Self, Error> {
        let var = |name: &str| std::env::var(name).ok();
        let url = var("SCHEDULE_URL").ok_or("SCHEDULE_URL is not set: the fenced resource")?;
        let election = LockKey::parse(var("SCHEDULE_ELECTION").unwrap_or("kv:schedule".into()))?;
        let every_ms: u64 = var("SCHEDULE_EVERY_MS").map_or(Ok(1000), |v| v.parse())?;
        let node = var("SCHEDULE_NODE").unwrap_or(format!("scheduler-{}", std::process::id()));
        let runs = var("SCHEDULE_RUNS").map(|v| v.parse()).transpose()?;
        Ok(Self {
            url,
            election,
            every: Duration::from_millis(every_ms.max(1)),
            node: LeaderValue::parse(node)?,
            runs,
        })
    }
}

/// How a term of leadership ended.
enum Ended {
    /// The SDK declared the term lost (deadline, refused renewal, lost session).
    Lost,
    /// The resource refused a write: a later term wrote first.
    Fenced,
    /// `SCHEDULE_RUNS` runs done.
    Done,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // Bad settings are one line and exit 2; anything later, one line and exit 1.
    let setup = Settings::from_env().and_then(|settings| {
        let client = ClientBuilder::from_env(|key| std::env::var(key).ok())?.build()?;
        Ok((settings, client))
    });
    let (settings, client) = match setup {
        Ok(setup) => setup,
        Err(err) => {
            eprintln!("singleton-scheduler: {err}");
            return ExitCode::from(2);
        }
    };
    match run(&settings, client).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("singleton-scheduler: {err}");
            ExitCode::from(1)
        }
    }
}

/// Serves until `SCHEDULE_RUNS` runs, opening a new session whenever one is lost.
async fn run(settings: &Settings, client: LockClient) -> Result<(), Error> {
    let http = reqwest::Client::builder().timeout(WRITE_TIMEOUT).build()?;
    let mut ran = 0;
    // A session lost (frozen past its TTL, say) ends every term in it: a new one stands in
    // line again.
    loop {
        let session = client.open_session(settings.node.as_str()).await?;
        match serve(&session, &http, settings, &mut ran).await {
            Ok(()) => {
                session.close().await;
                break;
            }
            Err(LockError::SessionExpired { .. } | LockError::SessionUnknown { .. }) => {
                println!("event=session_lost");
            }
            Err(err) => return Err(err.into()),
        }
    }
    client.close();
    Ok(())
}

/// Campaigns, leads, and campaigns again after each lost term, until `SCHEDULE_RUNS` runs.
async fn serve(
    session: &LockClientSession,
    http: &reqwest::Client,
    settings: &Settings,
    ran: &mut u64,
) -> Result<(), LockError> {
    let ttl = Duration::from_millis(session.ttl_ms());
    let policy = AcquirePolicy {
        budget: CAMPAIGN_BUDGET,
        max_attempts: u32::MAX,
        ..AcquirePolicy::DEFAULT
    };
    loop {
        let campaign = session.campaign(&settings.election, settings.node.clone(), ttl, &policy);
        let Some(leading) = campaign.await? else {
            continue;
        };
        println!("event=leading term={}", leading.term());
        match lead(session, &leading, http, settings, ran).await {
            Ended::Lost => println!("event=lost term={}", leading.term()),
            Ended::Fenced => println!("event=fenced term={}", leading.term()),
            Ended::Done => {
                let _ = session.resign(leading).await;
                return Ok(());
            }
        }
    }
}

/// Runs the job every `settings.every` while `leading` holds, each run fenced by its term.
async fn lead(
    session: &LockClientSession,
    leading: &Leadership,
    http: &reqwest::Client,
    settings: &Settings,
    ran: &mut u64,
) -> Ended {
    let term = leading.term();
    loop {
        // The guard before every write: a term the SDK may have lost writes nothing.
        if session.check_still_held(leading.handle()).is_err() {
            return Ended::Lost;
        }
        let record = format!(
            "run {} by {} in term {term}",
            *ran + 1,
            settings.node.as_str()
        );
        let mut write = http
            .put(&settings.url)
            .header("x-fencing-token", term.to_string())
            .body(record);
        if let Some(proof) = leading.handle().fence_proof() {
            write = write.header("x-fencing-proof", proof);
        }
        match write.send().await.map(|answer| answer.status()) {
            Ok(status) if status.is_success() => {
                *ran += 1;
                println!("event=ran run={ran} term={term}");
            }
            Ok(reqwest::StatusCode::CONFLICT) => return Ended::Fenced,
            Ok(status) => println!("event=write_failed term={term} status={status}"),
            Err(err) => println!("event=write_failed term={term} error={err}"),
        }
        if settings.runs.is_some_and(|runs| *ran >= runs) {
            return Ended::Done;
        }
        tokio::time::sleep(settings.every).await;
    }
}
