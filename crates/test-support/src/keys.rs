//! The credentials and signing key every test stack is configured with. Test-only values,
//! public by design: production secrets come from the environment (`.env`), never from here.

use lock_api::FenceSigner;

/// The test signing key's id.
pub const SIGNING_KEY_ID: &str = "test-k1";
/// The test signing key: the base64 of 32 bytes of 7, not a secret.
const SIGNING_KEY_BASE64: &str = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";

/// The test signing key, as `LOCK_SIGNING_KEY` takes it (id: [`SIGNING_KEY_ID`]).
pub fn signing_key_base64() -> &'static str {
    SIGNING_KEY_BASE64
}

/// A signer with the test key: what a lock-server configured by the tests signs with.
pub fn test_signer() -> FenceSigner {
    FenceSigner::from_secret(SIGNING_KEY_ID, SIGNING_KEY_BASE64).expect("the test key is valid")
}

/// The grant a test signs for: the grant of `lock_key` with `token` to session `n` (tests
/// that need two grants of one token, as a restored store would make, pass two `n`s).
pub fn test_grant(
    n: u128,
    lock_key: &lock_api::LockKey,
    token: lock_api::FencingToken,
) -> lock_api::GrantId {
    lock_api::GrantId::derive(
        lock_api::SessionId(uuid::Uuid::from_u128(n)),
        lock_key,
        token,
    )
}

/// The test key's proof of session 1's grant of `lock_key` with `token`.
pub fn test_proof(lock_key: &lock_api::LockKey, token: lock_api::FencingToken) -> String {
    test_signer().sign(lock_key, token, &test_grant(1, lock_key, token))
}

/// `FENCE_PUBLIC_KEYS` for resources that trust the test key.
pub fn public_keys() -> String {
    test_signer().verifier_entry()
}

/// A signer nobody trusts (an attacker's own key, under the trusted key id).
pub fn rogue_signer() -> FenceSigner {
    FenceSigner::from_seed(SIGNING_KEY_ID, [9; 32])
}

/// The lock clients' credential (`LOCK_CLIENT_TOKEN`) of lock-servers started by tests.
pub const LOCK_CLIENT_TOKEN: &str = "test-lock-client-token";

/// The environment a test lock-server needs besides its store: the client credential, the
/// test signing key, and the durability override (test stores are throwaway: PostgreSQL
/// with fsync off).
pub fn lock_server_env() -> Vec<(&'static str, String)> {
    vec![
        ("LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE", "true".to_owned()),
        // Tests talk to their servers over loopback; the TLS tests give certificates instead.
        ("UNSAFE_PLAINTEXT_HTTP", "true".to_owned()),
        ("LOCK_CLIENT_TOKEN", LOCK_CLIENT_TOKEN.to_owned()),
        ("LOCK_SIGNING_KEY", SIGNING_KEY_BASE64.to_owned()),
        ("LOCK_SIGNING_KEY_ID", SIGNING_KEY_ID.to_owned()),
    ]
}
