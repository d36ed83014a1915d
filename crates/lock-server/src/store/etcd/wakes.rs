//! The replicas (sinks) one store's wake-up watch serves: the only code that holds them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use lock_store::{Wake, WakeSink};

/// The sinks of `LockStore::watch_wakes` and whether the watch runs. The watch task holds
/// it weakly: it ends once the store is gone.
#[derive(Default)]
pub(super) struct WakeHub {
    sinks: Mutex<Vec<WakeSink>>,
    watching: AtomicBool,
}

impl WakeHub {
    /// Adds `sink`; `true` for the first, whose caller starts the watch.
    pub(super) fn add(&self, sink: WakeSink) -> bool {
        self.sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(sink);
        !self.watching.swap(true, Ordering::SeqCst)
    }

    /// Tells every sink of `wake`.
    pub(super) fn deliver(&self, wake: &Wake) {
        let sinks = self
            .sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        sinks.iter().for_each(|sink| sink(wake.clone()));
    }
}
