//! A fake bank rail with scripted faults (task T-027; not built yet).
//!
//! Will accept or reject transfers, record every request it receives (the witness for
//! duplicate payouts) and take scripted faults through an admin endpoint. Exports nothing yet.
