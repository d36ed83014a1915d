//! The one-shot commands: `session open|close`, `acquire`, `release`, `inspect`, `revoke`.
//! Each builds a client through the SDK (an `AdminClient` for one-shot calls, a `LockClient`
//! when it opens a session), makes its calls and closes it.

use std::time::Duration;

use lock_client::admin::watch::WatchItem;
use lock_client::admin::{AdminClient, Credential};
use lock_client::election::Leader;
use lock_client::{AcquirePolicy, ClientBuilder, ClientConfig, ClientError, ClientTls, LockClient};
use serde_json::Value;

use crate::cli::{
    AcquireArgs, CloseArgs, Global, KeyArgs, LeaderArgs, OpenArgs, ReleaseArgs, RevokeArgs,
    WatchArgs,
};
use crate::error::{CtlError, code};
use crate::output::{self, Fields};

/// The environment key of the operators' credential (for revoke).
pub const ADMIN_TOKEN_ENV: &str = "LOCK_ADMIN_TOKEN";

/// The SDK's configuration: its environment keys as `ClientBuilder::from_env` reads
/// them, the endpoints from `--endpoints` / `LOCK_ENDPOINTS`.
pub fn config(global: &Global) -> Result<ClientBuilder, CtlError> {
    let lookup = |key: &str| match key {
        // The endpoints come from clap (flag, then the same variable).
        "LOCK_ENDPOINTS" => None,
        "UNSAFE_PLAINTEXT_HTTP" if global.unsafe_plaintext_http => Some("true".to_owned()),
        _ => std::env::var(key).ok(),
    };
    let builder = ClientBuilder::from_env(lookup).map_err(|e| CtlError::Config(e.to_string()))?;
    let endpoints: Vec<String> = global
        .endpoints
        .iter()
        .map(|e| e.trim())
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect();
    if endpoints.is_empty() {
        return Err(CtlError::Usage(
            "--endpoints (LOCK_ENDPOINTS): at least one lock-server URL is required".into(),
        ));
    }
    let tls = ClientTls::from_lookup(lookup);
    for endpoint in &endpoints {
        tls.check_url("--endpoints (LOCK_ENDPOINTS)", endpoint)
            .map_err(|e| CtlError::Usage(e.to_string()))?;
    }
    Ok(builder.endpoints(endpoints))
}

/// The settings `builder` would run with.
pub fn settings(builder: &ClientBuilder) -> Result<ClientConfig, CtlError> {
    builder
        .config()
        .map_err(|e| CtlError::Config(e.to_string()))
}

/// A client over HTTP, with its heartbeat thread.
pub fn client(builder: ClientBuilder) -> Result<LockClient, CtlError> {
    builder.build().map_err(start_error)
}

/// A client for one-shot calls (no session of its own, no heartbeat thread).
pub fn admin(builder: ClientBuilder) -> Result<AdminClient, CtlError> {
    builder.build_admin().map_err(start_error)
}

fn start_error(err: ClientError) -> CtlError {
    match err {
        ClientError::Config(e) => CtlError::Config(e.to_string()),
        other => CtlError::Failed(error_chain(&other)),
    }
}

/// `err` and its sources, as one line.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        line.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    line
}

/// The acquire policy of a wait budget: the SDK's backoff (`AcquirePolicy::DEFAULT`'s base
/// and cap), limited by the budget only; `0s` tries once.
pub fn wait_policy(wait: Duration) -> AcquirePolicy {
    if wait.is_zero() {
        return AcquirePolicy::TRY_ONCE;
    }
    AcquirePolicy {
        budget: wait,
        max_attempts: u32::MAX,
        ..AcquirePolicy::DEFAULT
    }
}

/// A duration as the user wrote it (`2s`, `500ms`).
pub fn shown(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// `session open`: opens a session, then detaches it (never closed here) and prints its id.
pub async fn session_open(global: &Global, args: OpenArgs) -> Result<u8, CtlError> {
    let mut builder = config(global)?;
    if let Some(ttl) = args.ttl {
        builder = builder.session_ttl(ttl);
    }
    let client = client(builder)?;
    let session = client.open_session(args.owner.as_str()).await?;
    let fields: Fields = vec![
        ("session_id", session.id().expose().into()),
        ("ttl_ms", session.ttl_ms().into()),
        ("owner_id", args.owner.as_str().into()),
        ("backend", session.backend().into()),
    ];
    session.detach();
    client.close();
    output::print(&fields, global.json);
    Ok(code::OK)
}

/// `session close`: closes the session on the server.
pub async fn session_close(global: &Global, args: CloseArgs) -> Result<u8, CtlError> {
    let admin = admin(config(global)?)?;
    admin.close_session(args.session).await?;
    let fields: Fields = vec![
        ("session_id", args.session.expose().into()),
        ("closed", true.into()),
    ];
    output::print(&fields, global.json);
    Ok(code::OK)
}

/// `acquire`: an acquire within the wait, through `AdminClient::acquire_as`.
pub async fn acquire(global: &Global, args: AcquireArgs) -> Result<u8, CtlError> {
    let builder = config(global)?;
    let ttl = args.ttl.unwrap_or(settings(&builder)?.default_ttl());
    let admin = admin(builder)?;
    let policy = wait_policy(args.wait);
    let grant = admin
        .acquire_as(args.session, &args.key, ttl, &policy)
        .await?;
    let Some(grant) = grant else {
        return Err(CtlError::NotAcquired {
            key: args.key.to_string(),
            wait: shown(args.wait),
        });
    };
    let fields: Fields = vec![
        ("lock_key", grant.lock_key.as_str().into()),
        ("fencing_token", grant.fencing_token.0.into()),
        ("proof", grant.proof.map_or(Value::Null, Value::from)),
        ("lease_ms", grant.lease_ms.into()),
        ("expires_at", display_time(&grant.expires_at)),
    ];
    output::print(&fields, global.json);
    Ok(code::OK)
}

/// `release`: a release, through `AdminClient::release_as`.
pub async fn release(global: &Global, args: ReleaseArgs) -> Result<u8, CtlError> {
    let admin = admin(config(global)?)?;
    let released = admin
        .release_as(args.session, &args.key, args.token)
        .await?;
    let fields: Fields = vec![
        ("lock_key", args.key.as_str().into()),
        ("fencing_token", args.token.0.into()),
        ("released", released.into()),
    ];
    output::print(&fields, global.json);
    if !released {
        return Err(CtlError::NotReleased {
            key: args.key,
            token: args.token,
        });
    }
    Ok(code::OK)
}

/// `inspect`: who holds the key. A free key is an answer (`held=false`), not an error.
pub async fn inspect(global: &Global, args: KeyArgs) -> Result<u8, CtlError> {
    let info = admin(config(global)?)?.inspect(&args.key).await?;
    let fields: Fields = match info {
        Some(info) => {
            let mut fields: Fields = vec![
                ("lock_key", info.lock_key.as_str().into()),
                ("held", true.into()),
                ("fencing_token", info.fencing_token.0.into()),
                ("owner_id", info.owner_id.as_str().into()),
                ("expires_at", display_time(&info.expires_at)),
                ("waiters", info.waiters.into()),
            ];
            if let Some(value) = &info.value {
                fields.push(("value", value.as_str().into()));
            }
            // A key held by readers or permits: how many, and each one's scope and token.
            if !info.holders.is_empty() {
                let holders: Vec<String> = (info.holders.iter())
                    .map(|h| format!("{}:{}", h.scope.as_text(), h.fencing_token.0))
                    .collect();
                fields.push(("holders", holders.join(",").into()));
            }
            if let Some(permits) = info.permits {
                fields.push(("permits", permits.into()));
            }
            fields
        }
        None => vec![
            ("lock_key", args.key.as_str().into()),
            ("held", false.into()),
            ("fencing_token", Value::Null),
            ("owner_id", Value::Null),
            ("expires_at", Value::Null),
        ],
    };
    output::print(&fields, global.json);
    Ok(code::OK)
}

/// `revoke`: revokes the key's grant with `LOCK_ADMIN_TOKEN`. Nothing to revoke is an answer
/// (`revoked=false`).
pub async fn revoke(global: &Global, args: RevokeArgs) -> Result<u8, CtlError> {
    let admin_token = std::env::var(ADMIN_TOKEN_ENV)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .map(Credential::new)
        .ok_or_else(|| {
            CtlError::Config(format!(
                "{ADMIN_TOKEN_ENV} is not set: revoke (L8) needs the operators' admin credential in the environment"
            ))
        })?;
    let outcome = admin(config(global)?)?
        .revoke(&args.key, &admin_token, args.reason.as_ref())
        .await?;
    let fields: Fields = vec![
        ("lock_key", outcome.lock_key.as_str().into()),
        ("revoked", outcome.revoked.into()),
        (
            "fencing_token",
            outcome.fencing_token.map_or(Value::Null, |t| t.0.into()),
        ),
    ];
    output::print(&fields, global.json);
    Ok(code::OK)
}

/// A display-only timestamp as the wire spells it (RFC 3339, UTC, `Z`).
fn display_time(at: &impl serde::Serialize) -> Value {
    serde_json::to_value(at).unwrap_or(Value::Null)
}

/// `lockctl leader NAME [--follow]`: the election's leader, then (following) each change.
pub async fn leader(global: &Global, args: LeaderArgs) -> Result<u8, CtlError> {
    let admin = admin(config(global)?)?;
    let fields = |leader: Option<Leader>| -> Fields {
        let name = ("name", args.name.as_str().into());
        match leader {
            Some(leader) => vec![
                name,
                ("leader", true.into()),
                ("term", leader.term.0.into()),
                (
                    "value",
                    leader.value.map_or(Value::Null, |v| v.as_str().into()),
                ),
                ("owner_id", leader.owner_id.as_str().into()),
                ("expires_at", display_time(&leader.expires_at)),
            ],
            None => vec![name, ("leader", false.into()), ("term", Value::Null)],
        }
    };
    if !args.follow {
        output::print(&fields(admin.leader(&args.name).await?), global.json);
        return Ok(0);
    }
    let mut observer = admin.observe(&args.name);
    loop {
        let change = tokio::select! {
            change = observer.next() => change?,
            _ = tokio::signal::ctrl_c() => return Ok(0),
        };
        output::print(&fields(change), global.json);
    }
}

/// `lockctl watch PREFIX [--after N]`: one line per event (or gap) until SIGINT.
pub async fn watch(global: &Global, args: WatchArgs) -> Result<u8, CtlError> {
    let admin = admin(config(global)?)?;
    let mut watcher = admin.watch(&args.prefix, args.after).await?;
    loop {
        let item = tokio::select! {
            item = watcher.next() => item?,
            _ = tokio::signal::ctrl_c() => return Ok(0),
        };
        let fields: Fields = match item {
            WatchItem::Event(event) => vec![
                ("position", event.position.into()),
                ("lock_key", event.lock_key.as_str().into()),
                (
                    "kind",
                    serde_json::to_value(event.kind).unwrap_or(Value::Null),
                ),
                ("fencing_token", event.fencing_token.0.into()),
                (
                    "owner_id",
                    event.owner_id.map_or(Value::Null, |o| o.as_str().into()),
                ),
                ("scope", shown_scope(event.scope)),
                (
                    "value",
                    event.value.map_or(Value::Null, |v| v.as_str().into()),
                ),
            ],
            WatchItem::Gap(gap) => vec![
                ("gap", true.into()),
                ("after", gap.after.into()),
                ("resume_from", gap.resume_from.into()),
            ],
        };
        output::print(&fields, global.json);
    }
}

/// A share's scope as a field; the whole key's is left out.
fn shown_scope(scope: lock_api::GrantScope) -> Value {
    if scope.is_exclusive() {
        Value::Null
    } else {
        scope.as_text().into()
    }
}
