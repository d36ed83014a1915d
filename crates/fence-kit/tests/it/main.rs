//! fence-kit against real parts: the SQL fence on a real PostgreSQL, checked against the Rust
//! rule on one table of cases; the axum extractor behind a real listener.
#![allow(clippy::unwrap_used)]

mod extractor;
mod postgres;
