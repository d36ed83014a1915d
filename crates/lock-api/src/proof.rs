//! Fencing proofs: a lock-server's Ed25519 signature over a grant, which any resource checks
//! offline (ADR 0004).
//!
//! A fencing token alone is a number anyone can make up; a resource that takes the highest
//! number it has seen can be jammed for good by one forged `i64::MAX`. So every grant
//! carries a proof: `v2.{key_id}.{grant}.{signature}`, the signature (base64url, no padding)
//! over [`signed_message`] — the proof version, the key id, the lock key, the token and the
//! grant. A resource holding the lock service's public keys ([`FenceVerifier`]) checks the
//! signature, that the key id is one it trusts, and that the signed lock key is the one
//! guarding what is written (`payout:{id}`), before any fence logic. The signing side
//! ([`FenceSigner`]) lives only in lock-server replicas, which share one secret key per key id.
//!
//! The proof names its grant, not only its token: a token issued twice (a store restored from
//! a backup, a backend migration) is two grants with two [`GrantId`]s, so a resource that
//! keeps the grant beside its fence lets only the one that claimed write. A grant id is a
//! digest of the session, key and token (the same grant re-answered to its session keeps its
//! id); it reveals nothing of the session id, which is a capability.
//!
//! This module is the only place that knows the proof's format.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::ids::{FencingToken, LockKey, SessionId};

/// The header a fenced write carries its proof in, next to `X-Fencing-Token`.
pub const FENCING_PROOF_HEADER: &str = "x-fencing-proof";
/// The proof format's version, first in both the proof and the signed message.
pub const PROOF_VERSION: &str = "v2";
/// Bytes of a grant id (128 bits: two grants of one key never collide by chance).
pub const GRANT_ID_BYTES: usize = 16;
/// Longest key id: short enough to log, long enough for a date and a counter.
pub const KEY_ID_MAX_BYTES: usize = 32;
/// Longest proof text accepted before any decoding (a v2 proof is under 160 bytes).
pub const PROOF_MAX_BYTES: usize = 256;
/// Bytes of an Ed25519 secret seed and of a public key.
const KEY_BYTES: usize = 32;

/// Why a proof or a key configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The proof is not `v2.{key_id}.{grant}.{base64url signature}`.
    #[error("malformed proof: {0}")]
    Malformed(&'static str),
    /// The key id is not one this resource trusts.
    #[error("proof signed by unknown key id {0:?}")]
    UnknownKey(String),
    /// The signature does not sign this lock key and token under that key.
    #[error("the proof does not sign lock key {lock_key} with token {token}")]
    BadSignature {
        /// The lock key the write is for.
        lock_key: String,
        /// The token presented.
        token: u64,
    },
    /// A signing or verifying key setting is unusable.
    #[error("{0}")]
    Config(String),
}

/// One grant's identity: which session was granted which key with which token. Two grants
/// that share a token (a token issued twice) have different ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GrantId([u8; GRANT_ID_BYTES]);

impl GrantId {
    /// The id of `session`'s grant of `lock_key` with `token`: the first bytes of a SHA-256
    /// digest, so the proof that carries it reveals nothing of the session id.
    pub fn derive(session: SessionId, lock_key: &LockKey, token: FencingToken) -> Self {
        let digest = Sha256::new()
            .chain_update(b"lock-grant/v2\n")
            .chain_update(session.0.as_bytes())
            .chain_update(b"\n")
            .chain_update(lock_key.as_str().as_bytes())
            .chain_update(b"\n")
            .chain_update(token.0.to_be_bytes())
            .finalize();
        let mut id = [0; GRANT_ID_BYTES];
        id.copy_from_slice(&digest[..GRANT_ID_BYTES]);
        Self(id)
    }

    /// Its text form (base64url, no padding: 22 characters), as proofs and resources carry it.
    pub fn as_text(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    /// Parses [`as_text`](Self::as_text)'s form.
    pub fn parse(text: &str) -> Option<Self> {
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        Some(Self(bytes.try_into().ok()?))
    }
}

impl std::fmt::Display for GrantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_text())
    }
}

/// The bytes a proof signs: version, key id, lock key, token and grant, one per line. The key
/// id is inside the signature so a proof cannot be relabelled to another key's id; the grant,
/// so it cannot be relabelled to another grant of the same token.
pub fn signed_message(
    key_id: &str,
    lock_key: &LockKey,
    token: FencingToken,
    grant: &GrantId,
) -> Vec<u8> {
    format!(
        "lock-fence/{PROOF_VERSION}\n{key_id}\n{}\n{}\n{grant}",
        lock_key.as_str(),
        token.0
    )
    .into_bytes()
}

fn valid_key_id(key_id: &str) -> bool {
    !key_id.is_empty()
        && key_id.len() <= KEY_ID_MAX_BYTES
        && key_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn decode_key(what: &str, text: &str) -> Result<[u8; KEY_BYTES], ProofError> {
    let text = text.trim();
    let bytes = STANDARD
        .decode(text)
        .or_else(|_| URL_SAFE_NO_PAD.decode(text))
        .map_err(|_| ProofError::Config(format!("{what}: not base64")))?;
    bytes
        .try_into()
        .map_err(|_| ProofError::Config(format!("{what}: must decode to {KEY_BYTES} bytes")))
}

/// A lock-server's signing key and its id.
pub struct FenceSigner {
    key_id: String,
    key: SigningKey,
}

impl std::fmt::Debug for FenceSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceSigner")
            .field("key_id", &self.key_id)
            .field("key", &"<secret>")
            .finish()
    }
}

impl FenceSigner {
    /// A signer from `key_id` and a base64 32-byte secret seed.
    pub fn from_secret(key_id: &str, secret_base64: &str) -> Result<Self, ProofError> {
        if !valid_key_id(key_id) {
            return Err(ProofError::Config(format!(
                "signing key id {key_id:?}: 1 to {KEY_ID_MAX_BYTES} of [A-Za-z0-9_-]"
            )));
        }
        let seed = decode_key("signing key", secret_base64)?;
        Ok(Self::from_seed(key_id, seed))
    }

    /// A signer from `key_id` and a 32-byte seed (the caller checked the id).
    pub fn from_seed(key_id: &str, seed: [u8; KEY_BYTES]) -> Self {
        Self {
            key_id: key_id.to_owned(),
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// The key id.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public key, base64: what resources are configured with.
    pub fn public_key_base64(&self) -> String {
        STANDARD.encode(self.key.verifying_key().as_bytes())
    }

    /// `{key_id}={public key}`: one entry of a verifier's key list.
    pub fn verifier_entry(&self) -> String {
        format!("{}={}", self.key_id, self.public_key_base64())
    }

    /// The proof of `grant`, a grant of `lock_key` with `token`.
    pub fn sign(&self, lock_key: &LockKey, token: FencingToken, grant: &GrantId) -> String {
        let signature = self
            .key
            .sign(&signed_message(&self.key_id, lock_key, token, grant));
        format!(
            "{PROOF_VERSION}.{}.{grant}.{}",
            self.key_id,
            URL_SAFE_NO_PAD.encode(signature.to_bytes())
        )
    }
}

/// The public keys a resource trusts, by key id. Several ids allow rotation: add the new
/// key everywhere, switch the lock-servers to it, drop the old one once no grant it signed
/// is live.
#[derive(Debug, Clone)]
pub struct FenceVerifier {
    keys: BTreeMap<String, VerifyingKey>,
}

impl FenceVerifier {
    /// Parses `key_id=base64 public key[,key_id=base64 public key…]`.
    pub fn parse(spec: &str) -> Result<Self, ProofError> {
        let mut keys = BTreeMap::new();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (key_id, public) = entry.split_once('=').ok_or_else(|| {
                ProofError::Config(format!(
                    "public key entry {entry:?}: expected key_id=base64"
                ))
            })?;
            let key_id = key_id.trim();
            if !valid_key_id(key_id) {
                return Err(ProofError::Config(format!(
                    "public key id {key_id:?}: 1 to {KEY_ID_MAX_BYTES} of [A-Za-z0-9_-]"
                )));
            }
            let bytes = decode_key(&format!("public key {key_id}"), public)?;
            let key = VerifyingKey::from_bytes(&bytes).map_err(|_| {
                ProofError::Config(format!("public key {key_id}: not a valid Ed25519 key"))
            })?;
            if keys.insert(key_id.to_owned(), key).is_some() {
                return Err(ProofError::Config(format!(
                    "public key id {key_id} is listed twice"
                )));
            }
        }
        if keys.is_empty() {
            return Err(ProofError::Config("no public key is listed".into()));
        }
        Ok(Self { keys })
    }

    /// The trusted key ids.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Whether `proof` is a trusted key's signature of a grant of `lock_key` with `token`:
    /// that grant's id when it is.
    pub fn verify(
        &self,
        lock_key: &LockKey,
        token: FencingToken,
        proof: &str,
    ) -> Result<GrantId, ProofError> {
        if proof.len() > PROOF_MAX_BYTES {
            return Err(ProofError::Malformed("longer than any proof"));
        }
        let mut parts = proof.split('.');
        let (Some(version), Some(key_id), Some(grant), Some(signature), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(ProofError::Malformed(
                "expected v2.{key_id}.{grant}.{signature}",
            ));
        };
        if version != PROOF_VERSION {
            return Err(ProofError::Malformed("unknown proof version"));
        }
        let grant =
            GrantId::parse(grant).ok_or(ProofError::Malformed("the grant id is not 16 bytes"))?;
        let key = self.keys.get(key_id).ok_or_else(|| {
            ProofError::UnknownKey(key_id.chars().take(KEY_ID_MAX_BYTES).collect())
        })?;
        let bytes = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| ProofError::Malformed("the signature is not base64url"))?;
        let signature = Signature::from_slice(&bytes)
            .map_err(|_| ProofError::Malformed("the signature is not 64 bytes"))?;
        key.verify(&signed_message(key_id, lock_key, token, &grant), &signature)
            .map_err(|_| ProofError::BadSignature {
                lock_key: lock_key.as_str().to_owned(),
                token: token.0,
            })?;
        Ok(grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer(key_id: &str, byte: u8) -> FenceSigner {
        FenceSigner::from_seed(key_id, [byte; KEY_BYTES])
    }

    fn key(text: &str) -> LockKey {
        LockKey::parse(text).expect("valid key")
    }

    #[test]
    fn a_proof_verifies_only_for_its_key_token_and_signer() {
        let k1 = signer("k1", 1);
        let verifier = FenceVerifier::parse(&k1.verifier_entry()).expect("parses");
        let (payout, token) = (key("payout:7"), FencingToken(42));
        let grant = GrantId::derive(SessionId(uuid::Uuid::from_u128(1)), &payout, token);
        let proof = k1.sign(&payout, token, &grant);
        assert!(proof.starts_with(&format!("v2.k1.{grant}.")), "{proof}");
        assert_eq!(verifier.verify(&payout, token, &proof), Ok(grant));
        // Another token, another key, a forged signature: refused.
        assert!(matches!(
            verifier.verify(&payout, FencingToken(43), &proof),
            Err(ProofError::BadSignature { .. })
        ));
        assert!(matches!(
            verifier.verify(&key("payout:8"), token, &proof),
            Err(ProofError::BadSignature { .. })
        ));
        let attacker = signer("k1", 9).sign(&payout, token, &grant);
        assert!(matches!(
            verifier.verify(&payout, token, &attacker),
            Err(ProofError::BadSignature { .. })
        ));
        // A key id nobody configured, and a genuine signature relabelled to another id.
        let other = signer("k2", 2).sign(&payout, token, &grant);
        assert_eq!(
            verifier.verify(&payout, token, &other),
            Err(ProofError::UnknownKey("k2".into()))
        );
        let both = FenceVerifier::parse(&format!(
            "{},{}",
            k1.verifier_entry(),
            signer("k2", 2).verifier_entry()
        ))
        .expect("parses");
        let relabelled = proof.replacen("v2.k1.", "v2.k2.", 1);
        assert!(matches!(
            both.verify(&payout, token, &relabelled),
            Err(ProofError::BadSignature { .. })
        ));
        assert_eq!(
            both.verify(&payout, token, &other),
            Ok(grant),
            "rotation: both trusted"
        );
    }

    #[test]
    fn a_proof_names_its_grant_and_cannot_be_relabelled_to_another_grant_of_its_token() {
        let k1 = signer("k1", 1);
        let verifier = FenceVerifier::parse(&k1.verifier_entry()).expect("parses");
        let (payout, token) = (key("payout:7"), FencingToken(5));
        // The same token issued twice (a restored store): two sessions, two grants.
        let first = GrantId::derive(SessionId(uuid::Uuid::from_u128(1)), &payout, token);
        let second = GrantId::derive(SessionId(uuid::Uuid::from_u128(2)), &payout, token);
        assert_ne!(first, second);
        assert_eq!(
            first,
            GrantId::derive(SessionId(uuid::Uuid::from_u128(1)), &payout, token),
            "a grant re-answered to its session keeps its id"
        );
        let proof = k1.sign(&payout, token, &first);
        assert_eq!(verifier.verify(&payout, token, &proof), Ok(first));
        let relabelled = proof.replacen(&first.as_text(), &second.as_text(), 1);
        assert!(matches!(
            verifier.verify(&payout, token, &relabelled),
            Err(ProofError::BadSignature { .. })
        ));
        assert_eq!(GrantId::parse(&first.as_text()), Some(first));
        assert_eq!(GrantId::parse("short"), None);
    }

    #[test]
    fn malformed_proofs_and_key_settings_are_refused() {
        let k1 = signer("k1", 1);
        let verifier = FenceVerifier::parse(&k1.verifier_entry()).expect("parses");
        let payout = key("payout:1");
        let grant = GrantId::derive(
            SessionId(uuid::Uuid::from_u128(1)),
            &payout,
            FencingToken(1),
        );
        let v1 = k1.sign(&payout, FencingToken(1), &grant).replacen(
            &format!("v2.k1.{grant}."),
            "v1.k1.",
            1,
        );
        for bad in [
            "",
            "v2",
            "v2.k1",
            "v2.k1.AAAA",
            &v1,
            &format!("v3.k1.{grant}.AAAA"),
            &format!("v2.k1.{grant}.not base64!"),
            &format!("v2.k1.{grant}.AAAA"),
            "v2.k1.short.AAAA",
            &format!("v2.k1.{grant}.a.b"),
        ] {
            assert!(
                matches!(
                    verifier.verify(&payout, FencingToken(1), bad),
                    Err(ProofError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            verifier.verify(&payout, FencingToken(1), &"v1.k1.".repeat(100)),
            Err(ProofError::Malformed(_))
        ));
        for bad in [
            "",
            "k1",
            "k1=",
            "k1=AAAA",
            "bad id=AAAA",
            &format!("{0},{0}", k1.verifier_entry()),
        ] {
            assert!(FenceVerifier::parse(bad).is_err(), "{bad:?}");
        }
        assert!(FenceSigner::from_secret("k1", "short").is_err());
        assert!(FenceSigner::from_secret("", &STANDARD.encode([1_u8; 32])).is_err());
        let from_text =
            FenceSigner::from_secret("k1", &STANDARD.encode([1_u8; 32])).expect("valid");
        assert_eq!(
            from_text.sign(&payout, FencingToken(5), &grant),
            k1.sign(&payout, FencingToken(5), &grant)
        );
        assert!(
            !format!("{from_text:?}").contains("AQEB"),
            "the secret is not printed"
        );
    }
}
