//! `lease_lock.Election` and `lease_lock.Leadership`: a candidate in a leader
//! election (a `lock_core::Election`, campaigning on the runtime's threads)
//! and the leadership it wins.

use std::sync::{Arc, Mutex};

use lock_core::{ElectionWatcher, Role};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::classes;
use crate::errors;
use crate::runtime::{ProcessRuntime, within};
use crate::signals::{signal_awaitable, wait_lost};
use crate::values::bytes;

/// `Role(kind, fence, leader, data)` of `lease_lock._types`.
fn role(py: Python<'_>, role: &Role) -> PyResult<Py<PyAny>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let (kind, fence, leader, data) = match role {
        Role::Leader { fence, .. } => ("leader", Some(fence.0), None, None),
        Role::Follower {
            leader,
            fence,
            data,
        } => (
            "follower",
            Some(fence.0),
            Some(leader.clone()),
            data.clone(),
        ),
        _ => ("campaigning", None, None, None),
    };
    let data = bytes(py, data.as_deref());
    classes::construct(
        py,
        &MODULE,
        "lease_lock._types",
        "Role",
        PyTuple::empty(py),
        &[
            ("kind", classes::value(py, kind)?),
            ("fence", classes::value(py, fence)?),
            ("leader", classes::value(py, leader)?),
            ("data", data),
        ],
    )
    .map(Bound::unbind)
}

/// A candidate in a leader election, campaigning in the background from
/// `LockClient.elect` until `resign()`ed (or garbage collected, which ends
/// the campaign and releases the lock if it leads). Its `role` says where it
/// stands; `leadership()` waits until it leads.
#[pyclass(module = "lease_lock._native", name = "Election", frozen)]
pub(crate) struct Election {
    watcher: ElectionWatcher,
    election: Mutex<Option<lock_core::Election>>,
    /// Its client's owner name (the leader's, in the record).
    owner: String,
    runtime: Arc<ProcessRuntime>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("key", self.watcher.key())
            .finish_non_exhaustive()
    }
}

impl Election {
    pub(crate) fn new(
        election: lock_core::Election,
        owner: String,
        runtime: Arc<ProcessRuntime>,
    ) -> Self {
        Self {
            watcher: election.watcher(),
            election: Mutex::new(Some(election)),
            owner,
            runtime,
        }
    }

    fn take(&self) -> Option<lock_core::Election> {
        self.election
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }

    fn leadership_with(
        &self,
        py: Python<'_>,
        is_async: bool,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.runtime.pid().check(py)?;
        let limit = crate::convert::optional_seconds(py, "timeout", timeout)?;
        let watcher = self.watcher.clone();
        let runtime = self.runtime.clone();
        self.runtime.run(
            py,
            is_async,
            async move { within(limit, watcher.leadership()).await },
            move |py, result| match result {
                None => Ok(py.None()),
                Some(Ok(leadership)) => Ok(Py::new(
                    py,
                    Leadership {
                        leadership,
                        runtime,
                    },
                )?
                .into_any()),
                Some(Err(error)) => Err(errors::lock_error(py, error)),
            },
        )
    }

    fn role_change_with(
        &self,
        py: Python<'_>,
        is_async: bool,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.runtime.pid().check(py)?;
        let limit = crate::convert::optional_seconds(py, "timeout", timeout)?;
        // The role as it is now: a change from here on is what is awaited.
        let mut roles = self.watcher.watch();
        roles.borrow_and_update();
        self.runtime.run(
            py,
            is_async,
            async move {
                let change = async {
                    match roles.changed().await {
                        Ok(()) => Some(roles.borrow_and_update().clone()),
                        // The campaign is over: no further change.
                        Err(_) => std::future::pending().await,
                    }
                };
                within(limit, change).await.flatten()
            },
            |py, changed| match changed {
                Some(changed) => role(py, &changed),
                None => Ok(py.None()),
            },
        )
    }

    fn resign_with(&self, py: Python<'_>, is_async: bool) -> PyResult<Py<PyAny>> {
        self.runtime.pid().check(py)?;
        if !is_async {
            crate::work::before_blocking_release(
                py,
                crate::work::Releasing::Key {
                    owner: &self.owner,
                    key: self.watcher.key(),
                },
                "Election.resign()",
            )?;
        }
        let election = self.take();
        self.runtime.run(
            py,
            is_async,
            async move {
                match election {
                    Some(election) => election.resign().await,
                    None => Ok(()),
                }
            },
            errors::none_or_raise,
        )
    }
}

#[pymethods]
impl Election {
    /// The key campaigned for (the partition key).
    #[getter]
    fn key(&self) -> &str {
        self.watcher.key().partition()
    }

    /// The sort key, or `None`.
    #[getter]
    fn sort_key(&self) -> Option<&str> {
        self.watcher.key().sort()
    }

    /// Where this candidate stands now: a `Role`.
    #[getter]
    fn role(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        role(py, &self.watcher.role())
    }

    /// True while this candidate leads with a safe lease (checked now).
    #[getter]
    fn is_leader(&self) -> bool {
        self.watcher.is_leader()
    }

    /// How many times this candidate has been elected.
    #[getter]
    fn terms(&self) -> u64 {
        self.watcher.terms()
    }

    /// False once `resign()` was called.
    #[getter]
    fn campaigning(&self) -> bool {
        self.election
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_some()
    }

    /// Block until this candidate leads and return the `Leadership`, or
    /// `None` after `timeout` (seconds or `timedelta`; `None`: no limit).
    /// Raises `ClientClosed` once the client is closed.
    #[pyo3(signature = (timeout=None))]
    fn leadership(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.leadership_with(py, false, timeout)
    }

    /// `leadership`, awaited.
    #[pyo3(signature = (timeout=None))]
    fn leadership_async(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.leadership_with(py, true, timeout)
    }

    /// Block until the role changes and return the new `Role`, or `None`
    /// after `timeout` (seconds or `timedelta`; `None`: no limit).
    #[pyo3(signature = (timeout=None))]
    fn wait_role_change(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.role_change_with(py, false, timeout)
    }

    /// `wait_role_change`, awaited.
    #[pyo3(signature = (timeout=None))]
    fn wait_role_change_async(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.role_change_with(py, true, timeout)
    }

    /// Stop campaigning: a leader releases the lock (to the next candidate
    /// of this client in one write if one waits, otherwise for another
    /// process's next poll); a follower stops waiting. Resigning twice does
    /// nothing.
    fn resign(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.resign_with(py, false)
    }

    /// `resign`, awaited.
    fn resign_async(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.resign_with(py, true)
    }

    /// Wait until this candidate leads, then run the awaitable that
    /// `work(leadership)` returns, cancelling it as soon as the leadership can
    /// no longer be trusted (then `LockLost` is raised). The campaign goes on
    /// either way: call `lead` in a loop for work that runs in every term.
    fn lead<'py>(slf: &Bound<'py, Self>, work: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import("lease_lock._bridge")?
            .getattr("lead")?
            .call1((slf, work))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Resign on leaving a `with` block.
    /// Resign on leaving a `with` block. When the block raised, a failed
    /// resignation is logged with its traceback and the block's exception
    /// goes on.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let leaving = self.resign_with(py, false);
        let what = format!("resigning election {}", self.watcher.key());
        crate::errors::exit_rule(py, !exc_type.is_none(), leaving, &what)
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import("lease_lock._bridge")?
            .getattr("ready")?
            .call1((slf,))
    }

    /// Resign on leaving an `async with` block, with `__exit__`'s rule.
    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        exc_type: &Bound<'py, PyAny>,
        _exc: &Bound<'py, PyAny>,
        _tb: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let what = format!("resigning election {}", slf.get().watcher.key());
        let leaving = slf.get().resign_with(py, true)?;
        py.import("lease_lock._bridge")?
            .call_method1("at_exit", (leaving, !exc_type.is_none(), what))
    }

    fn __repr__(&self) -> String {
        let role = match self.watcher.role() {
            Role::Leader { fence, .. } => format!("leader fence={fence}"),
            Role::Follower { leader, fence, .. } => format!("following {leader} fence={fence}"),
            _ => "campaigning".to_owned(),
        };
        format!("<Election {} {role}>", self.watcher.key())
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        let election = self
            .election
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(election) = election else { return };
        if self.runtime.pid().is_current() {
            // Ends the campaign; a lock it leads is released by the client in
            // the background.
            self.runtime.handle().spawn(async move { drop(election) });
        } else {
            // A copy made by fork(): the campaign is the parent's.
            std::mem::forget(election);
        }
    }
}

/// A leadership won by an `Election`: its fence and lease. It does not keep
/// the lock (the election does); check `is_safe`, or wait on `lost()`,
/// before acting as leader.
#[pyclass(module = "lease_lock._native", name = "Leadership", frozen)]
pub(crate) struct Leadership {
    leadership: lock_core::Leadership,
    runtime: Arc<ProcessRuntime>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("fence", &self.leadership.fence())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// The key and fence a fenced write sends for this leadership: its
    /// lock's, as for a `Lock` of that key.
    pub(crate) fn fence_identity(&self) -> (lock_core::LockKey, lock_core::Fence) {
        (
            self.leadership.view().key().clone(),
            self.leadership.fence(),
        )
    }
}

#[pymethods]
impl Leadership {
    /// The lock's key (the partition key).
    #[getter]
    fn key(&self) -> &str {
        self.leadership.view().key().partition()
    }

    /// The sort key, or `None`.
    #[getter]
    fn sort_key(&self) -> Option<&str> {
        self.leadership.view().key().sort()
    }

    /// The fence of this leadership: higher than every earlier leader's.
    /// Send it with each write the leader makes.
    #[getter]
    fn fence(&self) -> u64 {
        self.leadership.fence().0
    }

    /// True while the leadership can be trusted (the lease is safe).
    #[getter]
    fn is_safe(&self) -> bool {
        self.leadership.is_safe()
    }

    /// Seconds of safe time left before the next heartbeat must land.
    #[getter]
    fn remaining(&self) -> f64 {
        self.leadership.view().remaining().as_secs_f64()
    }

    /// The data stored with the lock (`bytes`), or `None`.
    #[getter]
    fn data(&self, py: Python<'_>) -> Py<PyAny> {
        bytes(py, self.leadership.view().data().as_deref())
    }

    /// **Stop work on this.** An awaitable that resolves with a `LostReason`
    /// the moment the leadership can no longer be trusted: the lease is in
    /// danger or lost, or the candidate stepped down, resigned or was closed
    /// (kind `"released"`), before the release is written.
    fn until_unsafe<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        signal_awaitable(py, &self.runtime, self.leadership.until_unsafe())
    }

    /// Block until the leadership can no longer be trusted (as
    /// `until_unsafe()`) and return why, or return `None` after `timeout`
    /// (seconds or `timedelta`; `None`: no limit).
    #[pyo3(signature = (timeout=None))]
    fn wait_unsafe(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        wait_lost(py, &self.runtime, self.leadership.until_unsafe(), timeout)
    }

    /// An awaitable that resolves with a `LostReason` once the leadership's
    /// lease is over for good (stolen, expired, released). Do not stop work
    /// on this: `until_unsafe()` comes first.
    fn until_ended<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        signal_awaitable(py, &self.runtime, self.leadership.view().until_ended())
    }

    /// Block until the leadership's lease is over (as `until_ended()`), or
    /// return `None` after `timeout`.
    #[pyo3(signature = (timeout=None))]
    fn wait_ended(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        wait_lost(
            py,
            &self.runtime,
            self.leadership.view().until_ended(),
            timeout,
        )
    }

    /// Work under this leadership, open until `end()`: the step-down's
    /// release waits for it (`Election.lead` opens one).
    fn _begin_work(&self, py: Python<'_>) -> PyResult<crate::work::Work> {
        self.runtime.pid().check(py)?;
        Ok(crate::work::Work::begin(self.leadership.view()))
    }

    /// Deprecated name of `until_unsafe()` (the same moment).
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::work::deprecated(py, "Leadership.lost()", crate::work::USE_UNSAFE)?;
        self.until_unsafe(py)
    }

    /// Deprecated name of `wait_unsafe()` (the same moment).
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        crate::work::deprecated(py, "Leadership.wait_lost()", crate::work::USE_UNSAFE)?;
        self.wait_unsafe(py, timeout)
    }

    fn __repr__(&self) -> String {
        format!(
            "<Leadership {} fence={}>",
            self.leadership.view().key(),
            self.leadership.fence().0
        )
    }
}
