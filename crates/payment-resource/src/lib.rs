//! The protected resource (task T-027; not built yet).
//!
//! Will own `paydb`: payouts, fences, rail submissions and the double-entry ledger, with
//! every write checked against the payout's fence in the transaction that writes. It
//! exports nothing until that issue lands.
