//! [`LockGuard`], the proof of holding a lock, and [`LockView`], a cheap handle
//! to the same acquisition (its state, its data).

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::held::Held;
use crate::leaving::Leaving;
use crate::shared::Shared;
use crate::{DetachedLock, Fence, LeaseState, LockError, LockKey, LostReason, Rvn, Takeover};

/// A cheap, clonable handle to a held lock, to read its state and update its
/// data: what
/// [`with_lock`](crate::LockClient::with_lock) hands its closure, and what a
/// [`LockGuard`] derefs to.
#[derive(Clone, Debug)]
pub struct LockView {
    pub(crate) inner: Arc<Shared>,
    pub(crate) held: Arc<Held>,
}

impl LockView {
    /// The lock's key.
    pub fn key(&self) -> &LockKey {
        &self.held.key
    }

    /// The fencing token of this acquisition: pass it to the resource you protect.
    pub fn fence(&self) -> Fence {
        self.held.fence
    }

    /// The lease this lock was acquired with: the client's, or the acquire's
    /// own ([`AcquireOptions::lease`](crate::AcquireOptions::lease)).
    pub fn lease(&self) -> Duration {
        self.held.timing.lease
    }

    /// This lock's timing (its lease, the drift bound and its safety margin),
    /// from which [`Timing::safe_time`](crate::Timing::safe_time) follows: plan
    /// work that must finish under the lock from this, not from the client's.
    pub fn timing(&self) -> crate::Timing {
        self.held.timing
    }

    /// How often this lock is heartbeaten.
    pub fn heartbeat_period(&self) -> Duration {
        self.held.heartbeat_period
    }

    /// The record version (RVN) of the latest write this client saw confirmed:
    /// it changes with every heartbeat. A waiter in another process sees the
    /// lock alive as long as it keeps changing; a record still carrying it can
    /// be released by [`LockClient::release_version`](crate::LockClient::release_version).
    pub fn version(&self) -> Rvn {
        self.held.state().rvn.clone()
    }

    /// This client's owner name, as written in the record.
    pub fn owner(&self) -> &str {
        &self.inner.config.owner
    }

    /// The data stored with the lock: as the acquire found or wrote it, then as
    /// this client last wrote it.
    pub fn data(&self) -> Option<Vec<u8>> {
        self.held.state().data.clone()
    }

    /// Replace the data stored with the lock. One conditional write, which also
    /// extends the lease. Works from any handle of the acquisition, including
    /// the [`LockView`] that [`with_lock`](crate::LockClient::with_lock) hands
    /// its work.
    pub async fn set_data(&self, data: impl Into<Vec<u8>>) -> Result<(), LockError> {
        self.inner.set_data(&self.held, Some(data.into())).await
    }

    /// Remove the data stored with the lock (one conditional write, which also
    /// extends the lease).
    pub async fn clear_data(&self) -> Result<(), LockError> {
        self.inner.set_data(&self.held, None).await
    }

    /// The expired lock this acquisition took over (its owner, fence and data),
    /// or `None` when the lock was vacant, released or handed over by another
    /// task of this client. A takeover means the previous holder stopped
    /// heartbeating without releasing (crashed, hung, partitioned): its work may
    /// be half done, so this is where crash recovery starts.
    pub fn took_over(&self) -> Option<&Takeover> {
        self.held.took_over.as_ref()
    }

    /// How far the lease can be trusted now.
    pub fn state(&self) -> LeaseState {
        self.held.lease_state(self.inner.clock.now())
    }

    /// True while the lease is safe.
    pub fn is_safe(&self) -> bool {
        self.state().is_safe()
    }

    /// Safe time left (zero once in danger or lost). Heartbeats extend it.
    pub fn remaining(&self) -> Duration {
        match self.state() {
            LeaseState::Safe { remaining } => remaining,
            _ => Duration::ZERO,
        }
    }

    /// **Stop work on this.** A future that resolves the moment the lease can
    /// no longer be trusted: in danger (no heartbeat confirmed within the safe
    /// time: [`LostReason::InDanger`]), lost (stolen, expired, past its max
    /// hold), or released, from the instant the release begins, before its
    /// write is sent ([`LostReason::Released`]). Work that acts under the lock
    /// `select!`s on this; it does not borrow the guard. Python's
    /// `Lock.until_unsafe()` is the same moment.
    pub fn until_unsafe(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let view = self.clone();
        async move {
            view.held
                .until(view.inner.clock.as_ref(), crate::held::Until::Unsafe)
                .await
        }
    }

    /// A future that resolves once the lease has ended for good: stolen (seen
    /// by a heartbeat or a write), expired (no heartbeat confirmed within the
    /// lease), past its max hold, or released (from the instant the release
    /// begins). Later than [`until_unsafe`](Self::until_unsafe) when the lease
    /// goes in danger first: by then another process may already take over,
    /// so do not stop work on this; use it to learn that the lock is gone.
    /// Python's `Lock.until_ended()` is the same moment.
    pub fn until_ended(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let view = self.clone();
        async move {
            view.held
                .until(view.inner.clock.as_ref(), crate::held::Until::Ended)
                .await
        }
    }

    /// The old name of [`until_ended`](Self::until_ended): resolves once the
    /// lease has *ended* (stolen, expired, released, past its max hold), not
    /// when it stops being safe. Work must stop on
    /// [`until_unsafe`](Self::until_unsafe) instead, which fires first.
    #[deprecated(
        note = "`lost()` resolves when the lease has ended, later than work may safely run: \
                stop work on `until_unsafe()`; for the same moment as before use `until_ended()`"
    )]
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.until_ended()
    }

    /// Mark work as running under this lock until the returned value is
    /// dropped. A release of the lock (by any guard, a dropped guard,
    /// [`LockClient::shutdown`](crate::LockClient::shutdown), a hand-off, an
    /// election's step-down) makes the lock read as unsafe at once, which the
    /// work should watch ([`until_unsafe`](Self::until_unsafe)), then waits
    /// for every `WorkInProgress` to be dropped, at most until the lease
    /// ends, before it writes anything that could let another holder in.
    /// [`with_lock`](crate::LockClient::with_lock) and
    /// [`Election::lead`](crate::Election::lead) hold one for their work;
    /// hold one yourself for work you run beside a guard, in another task
    /// that drops it when [`until_unsafe`](Self::until_unsafe) fires.
    ///
    /// Drop it before releasing the lock yourself: a release awaited while
    /// the same task still holds a `WorkInProgress` of that lock waits for
    /// the lease to end (and logs a warning), since the work it waits for
    /// cannot end meanwhile.
    ///
    /// ```
    /// # use lock_core::{AcquireOptions, LockClient};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// # let client = LockClient::builder(lock_memory::MemoryStore::new()).build()?;
    /// let guard = client.acquire("reindex", AcquireOptions::new()).await?;
    /// let view = guard.view();
    /// let worker = tokio::spawn(async move {
    ///     let _working = view.begin_work();
    ///     tokio::select! {
    ///         biased;
    ///         _ = view.until_unsafe() => "stopped",
    ///         () = tokio::time::sleep(std::time::Duration::from_millis(10)) => "done",
    ///     }
    /// });
    /// // Reads as released at once; written once the worker has let go.
    /// guard.release().await?;
    /// assert!(["stopped", "done"].contains(&worker.await.unwrap()));
    /// # client.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn begin_work(&self) -> WorkInProgress {
        self.held.work_started();
        WorkInProgress {
            held: self.held.clone(),
        }
    }
}

/// Work running under a lock: a release waits for it to be dropped before it
/// writes (see [`LockView::begin_work`]).
#[must_use = "the work counts as running only while this lives"]
#[derive(Debug)]
pub struct WorkInProgress {
    held: Arc<Held>,
}

impl Drop for WorkInProgress {
    fn drop(&mut self) {
        self.held.work_ended();
    }
}

/// Proof that this client holds a lock.
///
/// Heartbeats keep it while it lives. Release it with [`release`](Self::release) to
/// learn whether the release was written. Dropping it (or dropping a `release`
/// future before it finishes) releases in the background, honouring
/// delete-on-release; [`LockClient::shutdown`](crate::LockClient::shutdown)
/// waits for those releases. An acquire of the same key on this client waits for
/// such a release, then makes its attempt. If the background release cannot
/// reach the store, the record expires after its lease.
///
/// Derefs to [`LockView`] for [`fence`](LockView::fence), [`state`](LockView::state),
/// [`until_unsafe`](LockView::until_unsafe) and the rest.
#[must_use = "dropping the guard releases the lock (in the background)"]
#[derive(Debug)]
pub struct LockGuard {
    view: LockView,
    active: bool,
    /// Dropped after `drop` has started the release: the last handle waits
    /// for it (see `last_handle`).
    _handle: Option<Arc<crate::shared::LastHandle>>,
}

impl LockGuard {
    pub(crate) fn new(inner: Arc<Shared>, held: Arc<Held>) -> Self {
        let handle = inner.handle.get().and_then(std::sync::Weak::upgrade);
        Self {
            view: LockView { inner, held },
            active: true,
            _handle: handle,
        }
    }

    /// A clonable handle to this acquisition: read its state, update its data.
    pub fn view(&self) -> LockView {
        self.view.clone()
    }

    /// Release the lock, keeping the record (marked released, fence kept) so the
    /// key's fences keep increasing; or delete it if the acquire asked for
    /// delete-on-release. With reentrant guards, only the last one writes.
    ///
    /// When another task of this client is waiting for the key, the lock is
    /// handed to it instead: it takes the lock over in one write (a higher
    /// fence), and this release writes nothing. If this future is dropped before
    /// it finishes, the release goes on in the background.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.active = false;
        let leaving = Leaving::as_acquired(&self.view.held);
        self.view.inner.release(&self.view.held, leaving).await
    }

    /// Release the lock and leave `data` with it, in the same write (a final
    /// checkpoint, a result for the next holder; what the Java client's
    /// `ReleaseLockOptions.data` does). The next acquire finds it, as it keeps
    /// the stored data unless told otherwise. The lock is not handed to another
    /// task of this client in place of the write. While other reentrant guards
    /// of the acquisition are alive, this one stores the data (one write,
    /// like [`set_data`](LockView::set_data)) and is dropped; the last guard's
    /// release keeps it.
    ///
    /// Refused with [`LockError::InvalidInput`] before anything is written
    /// when the data would not outlive the release (delete-on-release, or a
    /// store that deletes released records, such as python-dynamodb-lock's
    /// layout) or the store cannot take it; the guard is then dropped, which
    /// releases the lock (without the data) in the background.
    pub async fn release_with_data(mut self, data: impl Into<Vec<u8>>) -> Result<(), LockError> {
        let data = data.into();
        let inner = &self.view.inner;
        let held = &self.view.held;
        inner.validate_input(&held.key, Some(&data))?;
        if held.delete_on_release || !inner.caps.keeps_released_records {
            return Err(LockError::InvalidInput {
                reason: format!(
                    "lock {}: data left by a release would be deleted with the record \
                     (delete-on-release, or a store that deletes released records); \
                     store it with set_data before the release instead",
                    held.key
                ),
                source: None,
            });
        }
        if held.state().guards > 1 {
            // Not the last guard: its release writes nothing, so store the
            // data now; the last guard's release keeps it.
            self.view.set_data(data).await?;
            return self.release().await;
        }
        self.active = false;
        let leaving = Leaving {
            delete: self.view.held.delete_on_release,
            data: Some(data),
        };
        self.view.inner.release(&self.view.held, leaving).await
    }

    /// Stop heartbeating the lock without releasing it, and hand back what another
    /// process needs to release it later: its key, fence, version and lease.
    ///
    /// The lock stays held in the store until its lease runs out (waiters then
    /// take it over) or until [`LockClient::release_version`] releases it. Waits
    /// for a heartbeat in flight, so the version is the one the store keeps.
    /// Heartbeats stop for every reentrant guard of this acquisition. Fails with
    /// [`LockError::Lost`] when the lock was already lost.
    ///
    /// [`LockClient::release_version`]: crate::LockClient::release_version
    pub async fn detach(mut self) -> Result<DetachedLock, LockError> {
        self.active = false;
        self.view.inner.detach(self.view.held.clone()).await
    }

    /// Give up the guard without releasing (the caller takes care of the record).
    pub(crate) fn disarm(mut self) -> Arc<Held> {
        self.active = false;
        self.view.held.clone()
    }

    /// Release the lock by deleting its record. The key's next acquisition
    /// still gets a fence above every fence it had, as the store's
    /// [`FencesAfterDeletion`](crate::FencesAfterDeletion) says. A task of this
    /// client waiting for the key is handed the lock instead (see
    /// [`release`](Self::release)).
    pub async fn release_and_delete(mut self) -> Result<(), LockError> {
        self.active = false;
        let leaving = Leaving {
            delete: true,
            data: None,
        };
        self.view.inner.release(&self.view.held, leaving).await
    }
}

impl Deref for LockGuard {
    type Target = LockView;

    fn deref(&self) -> &LockView {
        &self.view
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.active {
            self.view
                .inner
                .release_in_background(self.view.held.clone());
        }
    }
}
