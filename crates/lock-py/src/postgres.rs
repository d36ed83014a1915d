//! fence-kit's PostgreSQL fence for Python resources (`fencedlock.psycopg`): the migration
//! SQL itself (`fence_kit::postgres::MIGRATION`, so it lives in one place) and fence-kit's
//! mapping of `fence_check`'s SQLSTATEs to the refusals.

use pyo3::exceptions::PyBaseException;
use pyo3::prelude::*;

use crate::errors::fence_error;

/// The refusal (`FencedOut`, `InvalidArgument`) for a database error `fence_check` raised,
/// `None` for any other error (which stays the writer's own).
#[pyfunction]
pub(crate) fn postgres_refusal(
    py: Python<'_>,
    sqlstate: &str,
    message: &str,
) -> Option<Py<PyBaseException>> {
    fence_kit::postgres::fence_error(sqlstate, message).map(|err| fence_error(err).into_value(py))
}

/// Adds the migration SQL (`POSTGRES_MIGRATION`) and the mapping to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("POSTGRES_MIGRATION", fence_kit::postgres::MIGRATION)?;
    m.add_function(wrap_pyfunction!(postgres_refusal, m)?)
}
