//! The lock SDK's decisions, alone: sans-IO, no async runtime, no HTTP, no OS call. One
//! session's grant registry and conservative deadlines ([`SessionCore`]), the heartbeat's
//! grid ([`TickGrid`]) and renew decisions, the bounded acquire loop ([`AcquireLoop`], its
//! [`AcquirePolicy`], full-jitter backoff), and loss detection. Inputs are `now_nanos`
//! readings of the caller's monotonic clock and the replies the caller received; outputs are
//! decisions (what to send, how long to wait) and the losses to deliver.
//!
//! Drivers run this exact code: the Rust SDK (`lock-client`, over HTTP with a heartbeat
//! thread), the Python SDK (through its binding) and the deterministic simulation
//! (`lock-sim`). Every instant a deadline counts from is stamped here, when the core plans the
//! request ([`Sent`], [`Attempt`]): a driver hands the stamp back with the answer and never
//! supplies the time itself.
//!
//! Architecture Invariant: no dependency that does I/O or needs a runtime (no tokio, reqwest,
//! nix); no clock read, no thread, no lock. Readings are compared only through
//! [`deadline_passed`] and [`nanos_until`].

pub mod acquire;
pub mod backoff;
mod deadline;
mod session;
mod tick_grid;
mod time;

pub use acquire::{AcquireLoop, AcquirePolicy, AfterFailure, Attempt, Next, grant_basis_nanos};
pub use deadline::{
    HEARTBEAT_DIVISOR, MIN_HEARTBEAT_PERIOD_MS, RENEW_BELOW_PERIODS, heartbeat_period,
    remaining_after_tick, stop_grace_limit, usable_nanos,
};
pub use session::{
    Held, Loss, Losses, Refused, Renewal, Sent, SessionCore, StaleRegrant, TickPlan, Unhold,
};
pub use tick_grid::TickGrid;
pub use time::{deadline_passed, nanos_until};
