//! `lease_lock.Lock`: a held lock (a `LockGuard`), a semaphore's permit, or
//! a read or write of a reader-writer lock.

use std::sync::{Arc, Mutex, MutexGuard};

use lock_core::{
    Fence, LeaseState, LockGuard, LockKey, LockView, LostReason, Permit, ReadGuard,
    UpgradeableReadGuard, WriteGuard,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::classes;
use crate::errors;
use crate::runtime::ProcessRuntime;
use crate::signals::{signal_awaitable, wait_lost};
use crate::values::{bytes, lost_reason};

/// What a `Lock` holds: a lock, a permit of a semaphore (a lock on one of
/// its slots), or a read, upgradeable read or write of a reader-writer lock.
pub(crate) enum Holding {
    Lock(LockGuard),
    Permit(Permit),
    Read(ReadGuard),
    Upgradeable(UpgradeableReadGuard),
    Write(WriteGuard),
}

/// What a read of a reader-writer lock was admitted with: the writer fence
/// and the writer's data (what `fence` and `data` report for it), and the
/// write lock's key, which that fence goes with at a resource.
#[derive(Clone, Debug)]
pub(crate) struct Admitted {
    fence: Fence,
    writer_data: Option<Vec<u8>>,
    writer_key: LockKey,
}

/// A held lock. Returned by `LockClient.acquire` and `try_acquire` (and, for
/// a permit of a semaphore, `Semaphore.acquire`); released by
/// `release()`, by leaving a `with` block, or (in the background) when it is
/// garbage collected.
///
/// While held, heartbeats on the runtime's threads keep the lease alive,
/// whatever the Python threads are doing. Send `fence` with every write to
/// the resource the lock protects; check `is_safe` (or wait on `lost()`)
/// before acting under it.
#[pyclass(module = "lease_lock._native", name = "Lock", frozen, weakref)]
pub(crate) struct Lock {
    view: LockView,
    guard: Mutex<Option<Holding>>,
    /// A permit's slot (for a lock taken from a semaphore).
    permit_slot: Option<u32>,
    /// For a read of a reader-writer lock: what it was admitted with.
    read: Option<Admitted>,
    runtime: Arc<ProcessRuntime>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", self.view.key())
            .field("fence", &self.view.fence())
            .finish()
    }
}

impl Lock {
    /// The key and fence a fenced write sends for this lock: its own, or for
    /// a read of a reader-writer lock the write lock's key and the writer
    /// fence it was admitted with (the slot is a lock of its own, whose
    /// fences no writer of the lock presents), as the Rust API and `lockctl`
    /// name it.
    pub(crate) fn fence_identity(&self) -> (LockKey, Fence) {
        match &self.read {
            Some(read) => (read.writer_key.clone(), read.fence),
            None => (self.view.key().clone(), self.view.fence()),
        }
    }

    pub(crate) fn new(guard: LockGuard, runtime: Arc<ProcessRuntime>) -> Self {
        Self {
            view: guard.view(),
            guard: Mutex::new(Some(Holding::Lock(guard))),
            permit_slot: None,
            read: None,
            runtime,
        }
    }

    /// A read (or upgradeable read) of a reader-writer lock, held: its
    /// view is its reader slot's, its fence and data the writer's.
    pub(crate) fn read(holding: Holding, runtime: Arc<ProcessRuntime>) -> Option<Self> {
        let (view, slot) = match &holding {
            Holding::Read(read) => (read.view(), read.slot_index()),
            Holding::Upgradeable(read) => (read.view(), read.slot_index()),
            _ => return None,
        };
        Some(Self {
            view: view.slot().clone(),
            guard: Mutex::new(Some(holding)),
            permit_slot: Some(slot),
            read: Some(Admitted {
                fence: view.fence(),
                writer_data: view.writer_data(),
                writer_key: view.writer_key().clone(),
            }),
            runtime,
        })
    }

    /// A write of a reader-writer lock, held: its view is the write lock's.
    pub(crate) fn write(write: WriteGuard, runtime: Arc<ProcessRuntime>) -> Self {
        Self {
            view: write.view(),
            guard: Mutex::new(Some(Holding::Write(write))),
            permit_slot: None,
            read: None,
            runtime,
        }
    }

    /// A permit of a semaphore, held.
    pub(crate) fn permit(permit: Permit, runtime: Arc<ProcessRuntime>) -> Self {
        Self {
            view: (*permit).clone(),
            permit_slot: Some(permit.slot()),
            guard: Mutex::new(Some(Holding::Permit(permit))),
            read: None,
            runtime,
        }
    }

    /// Not released (nor detached) by this process: the guard is here and
    /// the lock was not let go behind it (a client's close releases it too).
    fn is_held(&self) -> bool {
        self.holding().is_some()
            && !matches!(
                self.view.state(),
                LeaseState::Lost {
                    reason: LostReason::Released
                }
            )
    }

    fn holding(&self) -> MutexGuard<'_, Option<Holding>> {
        self.guard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The guard, taken out to be released; `None` once released.
    fn take(&self, py: Python<'_>) -> PyResult<Option<Holding>> {
        self.runtime.pid().check(py)?;
        Ok(self.holding().take())
    }
}

impl Lock {
    /// Call `callback(reason)` on the package's callback thread as soon as the
    /// lease can no longer be trusted (as `until_unsafe()`; not when this
    /// process releases it).
    /// Exceptions it raises are logged to the `lease_lock` logger.
    pub(crate) fn on_unsafe(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<()> {
        self.runtime.pid().check(py)?;
        let lost = self.view.until_unsafe();
        self.runtime.handle().spawn(async move {
            let reason = lost.await;
            if reason != LostReason::Released {
                crate::events::call_on_unsafe(callback, reason);
            }
            // Otherwise dropped here without the GIL: PyO3 defers the
            // reference count to the next thread that holds it.
        });
        Ok(())
    }

    fn write_data(
        &self,
        py: Python<'_>,
        data: Option<&Bound<'_, PyAny>>,
        is_async: bool,
    ) -> PyResult<Py<PyAny>> {
        let data = crate::convert::data(data)?;
        self.runtime.pid().check(py)?;
        if self.read.is_some() {
            return Err(errors::invalid_input(
                py,
                "set_data on a read of a reader-writer lock: its data is the last writer's; write it under a write (or leave it with release(data=...) of the write)",
            ));
        }
        let view = self.view.clone();
        self.runtime.run(
            py,
            is_async,
            async move {
                match data {
                    Some(data) => view.set_data(data).await,
                    None => view.clear_data().await,
                }
            },
            errors::none_or_raise,
        )
    }

    fn leave(
        &self,
        py: Python<'_>,
        data: Option<&Bound<'_, PyAny>>,
        delete: bool,
        is_async: bool,
    ) -> PyResult<Py<PyAny>> {
        let data = crate::convert::data(data)?;
        if is_async {
            // Outside an event loop the awaitable could not be made: refuse
            // before the lock is taken out of this object (and released).
            py.import("asyncio")?.call_method0("get_running_loop")?;
        }
        if data.is_some() && delete {
            return Err(errors::invalid_input(
                py,
                "release(data=..., delete=True) deletes the record the data would be stored in: pass one of them",
            ));
        }
        if delete && self.is_reader_writer() {
            return Err(errors::invalid_input(
                py,
                "release(delete=True) on a read or write of a reader-writer lock: its records are kept (the writer fences live in them); release it without delete",
            ));
        }
        if data.is_some() && self.read.is_some() {
            return Err(errors::invalid_input(
                py,
                "release(data=...) on a read of a reader-writer lock: a reader leaves no data; a writer does, with release(data=...) of its write",
            ));
        }
        if delete && self.permit_slot.is_some() {
            return Err(errors::invalid_input(
                py,
                "release(delete=True) on a semaphore's permit: its slot keeps its record (the permit count is in it); release it without delete",
            ));
        }
        if !is_async {
            crate::work::before_blocking_release(
                py,
                crate::work::Releasing::Lock(&self.view),
                "Lock.release()",
            )?;
        }
        let Some(holding) = self.take(py)? else {
            return self
                .runtime
                .run(py, is_async, async { Ok(()) }, errors::none_or_raise);
        };
        self.runtime.run(
            py,
            is_async,
            async move {
                match (holding, data, delete) {
                    (Holding::Lock(guard), Some(data), _) => guard.release_with_data(data).await,
                    (Holding::Lock(guard), None, true) => guard.release_and_delete().await,
                    (Holding::Lock(guard), None, false) => guard.release().await,
                    (Holding::Permit(permit), Some(data), _) => {
                        permit.release_with_data(data).await
                    }
                    (Holding::Permit(permit), None, _) => permit.release().await,
                    (Holding::Write(write), Some(data), _) => write.release_with_data(data).await,
                    (Holding::Write(write), None, _) => write.release().await,
                    (Holding::Read(read), _, _) => read.release().await,
                    (Holding::Upgradeable(read), _, _) => read.release().await,
                }
            },
            errors::none_or_raise,
        )
    }
}

impl Lock {
    /// A read, upgradeable read or write of a reader-writer lock (held or
    /// not: what it was made as).
    fn is_reader_writer(&self) -> bool {
        self.read.is_some()
            || matches!(
                *self.holding(),
                Some(Holding::Write(_) | Holding::Read(_) | Holding::Upgradeable(_))
            )
    }

    /// Upgrade an upgradeable read to a write: the write as a new `Lock`;
    /// this one then reads as released (the write holds the read until it
    /// is released). On failure the read is put back here, still held.
    fn upgrade_with(
        slf: &Bound<'_, Self>,
        options: lock_core::AcquireOptions,
        is_async: bool,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let this = slf.get();
        this.runtime.pid().check(py)?;
        let taken = {
            let mut holding = this.holding();
            match holding.take() {
                Some(Holding::Upgradeable(read)) => Ok(read),
                other => {
                    *holding = other;
                    Err(())
                }
            }
        };
        let Ok(read) = taken else {
            return Err(errors::invalid_input(
                py,
                "upgrade() is for a held upgradeable read (RwLock.upgradeable_read); this lock is not one, or was released or upgraded already",
            ));
        };
        let runtime = this.runtime.clone();
        let upgrading = slf.clone().unbind();
        this.runtime.run(
            py,
            is_async,
            async move { read.upgrade(options).await },
            move |py, result| match result {
                Ok(write) => Ok(Py::new(py, Lock::write(write, runtime))?.into_any()),
                Err(failed) => {
                    *upgrading.get().holding() = Some(Holding::Upgradeable(failed.guard));
                    Err(errors::lock_error(py, failed.error))
                }
            },
        )
    }

    fn detach_with(&self, py: Python<'_>, is_async: bool) -> PyResult<Py<PyAny>> {
        if self.is_reader_writer() {
            return Err(errors::invalid_input(
                py,
                "detach() on a read or write of a reader-writer lock: it cannot be handed on; release it",
            ));
        }
        if !is_async {
            crate::work::before_blocking_release(
                py,
                crate::work::Releasing::Lock(&self.view),
                "Lock.detach()",
            )?;
        }
        let Some(guard) = self.take(py)? else {
            return Err(errors::invalid_input(
                py,
                "the lock was released or detached already: there is nothing to detach",
            ));
        };
        self.runtime.run(
            py,
            is_async,
            async move {
                match guard {
                    Holding::Lock(guard) => guard.detach().await,
                    Holding::Permit(permit) => permit.detach().await,
                    // Refused above, before the guard was taken out.
                    Holding::Read(_) | Holding::Upgradeable(_) | Holding::Write(_) => {
                        Err(lock_core::LockError::InvalidInput {
                            reason: "a read or write of a reader-writer lock cannot be detached"
                                .into(),
                            source: None,
                        })
                    }
                }
            },
            |py, result| {
                result
                    .map(|detached| classes::value(py, detached.version().as_str()))
                    .map_err(|error| errors::lock_error(py, error))?
            },
        )
    }
}

#[pymethods]
impl Lock {
    /// The lock's key (the partition key).
    #[getter]
    fn key(&self) -> &str {
        self.view.key().partition()
    }

    /// The sort key, for locks stored under one; otherwise `None`.
    #[getter]
    fn sort_key(&self) -> Option<&str> {
        self.view.key().sort()
    }

    /// The owner name written in the record (the client's).
    #[getter]
    fn owner(&self) -> &str {
        self.view.owner()
    }

    /// The fencing token of this acquisition: higher than every earlier
    /// holder's. Send it with each write to the protected resource and have the
    /// resource refuse writes with a lower one.
    ///
    /// For a read of a reader-writer lock: the writer fence it was admitted
    /// with (the last writer's); present it with every read of the resource.
    #[getter]
    fn fence(&self) -> u64 {
        match &self.read {
            Some(read) => read.fence.0,
            None => self.view.fence().0,
        }
    }

    /// The record version of the latest write this client saw confirmed (a
    /// string that changes with every heartbeat): what
    /// `LockClient.release_version` needs once the lock is detached.
    #[getter]
    fn version(&self) -> String {
        self.view.version().as_str().to_owned()
    }

    /// The lease this lock was acquired with, in seconds.
    #[getter]
    fn lease(&self) -> f64 {
        self.view.lease().as_secs_f64()
    }

    /// Seconds of safe time left before the next heartbeat must land (0 once
    /// the lease can no longer be trusted).
    #[getter]
    fn remaining(&self) -> f64 {
        self.view.remaining().as_secs_f64()
    }

    /// True while the lease is safe to act under.
    #[getter]
    fn is_safe(&self) -> bool {
        self.view.is_safe()
    }

    /// `LeaseState.SAFE`, `LeaseState.IN_DANGER` (stop starting work) or
    /// `LeaseState.LOST` (see `lost_reason`).
    #[getter]
    fn state(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let name = match self.view.state() {
            LeaseState::Safe { .. } => "SAFE",
            LeaseState::InDanger { .. } => "IN_DANGER",
            _ => "LOST",
        };
        static STATES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let states = STATES.import(py, "lease_lock._types", "LeaseState")?;
        Ok(states.getattr(name)?.unbind())
    }

    /// Why the lease can no longer be trusted, or `None` while it can.
    #[getter]
    fn lost_reason(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match self.view.state() {
            LeaseState::Lost { reason } => lost_reason(py, &reason).map(Some),
            _ => Ok(None),
        }
    }

    /// The data stored with the lock (`bytes`), or `None`. For a read of a
    /// reader-writer lock: what the write lock's record held when it was
    /// admitted (what the last writer left).
    #[getter]
    fn data(&self, py: Python<'_>) -> Py<PyAny> {
        match &self.read {
            Some(read) => bytes(py, read.writer_data.as_deref()),
            None => bytes(py, self.view.data().as_deref()),
        }
    }

    /// When this acquire took over a holder that stopped heartbeating (a
    /// crash): what that holder left (`Takeover`); otherwise `None`.
    #[getter]
    fn took_over(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.view
            .took_over()
            .map(|takeover| crate::values::takeover(py, takeover))
            .transpose()
    }

    /// For a permit of a semaphore or a read of a reader-writer lock, its
    /// slot (from 0); `None` for a lock or a write.
    #[getter]
    fn slot(&self) -> Option<u32> {
        self.permit_slot
    }

    /// False once the lock was released: by `release()`, by leaving its
    /// `with` block, or by `LockClient.close()` (or detached).
    #[getter]
    fn held(&self) -> bool {
        self.is_held()
    }

    /// Replace the data stored with the lock (one conditional write), or
    /// clear it with `None`.
    fn set_data(&self, py: Python<'_>, data: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        self.write_data(py, data, false)
    }

    /// `set_data`, awaited.
    fn set_data_async(
        &self,
        py: Python<'_>,
        data: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.write_data(py, data, true)
    }

    /// Release the lock (one conditional write); with `data`, store it in the
    /// released record for the next holder; with `delete=True`, delete the
    /// record instead. Releasing twice does nothing. Raises `LockLost` if
    /// another writer had taken the lock (a lease that merely ran out, with
    /// nobody else writing, is released without an error: check `is_safe` or
    /// `until_unsafe()` to know whether the lease held throughout). The lock
    /// reads as released from the moment this is called, before the write.
    #[pyo3(signature = (*, data=None, delete=false))]
    fn release(
        &self,
        py: Python<'_>,
        data: Option<&Bound<'_, PyAny>>,
        delete: bool,
    ) -> PyResult<Py<PyAny>> {
        self.leave(py, data, delete, false)
    }

    /// `release`, awaited.
    #[pyo3(signature = (*, data=None, delete=false))]
    fn release_async(
        &self,
        py: Python<'_>,
        data: Option<&Bound<'_, PyAny>>,
        delete: bool,
    ) -> PyResult<Py<PyAny>> {
        self.leave(py, data, delete, true)
    }

    /// Stop heartbeating the lock without releasing it; returns its `version`.
    /// The lock stays held in the store until its lease runs out (then
    /// others take it over) or until `LockClient.release_version` releases
    /// it, from this process or one it was handed on to. Waits for a
    /// heartbeat in flight, so the version is the one the store keeps.
    /// Raises `LockLost` if the lease was already lost.
    fn detach(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.detach_with(py, false)
    }

    /// `detach`, awaited.
    fn detach_async(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.detach_with(py, true)
    }

    /// For an upgradeable read of a reader-writer lock: become the writer.
    /// Takes the write lock (new readers now wait), then waits for the other
    /// readers to leave, within `wait` (as for `RwLock.write`); returns the
    /// write as a new `Lock` (its fence is the writer fence), which holds
    /// this read until it is released. On failure (`AcquireTimeout`...) the
    /// read stays held here.
    #[pyo3(signature = (*, wait=None, lease=None, data=None, min_hold=None, max_hold=None, refresh=None))]
    #[allow(clippy::too_many_arguments)]
    fn upgrade(
        slf: &Bound<'_, Self>,
        wait: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
        max_hold: Option<&Bound<'_, PyAny>>,
        refresh: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let options =
            crate::convert::settings(slf.py(), wait, lease, data, min_hold, max_hold, refresh)?;
        Self::upgrade_with(slf, options, false)
    }

    /// `upgrade`, awaited.
    #[pyo3(signature = (*, wait=None, lease=None, data=None, min_hold=None, max_hold=None, refresh=None))]
    #[allow(clippy::too_many_arguments)]
    fn upgrade_async(
        slf: &Bound<'_, Self>,
        wait: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
        max_hold: Option<&Bound<'_, PyAny>>,
        refresh: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let options =
            crate::convert::settings(slf.py(), wait, lease, data, min_hold, max_hold, refresh)?;
        Self::upgrade_with(slf, options, true)
    }

    /// **Stop work on this.** Run the awaitable `work` and return its result,
    /// cancelling it the moment the lease is no longer safe (in danger, lost,
    /// or released: `until_unsafe()`), then raising `LockLost`. A release of
    /// the lock meanwhile (from another thread, or `close()`) waits until the
    /// cancelled work has finished unwinding before it writes.
    fn run_while_safe<'py>(
        slf: &Bound<'py, Self>,
        work: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import("lease_lock._bridge")?
            .getattr("run_while_safe")?
            .call1((slf, work))
    }

    /// Deprecated name of `run_while_safe` (the same behaviour).
    fn run_until_lost<'py>(
        slf: &Bound<'py, Self>,
        work: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::work::deprecated(
            slf.py(),
            "Lock.run_until_lost()",
            "it is run_while_safe() under its old name",
        )?;
        Self::run_while_safe(slf, work)
    }

    /// Work under this lock, open until `end()`: a release waits for it (see
    /// `run_while_safe`, which opens one).
    fn _begin_work(&self, py: Python<'_>) -> PyResult<crate::work::Work> {
        self.runtime.pid().check(py)?;
        Ok(crate::work::Work::begin(&self.view))
    }

    /// **Stop work on this.** An awaitable that resolves with a `LostReason`
    /// the moment the lease is no longer safe: in danger (no heartbeat
    /// confirmed within the safe time: kind `"in_danger"`, even if a later
    /// heartbeat lands), lost (stolen, expired, max hold) or released (from
    /// the instant the release begins, before it is written). Rust's
    /// `LockView::until_unsafe` is the same moment.
    fn until_unsafe<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        signal_awaitable(py, &self.runtime, self.view.until_unsafe())
    }

    /// Block until the lease is no longer safe (as `until_unsafe()`) and
    /// return why, or return `None` after `timeout` (seconds or `timedelta`;
    /// `None`: no limit).
    #[pyo3(signature = (timeout=None))]
    fn wait_unsafe(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        wait_lost(py, &self.runtime, self.view.until_unsafe(), timeout)
    }

    /// An awaitable that resolves with a `LostReason` once the lease is over
    /// for good: stolen, expired, past its max hold, or released (from the
    /// instant the release begins). Later than `until_unsafe()` when the lease
    /// goes in danger first, when another process may already take over: do
    /// not stop work on this. Rust's `LockView::until_ended` is the same moment.
    fn until_ended<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        signal_awaitable(py, &self.runtime, self.view.until_ended())
    }

    /// Block until the lease is over (as `until_ended()`) and return why, or
    /// return `None` after `timeout` (seconds or `timedelta`; `None`: no
    /// limit).
    #[pyo3(signature = (timeout=None))]
    fn wait_ended(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        wait_lost(py, &self.runtime, self.view.until_ended(), timeout)
    }

    /// Deprecated name of `until_unsafe()`: resolves the moment the lease is
    /// no longer safe (in danger, lost or released), not when it has ended.
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::work::deprecated(py, "Lock.lost()", crate::work::USE_UNSAFE)?;
        self.until_unsafe(py)
    }

    /// Deprecated name of `wait_unsafe()`: returns the moment the lease is
    /// no longer safe (in danger, lost or released), not when it has ended.
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        crate::work::deprecated(py, "Lock.wait_lost()", crate::work::USE_UNSAFE)?;
        self.wait_unsafe(py, timeout)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Release on leaving a `with` block. When the block raised, a failed
    /// release is logged and the block's exception goes on.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let leaving = self.leave(py, None, false, false);
        let what = format!("releasing lock {}", self.view.key());
        errors::exit_rule(py, !exc_type.is_none(), leaving, &what)
    }

    /// `async with lock:` (on a lock already acquired, as `async with await
    /// client.acquire_async(key)`): nothing to do on entry.
    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("lease_lock._bridge")?
            .call_method1("ready", (slf,))
    }

    /// Release on leaving an `async with` block, awaited. When the block
    /// raised, a failed release is logged with its traceback and the block's
    /// exception goes on.
    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        exc_type: &Bound<'py, PyAny>,
        _exc: &Bound<'py, PyAny>,
        _tb: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let what = format!("releasing lock {}", slf.get().view.key());
        let leaving = slf.call_method0("release_async")?;
        slf.py()
            .import("lease_lock._bridge")?
            .call_method1("at_exit", (leaving, !exc_type.is_none(), what))
    }

    fn __repr__(&self) -> String {
        format!(
            "<Lock {} fence={} {}>",
            self.view.key(),
            self.view.fence().0,
            if self.is_held() { "held" } else { "released" }
        )
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let guard = self
            .guard
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(guard) = guard else { return };
        if self.runtime.pid().is_current() {
            // Dropped on the runtime: the guard's drop starts its release
            // there, and if it is the client's last handle, the wait for the
            // releases it does happens on the worker, never on this thread,
            // which holds the GIL.
            self.runtime.handle().spawn(async move { drop(guard) });
        } else {
            // A copy made by fork(): the parent holds and releases it.
            std::mem::forget(guard);
        }
    }
}
