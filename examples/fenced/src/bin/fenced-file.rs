//! A fenced file writer for `lockctl run`: writes its standard input to FILE for the holder
//! lockctl started it as, and refuses a holder older than the file's fence.
//!
//! ```text
//! lockctl run report:daily -- fenced-file /srv/reports/daily.txt < daily.txt
//! ```
//!
//! `lockctl run` sets `LOCK_KEY`, `LOCK_FENCING_TOKEN` and `LOCK_FENCING_PROOF`; the proof is
//! verified against `FENCE_PUBLIC_KEYS`. The fence (`token grant`) lives in `FILE.fence`; the
//! check and both writes happen under an exclusive lock of `FILE.lock`, the fence first, so a
//! crash between the two leaves the fence ahead of the data, never behind it.
//! Exit codes: 0 written, 1 refused (fenced out or a bad proof), 2 bad usage or environment.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use fence_kit::{FenceRule, FencedWrite, GrantFence, LockKey, ProvenFence, check_open};
use http::{HeaderMap, HeaderValue};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Refused(message)) => {
            eprintln!("fenced-file: refused: {message}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(message)) => {
            eprintln!("fenced-file: {message}");
            ExitCode::from(2)
        }
    }
}

enum Failure {
    /// The write was refused: nothing was written.
    Refused(String),
    /// Bad arguments, environment or file system.
    Usage(String),
}

fn usage(err: impl std::fmt::Display) -> Failure {
    Failure::Usage(err.to_string())
}

fn run() -> Result<(), Failure> {
    let mut args = std::env::args_os().skip(1);
    let (Some(file), None) = (args.next(), args.next()) else {
        return Err(usage(
            "usage: lockctl run KEY -- fenced-file FILE < CONTENT",
        ));
    };
    let file = PathBuf::from(file);
    let proven = proven_from_env()?;
    let mut content = Vec::new();
    std::io::stdin().read_to_end(&mut content).map_err(usage)?;

    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(sibling(&file, "lock"))
        .map_err(usage)?;
    lock.lock().map_err(usage)?; // held until `lock` is dropped
    let fence_path = sibling(&file, "fence");
    // No fence file: never claimed. Any other failure to read it is no answer: guessing
    // "unclaimed" would let a stale holder through.
    let stored = match std::fs::read_to_string(&fence_path) {
        Ok(stored) => Some(stored),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(usage(format!("{}: {err}", fence_path.display()))),
    };
    // An existing fence file must hold `token grant` with a token of at least 1: anything
    // else (empty, truncated, garbage) is refused, never read as "never claimed".
    let fence = match stored.as_deref().map(str::trim) {
        None => GrantFence::UNCLAIMED,
        Some(line) => {
            let (token, grant) = line.split_once(' ').unwrap_or((line, ""));
            match token.parse::<i64>() {
                Ok(token) if token >= 1 => GrantFence { token, grant },
                _ => return Err(usage(format!("{}: not a fence", fence_path.display()))),
            }
        }
    };
    let grant = proven.grant.as_text();
    let presented = GrantFence {
        token: proven.token_i64(),
        grant: &grant,
    };
    check_open(FenceRule::Claim, presented, fence).map_err(|e| Failure::Refused(e.to_string()))?;
    replace(
        &fence_path,
        format!("{} {grant}\n", presented.token).as_bytes(),
    )?;
    replace(&file, &content)?;
    Ok(())
}

/// The token and proof `lockctl run` passed, read and verified as a fenced HTTP write is.
fn proven_from_env() -> Result<ProvenFence, Failure> {
    let var = |name: &str| {
        std::env::var(name)
            .map_err(|_| usage(format!("{name} is not set: run me under lockctl run")))
    };
    let key = LockKey::parse(var("LOCK_KEY")?).map_err(usage)?;
    let mut headers = HeaderMap::new();
    for (header, name) in [
        ("x-fencing-token", "LOCK_FENCING_TOKEN"),
        ("x-fencing-proof", "LOCK_FENCING_PROOF"),
    ] {
        let value =
            HeaderValue::from_str(&var(name)?).map_err(|_| usage(format!("{name}: not ASCII")))?;
        headers.insert(header, value);
    }
    let verifier = fenced_examples::verifier_from_env().map_err(usage)?;
    FencedWrite::from_headers(&headers)
        .and_then(|write| write.verify(&verifier, &key))
        .map_err(|e| Failure::Refused(e.to_string()))
}

/// `FILE.{suffix}` beside `file`.
fn sibling(file: &Path, suffix: &str) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// Replaces `path` with `bytes` atomically: a temporary file, synced, renamed over it.
fn replace(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let temporary = sibling(path, "tmp");
    let mut out = File::create(&temporary).map_err(usage)?;
    out.write_all(bytes)
        .and_then(|()| out.sync_all())
        .map_err(usage)?;
    std::fs::rename(&temporary, path).map_err(usage)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir).and_then(|d| d.sync_all()).map_err(usage)?;
    }
    Ok(())
}
