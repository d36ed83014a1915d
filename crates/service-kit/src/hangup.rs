//! Files a service reads again on SIGHUP (trusted keys, credentials): one handler per file,
//! registered before the service serves, so a SIGHUP from then on reloads and never ends
//! the process (SIGHUP's default).

/// Calls `reload` on every SIGHUP from now on, in a task of its own. `what` names the file in
/// the error when no handler can be registered. Call from within the runtime.
pub fn on_sighup(what: &str, mut reload: impl FnMut() + Send + 'static) -> Result<(), String> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| format!("{what}: no SIGHUP handler to reload it: {e}"))?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            reload();
        }
    });
    Ok(())
}
