//! payment-resource tests against a real PostgreSQL: bad input, fence rules.
#![allow(clippy::unwrap_used)]

mod bad_input;
mod fences;
mod offers;
mod openapi;
mod support;
