//! The one-shot commands: `session open|close`, `acquire`, `release`, `inspect`, `revoke`.
//! Each builds a `LockClient`, makes its calls through the SDK and closes the client.

use std::time::Duration;

use lock_client::{AcquirePolicy, ClientError, Credential, LockClient, LockClientConfig};
use serde_json::Value;

use crate::cli::{AcquireArgs, CloseArgs, Global, KeyArgs, OpenArgs, ReleaseArgs, RevokeArgs};
use crate::error::{CtlError, code};
use crate::output::{self, Fields};

/// The environment key of the operators' credential (for revoke).
pub const ADMIN_TOKEN_ENV: &str = "LOCK_ADMIN_TOKEN";

/// The SDK's configuration: its environment keys as `LockClientConfig::from_env` reads
/// them, the endpoints from `--endpoints` / `LOCK_ENDPOINTS`.
pub fn config(global: &Global) -> Result<LockClientConfig, CtlError> {
    let mut config = LockClientConfig::from_env(|key| {
        // The endpoints come from clap (flag, then the same variable).
        (key != "LOCK_ENDPOINTS")
            .then(|| std::env::var(key).ok())
            .flatten()
    })
    .map_err(|e| CtlError::Config(e.to_string()))?;
    config.endpoints = global
        .endpoints
        .iter()
        .map(|e| e.trim())
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect();
    if config.endpoints.is_empty() {
        return Err(CtlError::Usage(
            "--endpoints (LOCK_ENDPOINTS): at least one lock-server URL is required".into(),
        ));
    }
    config.tls.plaintext |= global.unsafe_plaintext_http;
    for endpoint in &config.endpoints {
        config
            .tls
            .check_url("--endpoints (LOCK_ENDPOINTS)", endpoint)
            .map_err(|e| CtlError::Usage(e.to_string()))?;
    }
    Ok(config)
}

/// A client over HTTP.
pub fn client(config: LockClientConfig) -> Result<LockClient, CtlError> {
    LockClient::new(config).map_err(|e| match e {
        ClientError::Config(e) => CtlError::Config(e.to_string()),
        ClientError::Start(e) => CtlError::Failed(e),
    })
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
    let mut config = config(global)?;
    if let Some(ttl) = args.ttl {
        config.session_ttl = ttl;
    }
    let client = client(config)?;
    let session = client.open_session(args.owner.as_str()).await?;
    let fields: Fields = vec![
        ("session_id", session.id().expose().into()),
        ("ttl_ms", session.ttl_ms().into()),
        ("owner_id", args.owner.as_str().into()),
        ("backend", session.backend().as_str().into()),
    ];
    session.detach();
    client.close();
    output::print(&fields, global.json);
    Ok(code::OK)
}

/// `session close`: closes the session on the server.
pub async fn session_close(global: &Global, args: CloseArgs) -> Result<u8, CtlError> {
    let client = client(config(global)?)?;
    client.close_session(args.session).await?;
    client.close();
    let fields: Fields = vec![
        ("session_id", args.session.expose().into()),
        ("closed", true.into()),
    ];
    output::print(&fields, global.json);
    Ok(code::OK)
}

/// `acquire`: an acquire within the wait, through `LockClient::acquire_as`.
pub async fn acquire(global: &Global, args: AcquireArgs) -> Result<u8, CtlError> {
    let config = config(global)?;
    let ttl = args.ttl.unwrap_or(config.default_ttl);
    let client = client(config)?;
    let policy = wait_policy(args.wait);
    let grant = client
        .acquire_as(args.session, &args.key, ttl, &policy)
        .await?;
    client.close();
    let Some(grant) = grant else {
        return Err(CtlError::NotAcquired {
            key: args.key,
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

/// `release`: a release, through `LockClient::release_as`.
pub async fn release(global: &Global, args: ReleaseArgs) -> Result<u8, CtlError> {
    let client = client(config(global)?)?;
    let released = client
        .release_as(args.session, &args.key, args.token)
        .await?;
    client.close();
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
    let client = client(config(global)?)?;
    let info = client.inspect(&args.key).await?;
    client.close();
    let fields: Fields = match info {
        Some(info) => vec![
            ("lock_key", info.lock_key.as_str().into()),
            ("held", true.into()),
            ("fencing_token", info.fencing_token.0.into()),
            ("owner_id", info.owner_id.as_str().into()),
            ("expires_at", display_time(&info.expires_at)),
        ],
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
    let admin = std::env::var(ADMIN_TOKEN_ENV)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .map(Credential::new)
        .ok_or_else(|| {
            CtlError::Config(format!(
                "{ADMIN_TOKEN_ENV} is not set: revoke (L8) needs the operators' admin credential in the environment"
            ))
        })?;
    let client = client(config(global)?)?;
    let outcome = client
        .revoke(&args.key, &admin, args.reason.as_ref())
        .await?;
    client.close();
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
