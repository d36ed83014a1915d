//! Why a command failed, and the exit code each failure has (`lockctl --help` lists them, as does
//! `docs/contracts/C5-config-build-and-naming.md`). The codes follow `sysexits.h` where one fits.

use lock_api::{FencingToken, LockError, LockKey, LockLost};

/// The exit codes of lockctl. `run` passes CMD's own exit code through besides these.
pub mod code {
    /// Done.
    pub const OK: u8 = 0;
    /// The lock service refused the request (unknown session, bad credential, bad input it
    /// found), or a release found nothing to release.
    pub const REFUSED: u8 = 1;
    /// Bad usage (`EX_USAGE`): unknown command or flag, a bad key, duration, token or id.
    pub const USAGE: u8 = 64;
    /// The lock service is unavailable (`EX_UNAVAILABLE`): no answer, `NOT_LEADER`,
    /// `STORE_UNAVAILABLE`, on every endpoint, or over the credential's rate or quota (429).
    pub const UNAVAILABLE: u8 = 69;
    /// `run`: the lock was lost while CMD ran; CMD was stopped.
    pub const LOST: u8 = 70;
    /// Not acquired within `--wait`: another session holds the key (`EX_TEMPFAIL`).
    pub const NOT_ACQUIRED: u8 = 75;
    /// Bad configuration in the environment (`EX_CONFIG`).
    pub const CONFIG: u8 = 78;
    /// `run`: CMD exists but cannot be executed.
    pub const CANNOT_EXECUTE: u8 = 126;
    /// `run`: CMD was not found.
    pub const NOT_FOUND: u8 = 127;
    /// `run`: 128 + N when CMD was killed by signal N, or lockctl was interrupted by signal N
    /// before CMD started.
    pub const SIGNAL_BASE: u8 = 128;
}

/// A failed command. Each variant has one exit code ([`CtlError::exit_code`]) and a short
/// machine-readable kind ([`CtlError::kind`]).
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Bad usage found after parsing (e.g. no usable endpoint).
    #[error("{0}")]
    Usage(String),
    /// A bad setting in the environment.
    #[error("{0}")]
    Config(String),
    /// Another session held the key (or a key of the set) for the whole wait.
    #[error("{key} is held by another session: not acquired within {wait}")]
    NotAcquired {
        /// The key, or the set's keys (`a, b`).
        key: String,
        /// The wait, as given.
        wait: String,
    },
    /// No endpoint could serve the request.
    #[error("{0}")]
    Unavailable(LockError),
    /// The lock service refused the request.
    #[error("refused: {0}")]
    Refused(LockError),
    /// The release found no live grant of this key with this token and session.
    #[error(
        "{key} (token {token}): nothing released: no live grant with this token in this session (already released, expired or revoked)"
    )]
    NotReleased {
        /// The key.
        key: LockKey,
        /// The token presented.
        token: FencingToken,
    },
    /// `run`: the lock was lost while CMD ran.
    #[error("{lost}; {what}")]
    Lost {
        /// The loss the SDK declared.
        lost: LockLost,
        /// What became of CMD.
        what: String,
    },
    /// `run`: CMD could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// CMD's program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// `run`: a signal arrived before CMD started.
    #[error("interrupted by signal {signal} before {key} was acquired and CMD started")]
    Interrupted {
        /// The key, or the set's keys (`a, b`).
        key: String,
        /// The signal's number.
        signal: i32,
    },
    /// Anything else (the runtime, signal handlers, the SDK's thread).
    #[error("{0}")]
    Failed(String),
}

impl CtlError {
    /// The process exit code for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => code::USAGE,
            Self::Config(_) => code::CONFIG,
            Self::NotAcquired { .. } => code::NOT_ACQUIRED,
            Self::Unavailable(_) => code::UNAVAILABLE,
            Self::Refused(_) | Self::NotReleased { .. } | Self::Failed(_) => code::REFUSED,
            Self::Lost { .. } => code::LOST,
            Self::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                code::NOT_FOUND
            }
            Self::Spawn { .. } => code::CANNOT_EXECUTE,
            Self::Interrupted { signal, .. } => signal_code(*signal),
        }
    }

    /// A short name of the failure, the `error` field of the JSON error line.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Usage(_) => "usage",
            Self::Config(_) => "config",
            Self::NotAcquired { .. } => "not_acquired",
            Self::Unavailable(_) => "unavailable",
            Self::Refused(_) => "refused",
            Self::NotReleased { .. } => "not_released",
            Self::Lost { .. } => "lost",
            Self::Spawn { .. } => "cannot_run",
            Self::Interrupted { .. } => "interrupted",
            Self::Failed(_) => "failed",
        }
    }
}

impl From<LockError> for CtlError {
    fn from(err: LockError) -> Self {
        match err {
            // Over the credential's rate or quota is a replica that cannot serve this caller now.
            LockError::NotLeader { .. }
            | LockError::Unavailable { .. }
            | LockError::Throttled { .. } => Self::Unavailable(err),
            err => Self::Refused(err),
        }
    }
}

/// 128 + `signal`, saturating.
pub fn signal_code(signal: i32) -> u8 {
    u8::try_from(signal)
        .ok()
        .and_then(|s| code::SIGNAL_BASE.checked_add(s))
        .unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_has_its_documented_code() {
        let key = "k".to_owned();
        let unavailable = LockError::Unavailable {
            message: "connection refused".into(),
        };
        assert_eq!(CtlError::from(unavailable).exit_code(), 69);
        let leader = LockError::NotLeader {
            message: "draining".into(),
        };
        assert_eq!(CtlError::from(leader).exit_code(), 69);
        let throttled = LockError::Throttled {
            message: "over its rate".into(),
        };
        assert_eq!(CtlError::from(throttled).exit_code(), 69);
        let unknown = LockError::SessionUnknown {
            message: "gone".into(),
        };
        assert_eq!(CtlError::from(unknown).exit_code(), 1);
        let wait = "2s".to_owned();
        assert_eq!(CtlError::NotAcquired { key, wait }.exit_code(), 75);
        assert_eq!(CtlError::Usage(String::new()).exit_code(), 64);
        assert_eq!(CtlError::Config(String::new()).exit_code(), 78);
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        let spawn = CtlError::Spawn {
            program: "nope".into(),
            source: missing,
        };
        assert_eq!(spawn.exit_code(), 127);
        assert_eq!(signal_code(15), 143);
        assert_eq!(signal_code(9), 137);
    }
}
