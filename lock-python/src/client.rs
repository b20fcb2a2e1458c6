//! `lease_lock._native.Client`: the Rust `LockClient` for the Python
//! `lease_lock.LockClient`, which gives it keyword arguments, `timedelta`s
//! and the `with` / `async with` forms. Every call here takes plain
//! arguments and an `is_async` flag: blocking (the GIL released) or an
//! asyncio awaitable.

use std::sync::Arc;

use futures_util::TryStreamExt;
use lock_core::{AcquireOptions, ElectionOptions, ListOptions, LockClient, LockError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::convert;
use crate::election::Election;
use crate::errors;
use crate::lock::Lock;
use crate::runtime::ProcessRuntime;
use crate::rw::RwLock;
use crate::semaphore::Semaphore;
use crate::stores;
use crate::values::lock_info;

/// A lock client on one store (see `lease_lock.LockClient`).
#[pyclass(module = "lease_lock._native", name = "Client", frozen)]
pub(crate) struct Client {
    client: Option<LockClient>,
    runtime: Arc<ProcessRuntime>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("owner", &self.client().owner())
            .finish()
    }
}

impl Client {
    fn client(&self) -> &LockClient {
        // Some until dropped.
        self.client.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl Client {
    /// `run` for calls that must not be cut short (closing: a shutdown
    /// stopped halfway would leave its releases undone and the client
    /// closed): Ctrl-C or a cancelled await stops the wait, not the call.
    fn run_to_end<T, F, C>(
        &self,
        py: Python<'_>,
        is_async: bool,
        future: F,
        convert: C,
    ) -> PyResult<Py<PyAny>>
    where
        T: Send + 'static,
        F: std::future::Future<Output = T> + Send + 'static,
        C: for<'a> FnOnce(Python<'a>, T) -> PyResult<Py<PyAny>> + Send + 'static,
    {
        let future = self.runtime.detached(future);
        self.runtime
            .run(py, is_async, future, move |py, output| match output {
                Some(output) => convert(py, output),
                None => Err(crate::errors::runtime_failed(
                    "the lock runtime stopped before the call ended",
                )),
            })
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (store, owner=None, lease=None, heartbeat=None, refresh=None, max_clock_drift=None, safety_margin=None, shutdown_timeout=None, heartbeat_rate_limit=None, max_clock_difference=None, use_store_clock=true, lock_delay=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        store: &Bound<'_, PyAny>,
        owner: Option<String>,
        lease: Option<f64>,
        heartbeat: Option<f64>,
        refresh: Option<f64>,
        max_clock_drift: Option<f64>,
        safety_margin: Option<f64>,
        shutdown_timeout: Option<f64>,
        heartbeat_rate_limit: Option<u32>,
        max_clock_difference: Option<f64>,
        use_store_clock: bool,
        lock_delay: Option<f64>,
    ) -> PyResult<Self> {
        let parts = stores::parts(py, store)?;
        let mut builder = LockClient::builder_shared(parts.store);
        if let Some(owner) = owner {
            builder = builder.owner(owner);
        }
        if let Some(lease) = convert::optional(py, "lease", lease)? {
            builder = builder.lease(lease);
        }
        if let Some(period) = convert::optional(py, "heartbeat", heartbeat)? {
            builder = builder.heartbeat_period(period);
        }
        if let Some(period) = convert::optional(py, "refresh", refresh)? {
            builder = builder.refresh_period(period);
        }
        if let Some(drift) = max_clock_drift {
            builder = builder.max_clock_drift(drift);
        }
        if let Some(margin) = convert::optional(py, "safety_margin", safety_margin)? {
            builder = builder.safety_margin(margin);
        }
        if let Some(timeout) = convert::optional(py, "shutdown_timeout", shutdown_timeout)? {
            builder = builder.shutdown_timeout(timeout);
        }
        if let Some(per_second) = heartbeat_rate_limit {
            builder = builder.heartbeat_rate_limit(per_second);
        }
        if let Some(bound) = convert::optional(py, "max_clock_difference", max_clock_difference)? {
            builder = builder.max_clock_difference(bound);
        }
        builder = builder.use_store_clock(use_store_clock);
        if let Some(delay) = convert::optional(py, "lock_delay", lock_delay)? {
            builder = builder.lock_delay(delay);
        }
        let client = {
            let _entered = parts.runtime.handle().enter();
            builder
                .build()
                .map_err(|error| errors::lock_error(py, error))?
        };
        Ok(Self {
            client: Some(client),
            runtime: parts.runtime,
        })
    }

    /// The owner name this client writes into its locks.
    #[getter]
    fn owner(&self) -> &str {
        self.client().owner()
    }

    /// The default lease, in seconds.
    #[getter]
    fn lease(&self) -> f64 {
        self.client().lease().as_secs_f64()
    }

    /// The heartbeat period, in seconds.
    #[getter]
    fn heartbeat(&self) -> f64 {
        self.client().heartbeat_period().as_secs_f64()
    }

    /// Acquire `key` (`try_once`: one attempt, `None` when busy).
    #[pyo3(signature = (key, sort_key, try_once, is_async, wait, lease, data, min_hold, max_hold, refresh, busy_unless_dead, only_if_exists, reentrant, delete_on_release, on_unsafe))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        key: String,
        sort_key: Option<String>,
        try_once: bool,
        is_async: bool,
        wait: Option<f64>,
        lease: Option<f64>,
        data: Option<Vec<u8>>,
        min_hold: Option<f64>,
        max_hold: Option<f64>,
        refresh: Option<f64>,
        busy_unless_dead: bool,
        only_if_exists: bool,
        reentrant: bool,
        delete_on_release: bool,
        on_unsafe: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let key = convert::key(key, sort_key);
        let options = convert::AcquireSettings {
            wait: convert::optional(py, "wait", wait)?,
            lease: convert::optional(py, "lease", lease)?,
            data,
            min_hold: convert::optional(py, "min_hold", min_hold)?,
            max_hold: convert::optional(py, "max_hold", max_hold)?,
            refresh: convert::optional(py, "refresh", refresh)?,
        }
        .apply(
            AcquireOptions::new()
                .busy_unless_dead(busy_unless_dead)
                .only_if_exists(only_if_exists)
                .reentrant(reentrant)
                .delete_on_release(delete_on_release),
        );
        let client = self.client().clone();
        let runtime = self.runtime.clone();
        self.runtime.run(
            py,
            is_async,
            async move {
                if try_once {
                    client.try_acquire(key, options).await
                } else {
                    client.acquire(key, options).await.map(Some)
                }
            },
            move |py, result| match result {
                Ok(Some(guard)) => {
                    let lock = Lock::new(guard, runtime);
                    if let Some(callback) = on_unsafe {
                        lock.on_unsafe(py, callback)?;
                    }
                    Ok(Py::new(py, lock)?.into_any())
                }
                Ok(None) => Ok(py.None()),
                Err(error) => Err(errors::lock_error(py, error)),
            },
        )
    }

    /// Campaign for leadership of `key`: an `Election` (see
    /// `lease_lock.LockClient.elect`).
    #[pyo3(signature = (key, sort_key, lease, data, retry_min, retry_max))]
    #[allow(clippy::too_many_arguments)]
    fn elect(
        &self,
        py: Python<'_>,
        key: String,
        sort_key: Option<String>,
        lease: Option<f64>,
        data: Option<Vec<u8>>,
        retry_min: Option<f64>,
        retry_max: Option<f64>,
    ) -> PyResult<Election> {
        self.runtime.pid().check(py)?;
        let key = convert::key(key, sort_key);
        let mut options = ElectionOptions::new();
        if let Some(lease) = convert::optional(py, "lease", lease)? {
            options = options.lease(lease);
        }
        if let Some(data) = data {
            options = options.data(data);
        }
        let retry_min = convert::optional(py, "retry_min", retry_min)?;
        let retry_max = convert::optional(py, "retry_max", retry_max)?;
        if retry_min.is_some() || retry_max.is_some() {
            let min = retry_min.unwrap_or(std::time::Duration::from_secs(1));
            let max = retry_max
                .unwrap_or(std::time::Duration::from_secs(30))
                .max(min);
            options = options.retry(min, max);
        }
        let election = {
            // The campaign runs on the package's runtime.
            let _entered = self.runtime.handle().enter();
            self.client().elect(key, options)
        }
        .map_err(|error| errors::lock_error(py, error))?;
        Ok(Election::new(
            election,
            self.client().owner().to_owned(),
            self.runtime.clone(),
        ))
    }

    /// A counting semaphore named `name` with `permits` permits.
    fn semaphore(&self, py: Python<'_>, name: String, permits: u32) -> PyResult<Semaphore> {
        self.runtime.pid().check(py)?;
        let semaphore = self
            .client()
            .semaphore(name, permits)
            .map_err(|error| errors::lock_error(py, error))?;
        Ok(Semaphore::new(semaphore, self.runtime.clone()))
    }

    /// A reader-writer lock named `name` with room for `max_readers`
    /// readers (see `lease_lock.LockClient.rw_lock`).
    fn rw_lock(&self, py: Python<'_>, name: String, max_readers: u32) -> PyResult<RwLock> {
        self.runtime.pid().check(py)?;
        let lock = self
            .client()
            .rw_lock(name, max_readers)
            .map_err(|error| errors::lock_error(py, error))?;
        Ok(RwLock::new(lock, self.runtime.clone()))
    }

    /// Acquire every key of `keys` (`(key, sort_key)` pairs) all or nothing:
    /// the held locks, one `Lock` each, in key order, and whether they were
    /// taken in one request (see `lease_lock.LockClient.acquire_all`).
    #[pyo3(signature = (keys, is_async, *, wait=None, lease=None, data=None, min_hold=None, max_hold=None, refresh=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_all(
        &self,
        py: Python<'_>,
        keys: Vec<(String, Option<String>)>,
        is_async: bool,
        wait: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
        max_hold: Option<&Bound<'_, PyAny>>,
        refresh: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.runtime.pid().check(py)?;
        let options = convert::settings(py, wait, lease, data, min_hold, max_hold, refresh)?;
        let keys: Vec<lock_core::LockKey> = keys
            .into_iter()
            .map(|(key, sort)| convert::key(key, sort))
            .collect();
        let client = self.client().clone();
        let runtime = self.runtime.clone();
        self.runtime.run(
            py,
            is_async,
            async move { client.acquire_all(keys, options).await },
            move |py, result| match result {
                Ok(group) => {
                    let at_once = group.taken_at_once();
                    let locks = group
                        .into_guards()
                        .into_iter()
                        .map(|guard| Py::new(py, Lock::new(guard, runtime.clone())))
                        .collect::<PyResult<Vec<_>>>()?;
                    let locks = PyList::new(py, locks)?;
                    Ok((locks, at_once).into_pyobject(py)?.into_any().unbind())
                }
                Err(error) => Err(errors::lock_error(py, error)),
            },
        )
    }

    /// The lock's record as stored (`LockInfo`), or `None`.
    #[pyo3(signature = (key, sort_key, is_async))]
    fn get_lock(
        &self,
        py: Python<'_>,
        key: String,
        sort_key: Option<String>,
        is_async: bool,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client().clone();
        let key = convert::key(key, sort_key);
        self.runtime.run(
            py,
            is_async,
            async move { client.get_lock(key).await },
            optional_info,
        )
    }

    /// Every lock in the store (or in one partition), as `LockInfo`s.
    #[pyo3(signature = (partition, is_async))]
    fn list_locks(
        &self,
        py: Python<'_>,
        partition: Option<String>,
        is_async: bool,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client().clone();
        let mut options = ListOptions::new();
        if let Some(partition) = partition {
            options = options.partition(partition);
        }
        self.runtime.run(
            py,
            is_async,
            async move { client.list_all(options).try_collect::<Vec<_>>().await },
            |py, result| {
                let locks = result.map_err(|error| errors::lock_error(py, error))?;
                let out = PyList::empty(py);
                for info in locks {
                    out.append(lock_info(py, info)?)?;
                }
                Ok(out.into_any().unbind())
            },
        )
    }

    /// Release `key` whoever holds it; the lock as it was, or `None`.
    #[pyo3(signature = (key, sort_key, is_async))]
    fn force_release(
        &self,
        py: Python<'_>,
        key: String,
        sort_key: Option<String>,
        is_async: bool,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client().clone();
        let key = convert::key(key, sort_key);
        self.runtime.run(
            py,
            is_async,
            async move { client.force_release(key).await },
            optional_info,
        )
    }

    /// Release `key` if its record still carries `version` (a `Lock`'s
    /// `version`, handed on by a process that detached it); the lock as it
    /// was. Raises `NotOwned` when the record has another version.
    #[pyo3(signature = (key, sort_key, version, is_async))]
    fn release_version(
        &self,
        py: Python<'_>,
        key: String,
        sort_key: Option<String>,
        version: String,
        is_async: bool,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client().clone();
        let key = convert::key(key, sort_key);
        let version = lock_core::Rvn::from_stored(version);
        self.runtime.run(
            py,
            is_async,
            async move { client.release_version(key, &version).await.map(Some) },
            optional_info,
        )
    }

    /// The keys this client holds, as `(key, sort_key)` pairs.
    fn held_keys(&self) -> Vec<(String, Option<String>)> {
        self.client()
            .held_keys()
            .into_iter()
            .map(|key| (key.partition().to_owned(), key.sort().map(str::to_owned)))
            .collect()
    }

    /// Stop heartbeats and release every held lock; returns a dict of the
    /// `(key, sort_key)` pairs `released`, `failed` (each with the error's
    /// message) and `timed_out`. Closing twice does nothing. Neither Ctrl-C
    /// nor a cancelled await stops the releases once started.
    #[pyo3(signature = (is_async))]
    fn close(&self, py: Python<'_>, is_async: bool) -> PyResult<Py<PyAny>> {
        let client = self.client().clone();
        if !is_async {
            crate::work::before_blocking_release(
                py,
                crate::work::Releasing::Owner(client.owner()),
                "LockClient.close()",
            )?;
        }
        self.run_to_end(
            py,
            is_async,
            async move { client.shutdown().await },
            |py, result| {
                let report = match result {
                    Ok(report) => report,
                    Err(LockError::Shutdown) => Default::default(),
                    Err(error) => return Err(errors::lock_error(py, error)),
                };
                let out = PyDict::new(py);
                let pair = |key: &lock_core::LockKey| {
                    (key.partition().to_owned(), key.sort().map(str::to_owned))
                };
                let names = |keys: &[lock_core::LockKey]| keys.iter().map(pair).collect::<Vec<_>>();
                out.set_item("released", names(&report.released))?;
                out.set_item(
                    "failed",
                    report
                        .failed
                        .iter()
                        .map(|(key, error)| (pair(key), errors::chain(error)))
                        .collect::<Vec<_>>(),
                )?;
                out.set_item("timed_out", names(&report.timed_out))?;
                Ok(out.into_any().unbind())
            },
        )
    }
}

/// A lock as stored (`LockInfo`), or `None`: what `get_lock` and
/// `force_release` return.
fn optional_info(
    py: Python<'_>,
    result: Result<Option<lock_core::LockInfo>, LockError>,
) -> PyResult<Py<PyAny>> {
    match result {
        Ok(Some(info)) => lock_info(py, info),
        Ok(None) => Ok(py.None()),
        Err(error) => Err(errors::lock_error(py, error)),
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if self.runtime.pid().is_current() {
            // Dropping the last handle waits for the releases still running:
            // on the runtime's worker, never on this thread, which holds the
            // GIL.
            self.runtime.handle().spawn(async move { drop(client) });
        } else {
            // A copy made by fork(): its locks are the parent's.
            std::mem::forget(client);
        }
    }
}
