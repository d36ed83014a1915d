//! The lock service's public keys a fenced service trusts: `FENCE_PUBLIC_KEYS` (inline, fixed
//! while the process runs) or `FENCE_PUBLIC_KEYS_FILE` (read again on SIGHUP, so a signing
//! key rotates without a restart: SECURITY.md's runbook).

use std::path::Path;
use std::sync::Arc;

use fence_kit::{FenceVerifier, TrustedKeys};

/// The trusted keys from the service's settings; with a file, a task reloads it on every
/// SIGHUP (logged `fence_keys_reloaded`, or `fence_keys_reload_failed` keeping the keys in
/// force). Call from within the runtime.
pub fn trusted_keys(inline: Option<&str>, file: Option<&Path>) -> Result<Arc<TrustedKeys>, String> {
    let inline = inline.map(str::trim).filter(|k| !k.is_empty());
    let keys = match (inline, file) {
        (Some(_), Some(_)) => {
            return Err("set FENCE_PUBLIC_KEYS or FENCE_PUBLIC_KEYS_FILE, not both".into());
        }
        (Some(spec), None) => TrustedKeys::fixed(
            FenceVerifier::parse(spec).map_err(|e| format!("FENCE_PUBLIC_KEYS: {e}"))?,
        ),
        (None, Some(path)) => {
            TrustedKeys::from_file(path).map_err(|e| format!("FENCE_PUBLIC_KEYS_FILE: {e}"))?
        }
        (None, None) => {
            return Err("FENCE_PUBLIC_KEYS or FENCE_PUBLIC_KEYS_FILE is required: the lock-server's public keys as key_id=base64 (lock-server --generate-signing-key prints them)".into());
        }
    };
    let keys = Arc::new(keys);
    if file.is_some() {
        let reloaded = keys.clone();
        crate::hangup::on_sighup("FENCE_PUBLIC_KEYS_FILE", move || match reloaded.reload() {
            Ok(key_ids) => {
                tracing::info!(event = "fence_keys_reloaded", key_ids = ?key_ids, "trusting exactly these signing keys");
            }
            Err(err) => {
                tracing::error!(event = "fence_keys_reload_failed", error = %err, "kept the keys in force");
            }
        })?;
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_source_of_keys_is_required_and_two_are_refused() {
        let entry =
            fence_kit::FenceVerifier::parse("k1=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
        assert!(entry.is_ok());
        let spec = "k1=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        let both = trusted_keys(Some(spec), Some(Path::new("/nonexistent")));
        assert_eq!(
            both.err().as_deref(),
            Some("set FENCE_PUBLIC_KEYS or FENCE_PUBLIC_KEYS_FILE, not both")
        );
        let none = trusted_keys(Some("  "), None).err().unwrap_or_default();
        assert!(
            none.starts_with("FENCE_PUBLIC_KEYS or FENCE_PUBLIC_KEYS_FILE is required"),
            "{none}"
        );
        let missing = trusted_keys(None, Some(Path::new("/nonexistent/keys")))
            .err()
            .unwrap_or_default();
        assert!(
            missing.starts_with("FENCE_PUBLIC_KEYS_FILE: /nonexistent/keys"),
            "{missing}"
        );
        let fixed = trusted_keys(Some(spec), None).unwrap();
        assert_eq!(fixed.current().key_ids().collect::<Vec<_>>(), ["k1"]);
    }
}
