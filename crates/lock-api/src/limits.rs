//! Input limits shared by the server (which enforces them) and clients (which may pre-check).

/// Longest accepted lock key, in bytes.
pub const LOCK_KEY_MAX_BYTES: usize = 200;
/// Longest accepted owner id, in bytes.
pub const OWNER_ID_MAX_BYTES: usize = 128;
/// A TTL above this is refused as absurd (400), not clamped: one day.
pub const TTL_ABSURD_MS: u64 = 86_400_000;
/// Most keys one set acquire may name (ADR 0007): a set is read and written in one store
/// transaction.
pub const SET_KEYS_MAX: usize = 16;
/// Most permits one semaphore key may have (ADR 0007): a key's holders are read whole in
/// every decision.
pub const PERMITS_MAX: u32 = 256;
/// Longest value an election's leader may announce (L4 `value`, L9), in bytes: it is read
/// with the key's grant on every leader query.
pub const LEADER_VALUE_MAX_BYTES: usize = 4096;
/// Largest request body any lock-service endpoint accepts.
pub const REQUEST_BODY_MAX_BYTES: usize = 16 * 1024;

/// The HTTP header every fenced write carries, with the grant's token in decimal.
pub const FENCING_TOKEN_HEADER: &str = "x-fencing-token";
