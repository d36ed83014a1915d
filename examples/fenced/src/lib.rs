//! Fencing outside payments: two small programs that protect their own resources with
//! fence-kit, the way any service can.
//!
//! - `fenced-kv` (`src/bin/fenced-kv.rs`): a key-value service on PostgreSQL. `PUT /kv/{name}`
//!   writes for the holder of lock key `kv:{name}`; the fence is `fence_check` inside the
//!   writing transaction.
//! - `fenced-file` (`src/bin/fenced-file.rs`): writes its standard input to a file for the
//!   holder `lockctl run` started it as; the fence lives beside the file, under a file lock.
//!
//! Both verify the lock service's proof offline against `FENCE_PUBLIC_KEYS` (`key_id=base64`,
//! comma-separated: what `lock-server --generate-signing-key` prints).

/// The environment variable with the lock service's public keys.
pub const PUBLIC_KEYS_ENV: &str = "FENCE_PUBLIC_KEYS";

/// The lock service's public keys from [`PUBLIC_KEYS_ENV`].
pub fn verifier_from_env() -> anyhow::Result<fence_kit::FenceVerifier> {
    let spec = std::env::var(PUBLIC_KEYS_ENV).map_err(|_| {
        anyhow::anyhow!(
            "{PUBLIC_KEYS_ENV} is not set: the lock service's public keys, key_id=base64"
        )
    })?;
    fence_kit::FenceVerifier::parse(&spec).map_err(|e| anyhow::anyhow!("{PUBLIC_KEYS_ENV}: {e}"))
}
