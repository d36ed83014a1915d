//! OpenAPI schemas of the validated identifiers (feature `openapi`): written by hand from
//! the same limits the parsers enforce, so the published document and the validation cannot
//! disagree. The wire structs derive theirs (`wire.rs`, `error.rs`).

use std::borrow::Cow;

use utoipa::openapi::schema::{ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::{KnownFormat, RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::ids::{FencingToken, LockKey, OwnerId, SessionId};
use crate::limits::{LOCK_KEY_MAX_BYTES, OWNER_ID_MAX_BYTES};

/// The lock key charset (`LockKey::parse`), as a pattern.
const LOCK_KEY_PATTERN: &str = "^[A-Za-z0-9._:-]+$";

impl PartialSchema for LockKey {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(LOCK_KEY_MAX_BYTES))
            .pattern(Some(LOCK_KEY_PATTERN))
            .description(Some("1 to 200 bytes of [A-Za-z0-9._:-]"))
            .examples([serde_json::json!("payout:42")])
            .into()
    }
}
impl ToSchema for LockKey {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("LockKey")
    }
}

impl PartialSchema for OwnerId {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(OWNER_ID_MAX_BYTES))
            .description(Some(
                "1 to 128 bytes, not blank, no control or invisible formatting characters",
            ))
            .examples([serde_json::json!("executor-1")])
            .into()
    }
}
impl ToSchema for OwnerId {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("OwnerId")
    }
}

impl PartialSchema for SessionId {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)))
            .description(Some("a session id: a random UUID, the holder's capability"))
            .into()
    }
}
impl ToSchema for SessionId {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("SessionId")
    }
}

impl PartialSchema for FencingToken {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(0))
            .maximum(Some(FencingToken::MAX.0))
            .description(Some(
                "per key, strictly increasing across grants, never reused",
            ))
            .into()
    }
}
impl ToSchema for FencingToken {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("FencingToken")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::TTL_ABSURD_MS;
    use crate::{AcquireRequest, CreateSessionRequest};

    /// The TTL bounds in the wire structs' schema attributes (literals: the macro takes no
    /// constants) are the limit `validate_requested_ttl` enforces.
    #[test]
    fn ttl_bounds_in_the_schemas_are_the_validation_limits() {
        for schema in [CreateSessionRequest::schema(), AcquireRequest::schema()] {
            let json = serde_json::to_value(schema).unwrap();
            let ttl = &json["properties"]["ttl_ms"];
            let bounds = [ttl["minimum"].as_u64(), ttl["maximum"].as_u64()];
            let ttl = match bounds {
                [None, None] => &ttl["oneOf"][0], // Option<u64>: the non-null branch
                _ => ttl,
            };
            assert_eq!(ttl["minimum"].as_u64(), Some(1), "{json}");
            assert_eq!(ttl["maximum"].as_u64(), Some(TTL_ABSURD_MS), "{json}");
        }
    }

    #[test]
    fn permit_bounds_in_the_schema_are_the_validation_limits() {
        let json = serde_json::to_value(AcquireRequest::schema()).unwrap();
        let permits = &json["properties"]["permits"];
        let permits = match permits["maximum"].as_u64() {
            None => &permits["oneOf"][0], // Option<u32>: the non-null branch
            Some(_) => permits,
        };
        assert_eq!(permits["minimum"].as_u64(), Some(1), "{json}");
        assert_eq!(
            permits["maximum"].as_u64(),
            Some(u64::from(crate::PERMITS_MAX)),
            "{json}"
        );
    }
}
