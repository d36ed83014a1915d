//! The only door to the payment rail (task T-027; not built yet).
//!
//! Will reserve a submission with payment-resource, call the rail within the per-hop
//! timeout and record the outcome; timeouts become `RAIL_AMBIGUOUS`. Exports nothing yet.
