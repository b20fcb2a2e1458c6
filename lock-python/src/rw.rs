//! `lease_lock.RwLock`: a reader-writer lock (a `lock_core::RwLock`) whose
//! reads and writes are `lease_lock.Lock`s.

use std::sync::Arc;

use lock_core::AcquireOptions;
use pyo3::prelude::*;

use crate::errors;
use crate::lock::{Holding, Lock};
use crate::runtime::ProcessRuntime;

/// A reader-writer lock: many readers or one writer. Made by
/// `LockClient.rw_lock(name, max_readers)`; every client must use the same
/// count. `read`, `write` and `upgradeable_read` return `Lock`s (`with`
/// blocks, `is_safe`, `until_unsafe()`, `run_while_safe`); a read's `fence`
/// is the writer fence it was admitted with, a write's the new writer fence.
#[pyclass(module = "lease_lock._native", name = "RwLock", frozen)]
pub(crate) struct RwLock {
    lock: lock_core::RwLock,
    runtime: Arc<ProcessRuntime>,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.lock.name())
            .field("max_readers", &self.lock.max_readers())
            .finish()
    }
}

/// What is asked of the lock.
#[derive(Clone, Copy)]
enum Mode {
    Read,
    Upgradeable,
    Write,
}

impl RwLock {
    pub(crate) fn new(lock: lock_core::RwLock, runtime: Arc<ProcessRuntime>) -> Self {
        Self { lock, runtime }
    }

    fn take(
        &self,
        py: Python<'_>,
        mode: Mode,
        try_once: bool,
        is_async: bool,
        options: AcquireOptions,
    ) -> PyResult<Py<PyAny>> {
        self.runtime.pid().check(py)?;
        let lock = self.lock.clone();
        let runtime = self.runtime.clone();
        self.runtime.run(
            py,
            is_async,
            async move {
                let taken = match (mode, try_once) {
                    (Mode::Read, true) => lock.try_read(options).await?.map(Holding::Read),
                    (Mode::Read, false) => Some(Holding::Read(lock.read(options).await?)),
                    (Mode::Upgradeable, true) => lock
                        .try_upgradeable_read(options)
                        .await?
                        .map(Holding::Upgradeable),
                    (Mode::Upgradeable, false) => {
                        Some(Holding::Upgradeable(lock.upgradeable_read(options).await?))
                    }
                    (Mode::Write, true) => lock.try_write(options).await?.map(Holding::Write),
                    (Mode::Write, false) => Some(Holding::Write(lock.write(options).await?)),
                };
                Ok(taken)
            },
            move |py, result| match result {
                Ok(Some(Holding::Write(write))) => {
                    Ok(Py::new(py, Lock::write(write, runtime))?.into_any())
                }
                Ok(Some(holding)) => match Lock::read(holding, runtime) {
                    Some(read) => Ok(Py::new(py, read)?.into_any()),
                    None => Ok(py.None()),
                },
                Ok(None) => Ok(py.None()),
                Err(error) => Err(errors::lock_error(py, error)),
            },
        )
    }
}

#[pymethods]
impl RwLock {
    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        self.lock.name()
    }

    /// How many readers it has room for.
    #[getter]
    fn max_readers(&self) -> u32 {
        self.lock.max_readers()
    }

    /// Read (`try_once`: one attempt, `None` when a writer holds or waits
    /// for the lock, or every reader slot is taken); awaitable with
    /// `is_async`.
    #[pyo3(signature = (mode, try_once, is_async, *, wait=None, lease=None, data=None, min_hold=None, max_hold=None, refresh=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        mode: &str,
        try_once: bool,
        is_async: bool,
        wait: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
        max_hold: Option<&Bound<'_, PyAny>>,
        refresh: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let mode = match mode {
            "read" => Mode::Read,
            "upgradeable" => Mode::Upgradeable,
            "write" => Mode::Write,
            other => {
                return Err(errors::invalid_input(
                    py,
                    format!("mode must be read, upgradeable or write, not {other}"),
                ));
            }
        };
        let options = crate::convert::settings(py, wait, lease, data, min_hold, max_hold, refresh)?;
        self.take(py, mode, try_once, is_async, options)
    }

    fn __repr__(&self) -> String {
        format!(
            "<RwLock {} max_readers={}>",
            self.lock.name(),
            self.lock.max_readers()
        )
    }
}
