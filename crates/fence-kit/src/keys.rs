//! The lock service's public keys a resource trusts, replaceable while it serves. A signing
//! key rotates in three steps, each a reload here, never a restart: the new key is added to
//! the trusted keys, the lock-servers sign with it (renewals bring every held grant a proof
//! under it), and once no grant's newest proof is under the old key, the old key is retired.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use lock_api::{FenceVerifier, ProofError};

/// The trusted keys: fixed at start (`FENCE_PUBLIC_KEYS`), or read from a file that
/// [`TrustedKeys::reload`] reads again (`FENCE_PUBLIC_KEYS_FILE`).
#[derive(Debug)]
pub struct TrustedKeys {
    file: Option<PathBuf>,
    current: RwLock<Arc<FenceVerifier>>,
}

impl TrustedKeys {
    /// Keys that never change while the process runs.
    pub fn fixed(verifier: FenceVerifier) -> Self {
        Self {
            file: None,
            current: RwLock::new(Arc::new(verifier)),
        }
    }

    /// Keys read from `path` (`key_id=base64[,…]`, surrounding whitespace and newlines
    /// ignored), read again by [`Self::reload`].
    pub fn from_file(path: &Path) -> Result<Self, ProofError> {
        Ok(Self {
            current: RwLock::new(Arc::new(read(path)?)),
            file: Some(path.to_owned()),
        })
    }

    /// The keys in force now; a write is verified against one snapshot.
    pub fn current(&self) -> Arc<FenceVerifier> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the file again and, when it parses, trusts exactly its keys from now on;
    /// returns their ids. A file that does not parse changes nothing (the error says why).
    pub fn reload(&self) -> Result<Vec<String>, ProofError> {
        let path = self.file.as_deref().ok_or_else(|| {
            ProofError::Config(
                "the keys were given inline (FENCE_PUBLIC_KEYS): set FENCE_PUBLIC_KEYS_FILE to reload them".into(),
            )
        })?;
        let verifier = read(path)?;
        let ids = verifier.key_ids().map(str::to_owned).collect();
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(verifier);
        Ok(ids)
    }
}

fn read(path: &Path) -> Result<FenceVerifier, ProofError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ProofError::Config(format!("{}: {e}", path.display())))?;
    let spec: String = text.split_whitespace().collect::<Vec<_>>().join(",");
    FenceVerifier::parse(&spec).map_err(|e| ProofError::Config(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_api::FenceSigner;

    fn entry(id: &str, byte: u8) -> String {
        FenceSigner::from_seed(id, [byte; 32]).verifier_entry()
    }

    #[test]
    fn a_reload_trusts_exactly_the_files_keys_and_a_bad_file_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("fence-kit-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("keys");
        std::fs::write(&file, format!("{}\n", entry("k1", 1))).unwrap();
        let keys = TrustedKeys::from_file(&file).unwrap();
        let ids = |keys: &TrustedKeys| {
            keys.current()
                .key_ids()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&keys), ["k1"]);
        std::fs::write(&file, format!("{}\n{}\n", entry("k1", 1), entry("k2", 2))).unwrap();
        assert_eq!(keys.reload().unwrap(), ["k1", "k2"]);
        std::fs::write(&file, "k3=not-a-key").unwrap();
        assert!(keys.reload().is_err());
        assert_eq!(ids(&keys), ["k1", "k2"], "a bad file changes nothing");
        std::fs::write(&file, entry("k2", 2)).unwrap();
        assert_eq!(keys.reload().unwrap(), ["k2"]);
        assert!(
            TrustedKeys::fixed(keys.current().as_ref().clone())
                .reload()
                .is_err()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
