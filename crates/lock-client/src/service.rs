//! What a worker process built around the SDK needs beside it (feature `service`): its flags
//! and their one-line refusal, logs, the metrics recorder, shutdown signals, the TLS rule
//! of its metrics port, and the bearer header and pool timeout of its own HTTP clients: the
//! same kits the services use, so that a worker keeps one rule with them. The executor
//! reaches them here: its only workspace dependencies are the SDK's two crates
//! (`ct5-modules`).

pub use process_kit::{LogFormat, ServeTls, logging, parse_or_exit, recorder, shutdown};
pub use tls_kit::{JsonParseErrors, POOL_IDLE_TIMEOUT_MS, ServerTls, TlsStream, bearer_headers};
