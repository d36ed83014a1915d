//! A fence inside PostgreSQL, for services whose resource is rows in their own database:
//! apply [`MIGRATION`] once (it is idempotent), then call
//! `SELECT fence_check($resource, $token, $grant, $claim)` in the writing transaction before
//! the write. A refused write raises SQLSTATE [`FENCED_OUT_SQLSTATE`] and aborts the
//! writer's transaction, so nothing it wrote is kept. The rule is [`crate::check_fence`]'s;
//! both are tested on [`crate::cases`].
//!
//! No client library is assumed: map a database error with [`fence_error`].

use crate::error::FenceError;
use lock_api::ErrorCode;

/// The SQL that creates `fence_kit_fences` and
/// `fence_check(resource, token, grant, claim, shared)`.
pub const MIGRATION: &str = include_str!("../sql/fence_kit.sql");

/// The SQLSTATE `fence_check` raises when a write is fenced out.
pub const FENCED_OUT_SQLSTATE: &str = "FENCE";

/// The SQLSTATE `fence_check` raises for a token below 1 or a bad resource name.
pub const INVALID_SQLSTATE: &str = "22023";

/// The statement a writer runs: `$1` resource, `$2` token, `$3` the proof's grant id (text),
/// `$4` whether this write is the claim. Returns the fence after the write.
pub const CHECK_SQL: &str = "SELECT fence_check($1, $2, $3, $4)";

/// The statement a reader of a read/write lock runs (`FenceRule::Shared`): `$1` resource,
/// `$2` token, `$3` the proof's grant id. Returns the fence, which it never moves.
pub const SHARED_CHECK_SQL: &str = "SELECT fence_check($1, $2, $3, false, true)";

/// The typed refusal for a database error raised by `fence_check`, `None` for any other
/// error (which stays the writer's own).
pub fn fence_error(sqlstate: &str, message: &str) -> Option<FenceError> {
    let code = match sqlstate {
        FENCED_OUT_SQLSTATE => ErrorCode::FencedOut,
        INVALID_SQLSTATE if message.starts_with("fence_check:") => ErrorCode::InvalidArgument,
        _ => return None,
    };
    Some(FenceError {
        code,
        message: message.to_owned(),
    })
}
