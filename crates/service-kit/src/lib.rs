//! HTTP plumbing every service shares, so each service crate holds only its own logic:
//! [`ApiError`] (the `{"code","message"}` answer), [`ApiJson`] (a body extractor whose
//! refusals name the field), [`common_layers`] (limits, timeout, metrics, JSON errors,
//! tracing), the accept loop with its connection limits ([`serve`]), Prometheus and health
//! handlers, named credentials with their request rates ([`Callers`]), single bearer secrets.
//! What a process needs without HTTP (flags, logs, the
//! recorder, shutdown) is `process-kit`'s, re-exported here for the services.

mod auth;
mod callers;
mod error;
mod extract;
mod fence_keys;
mod hangup;
mod json;
mod layers;
pub mod openapi;
mod serve;
mod telemetry;

pub use auth::require_bearer;
pub use callers::{
    BURST_DEFAULT, CREDENTIAL_LIMIT_TOTAL, Caller, Callers, LIMITS, REQUESTS_PER_SECOND_DEFAULT,
    RateDefaults, VERIFIED_CLIENT_HEADER, count_limit,
};
pub use error::{ApiError, code_for_status, not_found, tag};
pub use extract::single_header;
pub use fence_keys::trusted_keys;
pub use json::ApiJson;
pub use layers::{RequestMetrics, common_layers, jsonify_errors};
pub use process_kit::{LogFormat, logging, parse_or_exit, shutdown};
pub use serve::{
    CONNECTIONS_MAX_DEFAULT, HEADER_READ_TIMEOUT_DEFAULT, HttpLimits, Service, run_main, serve,
};

pub use telemetry::{install_metrics, live, render_metrics};
