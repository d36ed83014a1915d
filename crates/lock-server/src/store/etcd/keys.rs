//! The key layout under the deployment's prefix (the table in `mod.rs`): every path this
//! backend reads or writes is built and parsed here, and nowhere else.

use etcd_client::KeyValue;
use lock_api::{FencingToken, LockKey, SessionId};
use lock_store::StoreError;

use super::codec::{GrantValue, Place, read_place_value};

/// The deployment's prefix `P` (ending in `/`) and the paths under it.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    prefix: String,
}

impl Keys {
    /// The layout under `prefix` (a `/` is added when it lacks one).
    pub(super) fn new(prefix: &str) -> Self {
        let prefix = if prefix.ends_with('/') {
            prefix.to_owned()
        } else {
            format!("{prefix}/")
        };
        Self { prefix }
    }

    /// `P` itself: every key of the deployment is under it.
    pub(super) fn all(&self) -> &str {
        &self.prefix
    }

    /// `P/{sub}/`: every key of one kind (`g`, `gl`, `s`, `w`, ...).
    pub(super) fn section(&self, sub: &str) -> String {
        format!("{}{sub}/", self.prefix)
    }

    pub(super) fn session_key(&self, session: SessionId) -> String {
        format!("{}s/{}", self.prefix, session.expose())
    }

    pub(super) fn session_marker(&self, session: SessionId) -> String {
        format!("{}sl/{}", self.prefix, session.expose())
    }

    /// `P/sc/{credential, hex}/`: the live sessions a credential opened (names are free
    /// text, so hex keeps one credential's prefix from holding another's).
    pub(super) fn credential_sessions(&self, credential: &str) -> String {
        let hex: String = credential.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{}sc/{hex}/", self.prefix)
    }

    pub(super) fn credential_session(&self, credential: &str, session: SessionId) -> String {
        format!(
            "{}{}",
            self.credential_sessions(credential),
            session.expose()
        )
    }

    pub(super) fn grant_key(&self, key: &LockKey) -> String {
        format!("{}g/{key}", self.prefix)
    }

    /// `P/v/{lock_key}`: what the key's grant announces (an election's leader), with its token.
    pub(super) fn value_key(&self, key: &LockKey) -> String {
        format!("{}v/{key}", self.prefix)
    }

    pub(super) fn grant_marker(&self, lease: i64) -> String {
        format!("{}gl/{lease:x}", self.prefix)
    }

    /// `P/h/{lock_key}/`: the key's shares, readers' or permits' (lock keys have no `/`, so
    /// no other key's).
    pub(super) fn hold_prefix(&self, key: &LockKey) -> String {
        format!("{}h/{key}/", self.prefix)
    }

    /// `P/h/{lock_key}/{token}`, the token zero-padded so that the prefix lists a key's
    /// shares lowest token first.
    pub(super) fn hold_key(&self, key: &LockKey, token: FencingToken) -> String {
        format!("{}{:020}", self.hold_prefix(key), token.0)
    }

    /// Where `grant` of `key` is recorded: the grant record for the whole key, a share's
    /// own record otherwise.
    pub(super) fn record_key(&self, key: &LockKey, grant: &GrantValue) -> String {
        if grant.scope.is_exclusive() {
            self.grant_key(key)
        } else {
            self.hold_key(key, grant.token)
        }
    }

    /// The key and token of a stored share's path.
    pub(super) fn parse_hold_path(&self, path: &[u8]) -> Option<(LockKey, FencingToken)> {
        let path = std::str::from_utf8(path).ok()?;
        let rest = path.strip_prefix(&format!("{}h/", self.prefix))?;
        let (key, token) = rest.rsplit_once('/')?;
        Some((LockKey::parse(key).ok()?, FencingToken(token.parse().ok()?)))
    }

    pub(super) fn fence_key(&self, key: &LockKey) -> String {
        format!("{}f/{key}", self.prefix)
    }

    /// `P/w/{lock_key}/`: the key's queue (lock keys have no `/`, so no other key's).
    pub(super) fn queue_prefix(&self, key: &LockKey) -> String {
        format!("{}w/{key}/", self.prefix)
    }

    pub(super) fn place_key(&self, key: &LockKey, session: SessionId) -> String {
        format!("{}w/{key}/{}", self.prefix, session.expose())
    }

    pub(super) fn revocation_key(&self, key: &LockKey) -> String {
        format!("{}r/{key}", self.prefix)
    }

    pub(super) fn delay_key(&self, key: &LockKey) -> String {
        format!("{}d/{key}", self.prefix)
    }

    pub(super) fn delay_marker(&self, lease: i64) -> String {
        format!("{}dl/{lease:x}", self.prefix)
    }

    /// The key and session of a stored place's path.
    pub(super) fn parse_place_path(&self, path: &[u8]) -> Option<(LockKey, SessionId)> {
        let path = std::str::from_utf8(path).ok()?;
        let rest = path.strip_prefix(&format!("{}w/", self.prefix))?;
        let (key, session) = rest.rsplit_once('/')?;
        Some((LockKey::parse(key).ok()?, SessionId::parse(session).ok()?))
    }

    /// The lock key of a stored grant record's or delay record's path (`sub` = `g`, `d`).
    pub(super) fn parse_key_path(&self, sub: &str, path: &[u8]) -> Result<LockKey, StoreError> {
        let path = String::from_utf8_lossy(path);
        path.strip_prefix(&format!("{}{sub}/", self.prefix))
            .map(LockKey::parse)
            .ok_or_else(|| StoreError::Internal(format!("key {path} outside the prefix")))?
            .map_err(|e| StoreError::Internal(format!("stored key: {e}")))
    }

    /// A key's queue places as read (`kvs` of its prefix), in arrival order.
    pub(super) fn read_places(&self, kvs: &[KeyValue]) -> Result<Vec<Place>, StoreError> {
        let mut places = kvs
            .iter()
            .map(|kv| {
                let (_, session) = self.parse_place_path(kv.key()).ok_or_else(|| {
                    StoreError::Internal(format!(
                        "unreadable queue place {}",
                        String::from_utf8_lossy(kv.key())
                    ))
                })?;
                let (ttl_s, claim) = read_place_value(kv.value())?;
                Ok(Place {
                    session,
                    create_revision: kv.create_revision(),
                    lease: kv.lease(),
                    ttl_s,
                    claim,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        places.sort_by_key(|p| p.create_revision);
        Ok(places)
    }
}
