//! `lockctl credential NAME --roles … --secret-file PATH`: a new caller for a credentials
//! file. The secret (32 random bytes, base64url) goes only to `--secret-file`, created with
//! mode 0600 and never overwritten; stdout gets the file's line, which holds the secret's
//! digest, never the secret: `lockctl credential … >> credentials`. With `--certificate
//! NAME` instead, the caller is the holder of a client certificate for NAME (mutual TLS) and
//! there is no secret.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use base64::Engine;
use lock_api::{
    CREDENTIAL_SECRET_BYTES, CallerProof, CredentialEntry, LOCK_CREDENTIAL_ROLES, LimitOverrides,
    OwnerRule, PAYMENT_CREDENTIAL_ROLES, parse_credentials, secret_sha256,
};
use serde_json::Value;

use crate::cli::{CredentialArgs, Global};
use crate::error::{CtlError, code};
use crate::output;

/// Writes the secret (unless the caller is a certificate), then prints the line.
pub fn credential(global: &Global, args: CredentialArgs) -> Result<u8, CtlError> {
    let mut entry = CredentialEntry::from_secret(&args.name, &[], "");
    entry.roles = args.roles.clone();
    entry.owners = match args.owners.as_deref() {
        None | Some("-") => OwnerRule::Nobody,
        Some("*") => OwnerRule::Any,
        Some(list) => OwnerRule::Listed(list.split(',').map(str::to_owned).collect()),
    };
    entry.limits = LimitOverrides {
        requests_per_second: args.rps,
        burst: args.burst,
        sessions: args.sessions,
        waiters: args.waiters,
    };
    let secret = match &args.certificate {
        Some(name) => {
            entry.proof = CallerProof::Certificate(name.clone());
            None
        }
        None => {
            let mut bytes = [0u8; CREDENTIAL_SECRET_BYTES];
            getrandom::getrandom(&mut bytes)
                .map_err(|e| CtlError::Config(format!("no randomness from the OS: {e}")))?;
            let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
            entry.proof = CallerProof::Secret(secret_sha256(&secret));
            Some(secret)
        }
    };
    let line = entry.line();
    // The services' own parser checks the line: what lockctl writes, they read.
    let known: Vec<&str> = LOCK_CREDENTIAL_ROLES
        .iter()
        .chain(PAYMENT_CREDENTIAL_ROLES)
        .copied()
        .collect();
    parse_credentials(&line, &known).map_err(|e| CtlError::Usage(e.message))?;
    if let (Some(secret), Some(path)) = (&secret, &args.secret_file) {
        write_secret(path, secret)?;
    }
    if global.json {
        let secret_file = args
            .secret_file
            .as_ref()
            .map(|p| Value::from(p.display().to_string()))
            .unwrap_or(Value::Null);
        output::print(
            &[
                ("name", Value::from(entry.name.as_str())),
                ("line", Value::from(line)),
                ("secret_file", secret_file),
            ],
            true,
        );
    } else {
        println!("{line}");
    }
    Ok(code::OK)
}

/// Writes `secret` to a new file at `path`, mode 0600, synced.
fn write_secret(path: &std::path::Path, secret: &str) -> Result<(), CtlError> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            CtlError::Usage(format!(
                "--secret-file {}: {e} (it must not exist yet)",
                path.display()
            ))
        })?;
    file.write_all(secret.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| CtlError::Config(format!("{}: {e}", path.display())))
}
