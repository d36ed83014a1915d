//! `--generate-tls DIR`: a local CA and a certificate for each service name, as PEM files a
//! first start of a deployment (compose's `deploy/prepare-env.sh`) hands the services. The
//! CA's own key is not kept: to add a name, generate the whole set again.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Names every generated certificate also carries, so one works both inside a container
/// network (by service name) and from the host.
const LOCAL_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// Writes `ca.pem`, and `{name}.pem` with `{name}-key.pem` (mode 0600) for each of `names`,
/// into `dir` (created if missing); refuses to overwrite any file. Returns what it wrote, one
/// path a line.
pub fn generate_tls(dir: &Path, names: &[String]) -> Result<String, String> {
    if names.is_empty() {
        return Err("--tls-names: at least one service name".into());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let ca = tls_kit::LocalCa::new("lock-service local CA").map_err(|e| e.to_string())?;
    let mut files = vec![("ca.pem".to_owned(), ca.cert_pem(), 0o644)];
    for name in names {
        let sans: Vec<&str> = std::iter::once(name.as_str())
            .chain(LOCAL_NAMES.iter().copied().filter(|l| *l != name))
            .collect();
        let issued = ca.issue(&sans).map_err(|e| e.to_string())?;
        files.push((format!("{name}.pem"), issued.cert_pem, 0o644));
        files.push((format!("{name}-key.pem"), issued.key_pem, 0o600));
    }
    let mut written = Vec::new();
    for (file, pem, mode) in files {
        let path = dir.join(&file);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(|e| {
                format!(
                    "{}: {e} (delete the old set to make a new one)",
                    path.display()
                )
            })?;
        out.write_all(pem.as_bytes())
            .and_then(|()| out.sync_all())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path.display().to_string());
    }
    Ok(written.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_written_once_with_private_keys_kept_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["lock-server-1".to_owned(), "payment-resource".to_owned()];
        let written = generate_tls(dir.path(), &names).unwrap();
        assert_eq!(written.lines().count(), 5, "{written}");
        let mode = |f: &str| {
            std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("lock-server-1-key.pem"), 0o600);
        assert_eq!(mode("ca.pem"), 0o644);
        let certs = tls_kit::read_certs(&dir.path().join("payment-resource.pem")).unwrap();
        assert_eq!(certs.len(), 1);
        tls_kit::read_key(&dir.path().join("payment-resource-key.pem")).unwrap();
        let again = generate_tls(dir.path(), &names).unwrap_err();
        assert!(again.contains("ca.pem"), "{again}");
        assert!(generate_tls(dir.path(), &[]).is_err());
    }
}
