//! A wall clock that a test steps: libfaketime (Debian's `libfaketime`) preloaded into a
//! server, reading its offset from a file on every clock call. Only the wall clock moves
//! (`DONT_FAKE_MONOTONIC`): the server's timers and timeouts keep running true.
//!
//! No libfaketime is a test failure that says how to install it, never a skip.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use tempfile::TempDir;

/// A steppable wall clock for a child process.
#[derive(Debug)]
pub struct FakeClock {
    dir: TempDir,
    library: PathBuf,
}

impl FakeClock {
    /// A clock at the true time (offset `+0`). Fails when libfaketime is missing.
    pub fn new() -> Result<Self, String> {
        let library = library()?;
        let dir = tempfile::Builder::new()
            .prefix("fakeclock-")
            .tempdir()
            .map_err(|e| format!("create a temp dir: {e}"))?;
        // The server may run as another user (PostgreSQL as `postgres`): it must read the file.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("open the fake clock's dir: {e}"))?;
        let clock = Self { dir, library };
        clock.set_offset_secs(0)?;
        Ok(clock)
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("offset")
    }

    /// Sets the clock to the true time plus `secs` (a step, forward or back).
    pub fn set_offset_secs(&self, secs: i64) -> Result<(), String> {
        // Written aside and renamed: the server never reads half a line.
        let staged = self.dir.path().join("offset.new");
        std::fs::write(&staged, format!("{secs:+}\n"))
            .and_then(|()| {
                std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o644))
            })
            .and_then(|()| std::fs::rename(&staged, self.file()))
            .map_err(|e| format!("step the fake clock: {e}"))
    }

    /// The environment that puts a child process on this clock.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", self.library.display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.file().display().to_string()),
            ("FAKETIME_NO_CACHE", "1".into()),
            ("DONT_FAKE_MONOTONIC", "1".into()),
        ]
    }
}

/// libfaketime's shared object: `LIBFAKETIME`, or Debian's place for it.
fn library() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("LIBFAKETIME")
        && !path.is_empty()
    {
        return Ok(PathBuf::from(path));
    }
    let found = std::fs::read_dir("/usr/lib")
        .map_err(|e| format!("read /usr/lib: {e}"))?
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("faketime/libfaketime.so.1"))
        .find(|path| path.exists());
    found.ok_or_else(|| {
        "no libfaketime: run `apt-get install libfaketime` (script/bootstrap does), or set LIBFAKETIME to libfaketime.so.1".into()
    })
}
