//! PostgreSQL's server binaries: where they are, and running one with its output kept.

use std::path::{Path, PathBuf};
use std::process::Command;

pub(super) fn path_str(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("path is not UTF-8: {}", path.display()))
}

pub(super) fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("run {command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} exited with {}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Finds PostgreSQL's server binaries: `PG_BIN` when set, else the newest
/// `/usr/lib/postgresql/*/bin`, else `pg_config --bindir`.
pub fn postgres_bin_dir() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        let dir = PathBuf::from(dir);
        if !dir.join("initdb").exists() {
            return Err(format!(
                "PG_BIN={} has no initdb: point it at PostgreSQL's server binaries",
                dir.display()
            ));
        }
        return Ok(dir);
    }
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    candidates.retain(|dir| dir.join("initdb").exists());
    candidates.sort_by_key(|dir| {
        dir.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(dir) = candidates.pop() {
        return Ok(dir);
    }
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    Err(
        "no PostgreSQL server binaries (initdb, pg_ctl) found: run `apt-get install postgresql` \
         (script/bootstrap does), set PG_BIN to their directory, or set DATABASE_URL to a server"
            .into(),
    )
}
