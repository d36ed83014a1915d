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
//! A grant that holds less than its whole key (a semaphore's permit, a reader's share: ADR
//! 0007) carries a `v3.{key_id}.{scope}.{grant}.{signature}` proof, which also signs its
//! [`GrantScope`]: a resource then fences a permit per slot and refuses a reader's write.
//! [`FenceVerifier::verify`] takes only exclusive grants (v2, or v3 `exclusive`), so a
//! resource written for a mutex refuses a permit or a share; [`FenceVerifier::verify_scoped`]
//! answers the scope.
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
/// The version of a proof that also signs its grant's [`GrantScope`].
pub const SCOPED_PROOF_VERSION: &str = "v3";
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
    /// A genuine proof of a grant that holds less than the key (a permit, a share), where
    /// the resource takes only exclusive grants.
    #[error("the proof is of a {0} grant; this write needs the key held exclusively")]
    NotExclusive(String),
    /// A signing or verifying key setting is unusable.
    #[error("{0}")]
    Config(String),
}

/// What a grant holds of its key (ADR 0007).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum GrantScope {
    /// The key alone: a mutex, or the writer of a read/write lock.
    #[default]
    Exclusive,
    /// A share of the key, beside other readers.
    Shared,
    /// One permit of a semaphore key.
    Permit {
        /// Its slot, below the key's permit count.
        slot: u32,
    },
}

impl GrantScope {
    /// Whether the grant holds the whole key (a mutex, a writer): what a v2 proof signs.
    pub fn is_exclusive(&self) -> bool {
        *self == Self::Exclusive
    }

    /// Its text form, as a v3 proof carries and signs it: `exclusive`, `shared`, `permit-{slot}`.
    pub fn as_text(self) -> String {
        match self {
            Self::Exclusive => "exclusive".to_owned(),
            Self::Shared => "shared".to_owned(),
            Self::Permit { slot } => format!("permit-{slot}"),
        }
    }

    /// Parses [`as_text`](Self::as_text)'s form.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "exclusive" => Some(Self::Exclusive),
            "shared" => Some(Self::Shared),
            _ => {
                let slot = text.strip_prefix("permit-")?;
                let canonical = !slot.starts_with('0') || slot == "0";
                let slot = slot.parse().ok().filter(|_| canonical)?;
                Some(Self::Permit { slot })
            }
        }
    }

    /// The resource a fence keeps for a grant of `lock_key` in this scope: the key itself,
    /// or for a permit its own slot (`{key}#permit-{slot}`), fenced as a mutex is.
    pub fn fenced_resource(self, lock_key: &LockKey) -> String {
        match self {
            Self::Permit { slot } => format!("{}#permit-{slot}", lock_key.as_str()),
            Self::Exclusive | Self::Shared => lock_key.as_str().to_owned(),
        }
    }
}

impl serde::Serialize for GrantScope {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.as_text())
    }
}

impl<'de> serde::Deserialize<'de> for GrantScope {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&text).ok_or_else(|| {
            serde::de::Error::custom("a grant scope is exclusive, shared or permit-{slot}")
        })
    }
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

/// The bytes a v3 proof signs: [`signed_message`]'s lines under its own version, and the
/// scope.
pub fn signed_scoped_message(
    key_id: &str,
    lock_key: &LockKey,
    token: FencingToken,
    grant: &GrantId,
    scope: GrantScope,
) -> Vec<u8> {
    format!(
        "lock-fence/{SCOPED_PROOF_VERSION}\n{key_id}\n{}\n{}\n{grant}\n{}",
        lock_key.as_str(),
        token.0,
        scope.as_text()
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

impl FenceSigner {
    /// The v3 proof of `grant`, a grant of `lock_key` with `token` holding `scope` of it.
    pub fn sign_scoped(
        &self,
        lock_key: &LockKey,
        token: FencingToken,
        grant: &GrantId,
        scope: GrantScope,
    ) -> String {
        let message = signed_scoped_message(&self.key_id, lock_key, token, grant, scope);
        let signature = self.key.sign(&message);
        format!(
            "{SCOPED_PROOF_VERSION}.{}.{}.{grant}.{}",
            self.key_id,
            scope.as_text(),
            URL_SAFE_NO_PAD.encode(signature.to_bytes())
        )
    }
}

/// A proof's parts, before its signature is checked.
struct ProofParts<'a> {
    key_id: &'a str,
    scope: Option<GrantScope>,
    grant: GrantId,
    signature: &'a str,
}

impl<'a> ProofParts<'a> {
    /// `v2.{key_id}.{grant}.{signature}` (no scope) or `v3.{key_id}.{scope}.{grant}.{signature}`.
    fn parse(proof: &'a str) -> Result<Self, ProofError> {
        if proof.len() > PROOF_MAX_BYTES {
            return Err(ProofError::Malformed("longer than any proof"));
        }
        let parts: Vec<&str> = proof.split('.').collect();
        let (key_id, scope, grant, signature) = match parts[..] {
            [PROOF_VERSION, key_id, grant, signature] => (key_id, None, grant, signature),
            [SCOPED_PROOF_VERSION, key_id, scope, grant, signature] => {
                let scope =
                    GrantScope::parse(scope).ok_or(ProofError::Malformed("unknown grant scope"))?;
                (key_id, Some(scope), grant, signature)
            }
            [PROOF_VERSION | SCOPED_PROOF_VERSION, ..] => {
                return Err(ProofError::Malformed(
                    "expected v2.{key_id}.{grant}.{signature} or v3.{key_id}.{scope}.{grant}.{signature}",
                ));
            }
            _ => return Err(ProofError::Malformed("unknown proof version")),
        };
        let grant =
            GrantId::parse(grant).ok_or(ProofError::Malformed("the grant id is not 16 bytes"))?;
        Ok(Self {
            key_id,
            scope,
            grant,
            signature,
        })
    }

    fn message(&self, lock_key: &LockKey, token: FencingToken) -> Vec<u8> {
        match self.scope {
            None => signed_message(self.key_id, lock_key, token, &self.grant),
            Some(scope) => signed_scoped_message(self.key_id, lock_key, token, &self.grant, scope),
        }
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

    /// Whether `proof` is a trusted key's signature of an exclusive grant of `lock_key` with
    /// `token`: that grant's id when it is. A genuine proof of a permit or a share is
    /// refused ([`ProofError::NotExclusive`]).
    pub fn verify(
        &self,
        lock_key: &LockKey,
        token: FencingToken,
        proof: &str,
    ) -> Result<GrantId, ProofError> {
        match self.verify_scoped(lock_key, token, proof)? {
            (grant, GrantScope::Exclusive) => Ok(grant),
            (_, scope) => Err(ProofError::NotExclusive(scope.as_text())),
        }
    }

    /// Whether `proof` is a trusted key's signature of a grant of `lock_key` with `token`:
    /// that grant's id and what it holds of the key (a v2 proof's grant is exclusive).
    pub fn verify_scoped(
        &self,
        lock_key: &LockKey,
        token: FencingToken,
        proof: &str,
    ) -> Result<(GrantId, GrantScope), ProofError> {
        let parts = ProofParts::parse(proof)?;
        let key = self.keys.get(parts.key_id).ok_or_else(|| {
            ProofError::UnknownKey(parts.key_id.chars().take(KEY_ID_MAX_BYTES).collect())
        })?;
        let bytes = URL_SAFE_NO_PAD
            .decode(parts.signature)
            .map_err(|_| ProofError::Malformed("the signature is not base64url"))?;
        let signature = Signature::from_slice(&bytes)
            .map_err(|_| ProofError::Malformed("the signature is not 64 bytes"))?;
        key.verify(&parts.message(lock_key, token), &signature)
            .map_err(|_| ProofError::BadSignature {
                lock_key: lock_key.as_str().to_owned(),
                token: token.0,
            })?;
        Ok((parts.grant, parts.scope.unwrap_or(GrantScope::Exclusive)))
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

    /// A permit's or a share's proof signs its scope: it verifies with it, a mutex's check
    /// refuses it, and a scope relabelled in the text no longer verifies.
    #[test]
    fn a_scoped_proof_signs_what_its_grant_holds() {
        let k1 = signer("k1", 1);
        let verifier = FenceVerifier::parse(&k1.verifier_entry()).expect("parses");
        let (sem, token) = (key("sem:pool"), FencingToken(12));
        let grant = GrantId::derive(SessionId(uuid::Uuid::from_u128(3)), &sem, token);
        for scope in [
            GrantScope::Shared,
            GrantScope::Permit { slot: 0 },
            GrantScope::Permit { slot: 17 },
        ] {
            let proof = k1.sign_scoped(&sem, token, &grant, scope);
            assert!(
                proof.starts_with(&format!("v3.k1.{}.", scope.as_text())),
                "{proof}"
            );
            assert_eq!(
                verifier.verify_scoped(&sem, token, &proof),
                Ok((grant, scope))
            );
            assert_eq!(
                verifier.verify(&sem, token, &proof),
                Err(ProofError::NotExclusive(scope.as_text()))
            );
        }
        let permit = k1.sign_scoped(&sem, token, &grant, GrantScope::Permit { slot: 1 });
        let relabelled = permit.replacen("permit-1", "permit-2", 1);
        assert!(matches!(
            verifier.verify_scoped(&sem, token, &relabelled),
            Err(ProofError::BadSignature { .. })
        ));
        let shared_as_exclusive = k1
            .sign_scoped(&sem, token, &grant, GrantScope::Shared)
            .replacen(".shared.", ".exclusive.", 1);
        assert!(matches!(
            verifier.verify(&sem, token, &shared_as_exclusive),
            Err(ProofError::BadSignature { .. })
        ));
        // A v3 proof of an exclusive grant (a writer) is what a mutex's check takes; a v2
        // proof is exclusive.
        let writer = k1.sign_scoped(&sem, token, &grant, GrantScope::Exclusive);
        assert_eq!(verifier.verify(&sem, token, &writer), Ok(grant));
        let mutex = k1.sign(&sem, token, &grant);
        assert_eq!(
            verifier.verify_scoped(&sem, token, &mutex),
            Ok((grant, GrantScope::Exclusive))
        );
    }

    #[test]
    fn scopes_have_one_spelling_and_permits_fence_their_own_slot() {
        for scope in [
            GrantScope::Exclusive,
            GrantScope::Shared,
            GrantScope::Permit { slot: 0 },
            GrantScope::Permit { slot: 255 },
        ] {
            assert_eq!(GrantScope::parse(&scope.as_text()), Some(scope));
        }
        for bad in [
            "",
            "permit-",
            "permit-01",
            "permit--1",
            "permit-x",
            "Shared",
            "reader",
        ] {
            assert_eq!(GrantScope::parse(bad), None, "{bad:?}");
        }
        let sem = key("sem:pool");
        assert_eq!(
            GrantScope::Permit { slot: 3 }.fenced_resource(&sem),
            "sem:pool#permit-3"
        );
        assert_eq!(GrantScope::Shared.fenced_resource(&sem), "sem:pool");
        let k1 = signer("k1", 1);
        let verifier = FenceVerifier::parse(&k1.verifier_entry()).expect("parses");
        let grant = GrantId::derive(SessionId(uuid::Uuid::from_u128(3)), &sem, FencingToken(1));
        let proof = k1.sign_scoped(&sem, FencingToken(1), &grant, GrantScope::Shared);
        let unknown = proof.replacen(".shared.", ".reader.", 1);
        assert_eq!(
            verifier.verify_scoped(&sem, FencingToken(1), &unknown),
            Err(ProofError::Malformed("unknown grant scope"))
        );
    }
}
