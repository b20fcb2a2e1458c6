//! `lease_lock.Semaphore`: a counting semaphore (a `lock_core::Semaphore`)
//! whose permits are `lease_lock.Lock`s on its slots.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::errors;
use crate::lock::Lock;
use crate::runtime::ProcessRuntime;

/// A counting semaphore: at most `permits` holders (on any clients) at once.
/// Made by `LockClient.semaphore(name, permits)`; every client must use the
/// same count. `acquire` returns a permit as a `Lock` (its `slot` says which
/// permit), with a lease, heartbeats, `lost()`, a fence and `with` blocks.
#[pyclass(module = "lease_lock._native", name = "Semaphore", frozen)]
pub(crate) struct Semaphore {
    semaphore: lock_core::Semaphore,
    runtime: Arc<ProcessRuntime>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.semaphore.name())
            .field("permits", &self.semaphore.permits())
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(semaphore: lock_core::Semaphore, runtime: Arc<ProcessRuntime>) -> Self {
        Self { semaphore, runtime }
    }

    #[allow(clippy::too_many_arguments)]
    fn take(
        &self,
        py: Python<'_>,
        try_once: bool,
        is_async: bool,
        wait: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
        max_hold: Option<&Bound<'_, PyAny>>,
        refresh: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.runtime.pid().check(py)?;
        let options = crate::convert::settings(py, wait, lease, data, min_hold, max_hold, refresh)?;
        let semaphore = self.semaphore.clone();
        let runtime = self.runtime.clone();
        self.runtime.run(
            py,
            is_async,
            async move {
                if try_once {
                    semaphore.try_acquire(options).await
                } else {
                    semaphore.acquire(options).await.map(Some)
                }
            },
            move |py, result| match result {
                Ok(Some(permit)) => Ok(Py::new(py, Lock::permit(permit, runtime))?.into_any()),
                Ok(None) => Ok(py.None()),
                Err(error) => Err(errors::lock_error(py, error)),
            },
        )
    }
}

#[pymethods]
impl Semaphore {
    /// The semaphore's name.
    #[getter]
    fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// How many permits it has.
    #[getter]
    fn permits(&self) -> u32 {
        self.semaphore.permits()
    }

    /// Take a permit, waiting while all are held (`wait`: the most to wait,
    /// by default long enough to take over a crashed holder's permit; `0`
    /// for one poll; `math.inf` for no limit). Raises `AcquireTimeout` when
    /// it runs out. `lease`, `data`, `min_hold`, `max_hold` and `refresh` are
    /// as for `LockClient.acquire`.
    #[pyo3(signature = (*, wait=None, lease=None, data=None, min_hold=None, max_hold=None, refresh=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        wait: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
        max_hold: Option<&Bound<'_, PyAny>>,
        refresh: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.take(
            py, false, false, wait, lease, data, min_hold, max_hold, refresh,
        )
    }

    /// `acquire`, awaited.
    #[pyo3(signature = (*, wait=None, lease=None, data=None, min_hold=None, max_hold=None, refresh=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_async(
        &self,
        py: Python<'_>,
        wait: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
        max_hold: Option<&Bound<'_, PyAny>>,
        refresh: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.take(
            py, false, true, wait, lease, data, min_hold, max_hold, refresh,
        )
    }

    /// One poll: a permit if one is free (or its holder has been seen dead
    /// for its lease), otherwise `None`.
    #[pyo3(signature = (*, lease=None, data=None, min_hold=None, max_hold=None))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        lease: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
        max_hold: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.take(py, true, false, None, lease, data, min_hold, max_hold, None)
    }

    /// `try_acquire`, awaited.
    #[pyo3(signature = (*, lease=None, data=None, min_hold=None, max_hold=None))]
    fn try_acquire_async(
        &self,
        py: Python<'_>,
        lease: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
        max_hold: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.take(py, true, true, None, lease, data, min_hold, max_hold, None)
    }

    fn __repr__(&self) -> String {
        format!(
            "<Semaphore {} permits={}>",
            self.semaphore.name(),
            self.semaphore.permits()
        )
    }
}
