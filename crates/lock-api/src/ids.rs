//! Validated identifiers: lock keys, owner ids, session ids and fencing tokens.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::limits::{LEADER_VALUE_MAX_BYTES, LOCK_KEY_MAX_BYTES, OWNER_ID_MAX_BYTES};
use crate::validation::{ValidationError, check_readable};

/// A fencing token: strictly increasing per lock key across grants, never reused.
///
/// Compare tokens with `Ord`; a resource must refuse a token lower than one it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The largest token any store issues (PostgreSQL `bigint`): a larger one presented by a
    /// caller is refused as invalid input.
    pub const MAX: Self = Self(i64::MAX as u64);

    /// Checks that a presented token is within the range stores issue.
    pub fn validate(self) -> Result<Self, ValidationError> {
        if self > Self::MAX {
            return Err(ValidationError::new(
                "fencing_token",
                format!("{} is above the largest token {}", self.0, Self::MAX.0),
            ));
        }
        Ok(self)
    }

    /// The token as a signed 64-bit column holds it (PostgreSQL `bigint`, a resource's fence):
    /// exact for every validated token, saturating at [`Self::MAX`] otherwise.
    pub fn as_i64(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A lock key: 1 to [`LOCK_KEY_MAX_BYTES`] bytes of `[A-Za-z0-9._:-]`.
///
/// The charset keeps keys safe as a single URL path segment (`/v1/locks/{lock_key}`) and
/// in logs; `payout:42` is the executor's shape.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LockKey(String);

impl LockKey {
    /// Validates `raw` as a lock key.
    pub fn parse(raw: impl Into<String>) -> Result<Self, ValidationError> {
        let raw = raw.into();
        if raw.is_empty() {
            return Err(ValidationError::new("lock_key", "must not be empty"));
        }
        if raw.len() > LOCK_KEY_MAX_BYTES {
            return Err(ValidationError::new(
                "lock_key",
                format!("is {} bytes, the limit is {LOCK_KEY_MAX_BYTES}", raw.len()),
            ));
        }
        if raw == "." || raw == ".." {
            return Err(ValidationError::new(
                "lock_key",
                "must not be . or .. (URL clients drop such path segments)",
            ));
        }
        if let Some(bad) = raw.chars().find(|c| !is_key_char(*c)) {
            return Err(ValidationError::new(
                "lock_key",
                format!("contains {bad:?}; allowed are A-Z a-z 0-9 . _ : -"),
            ));
        }
        Ok(Self(raw))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

impl TryFrom<String> for LockKey {
    type Error = ValidationError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        Self::parse(raw)
    }
}

impl From<LockKey> for String {
    fn from(key: LockKey) -> Self {
        key.0
    }
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who holds a session, for humans and logs: 1 to [`OWNER_ID_MAX_BYTES`] bytes of readable
/// text ([`crate::check_readable`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OwnerId(String);

impl OwnerId {
    /// Validates `raw` as an owner id.
    pub fn parse(raw: impl Into<String>) -> Result<Self, ValidationError> {
        let raw = raw.into();
        if raw.trim().is_empty() {
            return Err(ValidationError::new("owner_id", "must not be empty"));
        }
        if raw.len() > OWNER_ID_MAX_BYTES {
            return Err(ValidationError::new(
                "owner_id",
                format!("is {} bytes, the limit is {OWNER_ID_MAX_BYTES}", raw.len()),
            ));
        }
        check_readable("owner_id", &raw)?;
        Ok(Self(raw))
    }

    /// The owner id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for OwnerId {
    type Error = ValidationError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        Self::parse(raw)
    }
}

impl From<OwnerId> for String {
    fn from(owner: OwnerId) -> Self {
        owner.0
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an election's leader announces (C2 §2.4c): any text of at most
/// [`LEADER_VALUE_MAX_BYTES`] bytes without a NUL (an address, a JSON document). It is the
/// holder's, never logged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LeaderValue(String);

impl LeaderValue {
    /// Validates `raw` as a leader's value.
    pub fn parse(raw: impl Into<String>) -> Result<Self, ValidationError> {
        let raw = raw.into();
        if raw.len() > LEADER_VALUE_MAX_BYTES {
            return Err(ValidationError::new(
                "value",
                format!(
                    "is {} bytes, the limit is {LEADER_VALUE_MAX_BYTES}",
                    raw.len()
                ),
            ));
        }
        if raw.contains('\0') {
            return Err(ValidationError::new("value", "must not contain NUL"));
        }
        Ok(Self(raw))
    }

    /// The value as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for LeaderValue {
    type Error = ValidationError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        Self::parse(raw)
    }
}

impl From<LeaderValue> for String {
    fn from(value: LeaderValue) -> Self {
        value.0
    }
}

/// A session's id: a random UUID chosen by the server. It is a capability (L2-L6 act on the
/// session with it), so it has no `Display`: logs, metrics and error messages show its
/// [`SessionId::tag`], and only the wire ([`SessionId::expose`], serde) carries the id itself.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub Uuid);

impl SessionId {
    /// A fresh random session id.
    pub fn random() -> Self {
        Self(Uuid::new_v4())
    }

    /// Parses a session id from a path segment.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        Uuid::parse_str(raw)
            .map(Self)
            .map_err(|_| ValidationError::new("session_id", "must be a UUID"))
    }
}

impl SessionId {
    /// The id as the wire carries it (L1's answer, the L2 and L3 paths, a store's key): only
    /// for the session's creator and the store, never for a log line or an error message.
    pub fn expose(&self) -> String {
        self.0.to_string()
    }

    /// A short digest of the id for logs, metrics and error messages: the same on every
    /// process (so a replica's audit line and the SDK's loss line of one session match), and
    /// no way back to the id. The id is 122 random bits; 48 bits of a SHA-256 over it (under a
    /// label of its own) tell sessions apart in a log without giving anyone the capability.
    pub fn tag(&self) -> SessionTag {
        use sha2::{Digest, Sha256};
        let digest = Sha256::new()
            .chain_update(SESSION_TAG_LABEL)
            .chain_update(self.0.as_bytes())
            .finalize();
        let mut tag = [0u8; SESSION_TAG_BYTES];
        tag.copy_from_slice(&digest[..SESSION_TAG_BYTES]);
        SessionTag(tag)
    }
}

/// Bytes of a [`SessionTag`] (12 hexadecimal digits).
const SESSION_TAG_BYTES: usize = 6;
/// The label a session tag's digest is taken under (domain separation).
const SESSION_TAG_LABEL: &[u8] = b"lock-session-tag\0";

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.tag())
    }
}

/// What logs, metrics and messages show of a session: `s-` and 12 hexadecimal digits of a
/// digest of its id ([`SessionId::tag`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionTag([u8; SESSION_TAG_BYTES]);

impl fmt::Display for SessionTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("s-")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_shows_its_tag_and_never_its_id() {
        let session = SessionId::random();
        let id = session.expose();
        let tag = session.tag().to_string();
        assert_eq!(tag.len(), 14, "{tag}");
        assert!(tag.starts_with("s-"), "{tag}");
        assert_eq!(tag, session.tag().to_string(), "the same on every call");
        assert_ne!(tag, SessionId::random().tag().to_string());
        let debug = format!("{session:?}");
        assert!(!debug.contains(&id) && debug.contains(&tag), "{debug}");
        assert_eq!(
            serde_json_string(&session),
            format!("\"{id}\""),
            "the wire keeps the id"
        );
    }

    fn serde_json_string(session: &SessionId) -> String {
        serde_json::to_string(session).unwrap()
    }

    #[test]
    fn lock_key_accepts_the_executor_shape_and_refuses_the_rest() {
        assert!(LockKey::parse("payout:42").is_ok());
        assert!(LockKey::parse("a".repeat(LOCK_KEY_MAX_BYTES)).is_ok());
        for bad in [
            "",
            "a/b",
            "a b",
            "tab\t",
            "é",
            &"a".repeat(LOCK_KEY_MAX_BYTES + 1),
        ] {
            let err = LockKey::parse(bad).unwrap_err();
            assert_eq!(err.field, "lock_key", "{bad:?}");
        }
    }

    #[test]
    fn owner_id_refuses_blank_long_and_control() {
        assert!(OwnerId::parse("executor-1 on host a").is_ok());
        for bad in ["", "   ", "nul\0", &"o".repeat(OWNER_ID_MAX_BYTES + 1)] {
            assert_eq!(
                OwnerId::parse(bad).unwrap_err().field,
                "owner_id",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn leader_value_refuses_nul_and_long() {
        assert!(LeaderValue::parse("").is_ok());
        assert!(LeaderValue::parse("{\"addr\":\"10.0.0.1:80\"}\n").is_ok());
        for bad in ["nul\0", &"v".repeat(LEADER_VALUE_MAX_BYTES + 1)] {
            assert_eq!(
                LeaderValue::parse(bad).unwrap_err().field,
                "value",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tokens_above_bigint_are_refused() {
        assert!(FencingToken(i64::MAX as u64).validate().is_ok());
        assert_eq!(
            FencingToken(u64::MAX).validate().unwrap_err().field,
            "fencing_token"
        );
    }

    #[test]
    fn tokens_order_numerically() {
        assert!(FencingToken(9) < FencingToken(10));
        assert_eq!(serde_json::to_string(&FencingToken(7)).unwrap(), "7");
    }

    #[test]
    fn lock_key_deserialization_validates() {
        assert!(serde_json::from_str::<LockKey>("\"ok:1\"").is_ok());
        assert!(serde_json::from_str::<LockKey>("\"not ok\"").is_err());
    }
}
