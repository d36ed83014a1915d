//! Shutdown signals.

use std::future::Future;

/// Completes on SIGTERM or SIGINT. The handlers are installed when this is called, not when
/// the future is first polled: a signal that arrives between the two (a service that has just
/// said it listens, an orchestrator that stops it at once) is still a graceful stop, never
/// the default action that kills the process. Call it within the runtime.
pub fn signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let terminate = signal(SignalKind::terminate()).ok();
        let interrupt = signal(SignalKind::interrupt()).ok();
        async move {
            let recv = |sig: Option<tokio::signal::unix::Signal>| async move {
                match sig {
                    Some(mut sig) => {
                        sig.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = recv(terminate) => {},
                () = recv(interrupt) => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
