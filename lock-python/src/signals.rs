//! The waits on a lease's signals (`until_unsafe()`, `wait_unsafe()`,
//! `until_ended()`, `wait_ended()`) that `Lock` and `Leadership` share.

use lock_core::LostReason;
use pyo3::prelude::*;

use crate::runtime::ProcessRuntime;
use crate::values::lost_reason;

/// `wait_lost(timeout)` of a `Lock` or a `Leadership`: block until `lost`
/// resolves and return its `LostReason`, or `None` after `timeout`.
pub(crate) fn wait_lost(
    py: Python<'_>,
    runtime: &ProcessRuntime,
    lost: impl std::future::Future<Output = LostReason> + Send + 'static,
    timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Py<PyAny>>> {
    let limit = crate::convert::optional_seconds(py, "timeout", timeout)?;
    let reason = runtime.block_on(py, crate::runtime::within(limit, lost))?;
    reason.map(|reason| lost_reason(py, &reason)).transpose()
}

/// An awaitable of `signal`'s `LostReason` (`until_unsafe()`,
/// `until_ended()` of a `Lock` or a `Leadership`).
pub(crate) fn signal_awaitable<'py>(
    py: Python<'py>,
    runtime: &ProcessRuntime,
    signal: impl std::future::Future<Output = LostReason> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>> {
    runtime.awaitable(py, signal, |py, reason| lost_reason(py, &reason))
}
