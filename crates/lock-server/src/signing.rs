//! Grant signing: the key material of this replica and `--generate-signing-key`. The proof
//! format itself is `lock_api::proof`'s.

use lock_api::FenceSigner;

/// A new random signing key for `key_id`, as the env lines to configure it: the secret for
/// every lock-server replica, the public entry for every resource.
pub fn generate_signing_key(key_id: &str) -> Result<String, String> {
    use base64::Engine;
    let mut seed = [0_u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| format!("no randomness from the OS: {e}"))?;
    let secret = base64::engine::general_purpose::STANDARD.encode(seed);
    let signer = FenceSigner::from_secret(key_id, &secret).map_err(|e| e.to_string())?;
    Ok(format!(
        "# lock-server replicas (secret: keep it out of the repository)\nLOCK_SIGNING_KEY_ID={key_id}\nLOCK_SIGNING_KEY={secret}\n# payment-resource and rail-proxy (public)\nFENCE_PUBLIC_KEYS={}",
        signer.verifier_entry()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_signs_what_its_public_entry_verifies() {
        let lines = generate_signing_key("k7").expect("generated");
        let value = |name: &str| {
            lines
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .expect(name)
                .to_owned()
        };
        let signer =
            FenceSigner::from_secret(&value("LOCK_SIGNING_KEY_ID"), &value("LOCK_SIGNING_KEY"))
                .expect("a usable secret");
        let verifier = lock_api::FenceVerifier::parse(&value("FENCE_PUBLIC_KEYS")).expect("parses");
        let key = lock_api::LockKey::parse("payout:1").expect("key");
        let grant = lock_api::GrantId::derive(
            lock_api::SessionId(uuid::Uuid::from_u128(1)),
            &key,
            lock_api::FencingToken(3),
        );
        let proof = signer.sign(&key, lock_api::FencingToken(3), &grant);
        assert_eq!(
            verifier.verify(&key, lock_api::FencingToken(3), &proof),
            Ok(grant)
        );
        assert_ne!(
            generate_signing_key("k7").expect("again"),
            lines,
            "random each time"
        );
    }
}
