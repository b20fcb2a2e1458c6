//! [`LockClient`]: the user-facing API. Its state, shared with its guards and
//! its heartbeat task, is `shared::Shared`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::config::LockClientBuilder;
use crate::shared::LastHandle;
use crate::shared::Shared;
use crate::shutdown_report::ShutdownReport;
use crate::{
    AcquireOptions, ConditionalStore, ListOptions, LockError, LockGuard, LockInfo, LockKey,
    LockPage, LockView, Rvn,
};

/// A client of one lock store: acquires locks, heartbeats them from one background
/// task, releases them.
///
/// Cheap to clone (all clones share the same held locks and heartbeat task). Build
/// one with [`LockClient::builder`].
#[derive(Clone, Debug)]
pub struct LockClient {
    pub(crate) inner: Arc<Shared>,
    /// Dropping the last clone (and the last guard) finishes the releases
    /// still running (see `last_handle`).
    _handle: Arc<LastHandle>,
}

impl LockClient {
    /// Start building a client over `store`.
    pub fn builder(store: impl ConditionalStore) -> LockClientBuilder {
        LockClientBuilder::new(Arc::new(store))
    }

    /// Start building a client over a shared store (for example one picked at run
    /// time as `Arc<dyn ConditionalStore>`).
    pub fn builder_shared(store: Arc<dyn ConditionalStore>) -> LockClientBuilder {
        LockClientBuilder::new(store)
    }

    /// The owner name this client writes.
    pub fn owner(&self) -> &str {
        &self.inner.config.owner
    }

    /// The lease duration this client writes.
    pub fn lease(&self) -> Duration {
        self.inner.config.timing.lease
    }

    /// This client's timing: its lease, clock drift bound and safety margin,
    /// from which [`Timing::safe_time`](crate::Timing::safe_time) (how long
    /// after a confirmed write a holder trusts its lease) follows, for the
    /// locks it takes with its own lease. A lock acquired with
    /// [`AcquireOptions::lease`](crate::AcquireOptions::lease) has its own:
    /// [`LockView::timing`](crate::LockView::timing).
    pub fn timing(&self) -> crate::Timing {
        self.inner.config.timing
    }

    /// How often this client heartbeats a lock held with the client's lease
    /// (a lock with its own lease: [`LockView::heartbeat_period`](crate::LockView::heartbeat_period)).
    pub fn heartbeat_period(&self) -> Duration {
        self.inner.config.heartbeat_period
    }

    /// Acquire `key`, waiting up to the options' budget: by default
    /// `lease × (1 + drift) + refresh period`, long enough to take over a
    /// holder that crashed ([`AcquireOptions::wait`] sets another;
    /// `Duration::ZERO` makes one attempt).
    ///
    /// A vacant lock (absent or released) costs one store write. A held lock is
    /// polled every refresh period (jittered to between half and all of it)
    /// and taken over once its record has kept the same version for the
    /// holder's lease × (1 + max drift). When the budget runs out,
    /// [`LockError::AcquireTimeout`] names the holder and the time waited.
    ///
    /// Acquires of one key on one client (any clone) queue inside the client,
    /// first come first served, within the same budget: while another task
    /// holds the key, this one waits without polling the store and is handed
    /// the lock, in one write with a higher fence, when that task releases it.
    ///
    /// Call [`shutdown`](Self::shutdown) before the program ends: it releases
    /// what is still held.
    pub async fn acquire(
        &self,
        key: impl Into<LockKey>,
        options: AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        self.inner.acquire(key.into(), options).await
    }

    /// One attempt with these options (lease, data,
    /// [`busy_unless_dead`](AcquireOptions::busy_unless_dead), hold limits...):
    /// `Ok(None)` when someone else holds the lock (another client, or
    /// another task of this one).
    ///
    /// Attempts add up: the client remembers the holder's record version from one
    /// attempt to the next, so a loop of `try_acquire` calls takes over a holder
    /// that died once its record has kept one version for its lease × (1 + drift).
    /// A release of this key still running on this client (a dropped guard) is
    /// waited for, not reported as busy. Options that ask to wait (a non-zero
    /// [`AcquireOptions::wait`]) are refused with [`LockError::InvalidConfig`]:
    /// call [`acquire`](Self::acquire) to wait.
    pub async fn try_acquire(
        &self,
        key: impl Into<LockKey>,
        options: AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        if let Some(wait) = options.wait.filter(|wait| !wait.is_zero()) {
            return Err(crate::ConfigError::WaitOnTryAcquire { wait }.into());
        }
        let options = options.wait(Duration::ZERO);
        match self.inner.acquire(key.into(), options).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::AcquireTimeout { .. } | LockError::AlreadyHeld { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Acquire `key`, run `work` while the lock is held, then release it.
    ///
    /// `work` is cancelled (its future dropped) as soon as the lease stops being
    /// safe, and the call returns [`LockError::Lost`] at once (the record is then
    /// released in the background, best effort); otherwise it returns what `work`
    /// returned. A failed release after `work` finished is logged, not returned:
    /// the lease then runs out on its own.
    pub async fn with_lock<F, Fut, T>(
        &self,
        key: impl Into<LockKey>,
        options: AcquireOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(LockView) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire(key, options).await?;
        let view = guard.view();
        let outcome = while_safe(&view, work(view.clone())).await;
        let key = guard.key().clone();
        match outcome {
            Ok(value) => {
                if let Err(error) = guard.release().await {
                    tracing::warn!(%key, %error, "release after with_lock failed");
                }
                Ok(value)
            }
            Err(reason) => {
                tracing::warn!(%key, %reason, "with_lock cancelled its work: lease no longer safe");
                // The caller needs to know now, not after release has retried against
                // a store that is probably failing: release in the background (an
                // acquire of the key on this client waits for that release).
                drop(guard);
                Err(LockError::Lost { key, reason })
            }
        }
    }

    /// The lock's record as stored (strongly consistent read), or `None`.
    pub async fn get_lock(&self, key: impl Into<LockKey>) -> Result<Option<LockInfo>, LockError> {
        self.inner.ensure_running()?;
        let key = key.into();
        self.inner.validate_input(&key, None)?;
        let record = self
            .inner
            .store
            .get(&key)
            .await
            .map_err(|error| LockError::from_store(&key, error))?;
        Ok(record.map(|record| {
            let mine = self.inner.holds_version(&record.key, record.rvn.as_str());
            LockInfo::from_record(record, mine)
        }))
    }

    /// One page of locks.
    pub async fn list_locks(&self, options: ListOptions) -> Result<LockPage, LockError> {
        self.inner.ensure_running()?;
        let page = self
            .inner
            .store
            .list(options.partition.as_deref(), options.cursor, options.limit)
            .await
            .map_err(|source| LockError::List {
                partition: options.partition.clone(),
                source,
            })?;
        let locks = page
            .records
            .into_iter()
            .map(|record| {
                let mine = self.inner.holds_version(&record.key, record.rvn.as_str());
                LockInfo::from_record(record, mine)
            })
            .collect();
        Ok(LockPage {
            locks,
            next: page.next,
        })
    }

    /// Every lock (of one partition, with [`ListOptions::partition`]) as a
    /// stream, fetching one page of [`ListOptions::limit`] records at a time as
    /// it is read: what a hand-written loop over [`list_locks`](Self::list_locks)
    /// and its cursors does. A failed page ends the stream with its error.
    ///
    /// ```
    /// use futures_util::TryStreamExt;
    /// use lock_core::{AcquireOptions, ListOptions, LockClient};
    /// use lock_memory::MemoryStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let client = LockClient::builder(MemoryStore::new()).build()?;
    /// let _a = client.acquire("a", AcquireOptions::new()).await?;
    /// let _b = client.acquire("b", AcquireOptions::new()).await?;
    /// let locks: Vec<_> = client.list_all(ListOptions::new().limit(1)).try_collect().await?;
    /// assert_eq!(locks.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn list_all(
        &self,
        options: ListOptions,
    ) -> futures_core::stream::BoxStream<'static, Result<LockInfo, LockError>> {
        struct Paging {
            client: LockClient,
            options: ListOptions,
            page: std::vec::IntoIter<LockInfo>,
            done: bool,
        }
        let start = Paging {
            client: self.clone(),
            options,
            page: Vec::new().into_iter(),
            done: false,
        };
        // Boxed: a stream that is `Unpin` and names its type is what callers
        // can keep in a struct or call `next()` on; a page costs a round trip
        // anyway.
        Box::pin(futures_util::stream::unfold(
            start,
            |mut paging| async move {
                loop {
                    if let Some(info) = paging.page.next() {
                        return Some((Ok(info), paging));
                    }
                    if paging.done {
                        return None;
                    }
                    let page = paging
                        .client
                        .list_locks(paging.options.clone())
                        .await
                        .and_then(|page| {
                            let next =
                                crate::Cursor::after(paging.options.cursor.as_ref(), page.next)
                                    .map_err(|source| LockError::List {
                                        partition: paging.options.partition.clone(),
                                        source,
                                    })?;
                            Ok((page.locks, next))
                        });
                    match page {
                        Ok((locks, next)) => {
                            paging.done = next.is_none();
                            paging.options.cursor = next;
                            paging.page = locks.into_iter();
                        }
                        Err(error) => {
                            paging.done = true;
                            return Some((Err(error), paging));
                        }
                    }
                }
            },
        ))
    }

    /// Release `key` if its record still carries `version`, whoever wrote it:
    /// the way to release a lock taken by another process (or by this one and
    /// then [detached](LockGuard::detach)) that handed on its version.
    ///
    /// One consistent read, then one write conditional on `version` that marks
    /// the record released, writes this client's owner name and keeps the fence,
    /// lease and data (in a store that deletes on release, the record is
    /// deleted). Returns the lock as it was
    /// before the release. An already released record at `version` is left alone.
    ///
    /// Fails with [`LockError::NotOwned`] (naming the current holder, if any) and
    /// writes nothing when the record has another version: the holder wrote since
    /// (a heartbeat, a takeover) or it was released and taken again.
    pub async fn release_version(
        &self,
        key: impl Into<LockKey>,
        version: &Rvn,
    ) -> Result<LockInfo, LockError> {
        self.inner.release_version(&key.into(), version).await
    }

    /// Release `key` whoever holds it: read the record and release it
    /// conditional on the version read. Returns the lock as it was before the
    /// release, or `None` when it was absent or already released.
    ///
    /// This is an operator's tool for a stuck lock: the holder, if it is still
    /// alive, learns on its next heartbeat that its lock is gone, and until then
    /// it may still act on it (which is what fences are for). A holder that
    /// heartbeats between the read and the write is read again and released
    /// on its new version; one that does so five times running makes it fail
    /// with [`LockError::NotOwned`].
    pub async fn force_release(
        &self,
        key: impl Into<LockKey>,
    ) -> Result<Option<LockInfo>, LockError> {
        self.inner.force_release(&key.into()).await
    }

    /// Keys this client holds right now.
    pub fn held_keys(&self) -> Vec<LockKey> {
        let mut keys = self.inner.registry.lock().held_keys();
        keys.sort();
        keys
    }

    /// Stop heartbeats and release every held lock concurrently, waiting at most the
    /// shutdown timeout. Later calls on this client (and a second shutdown) return
    /// [`LockError::Shutdown`].
    ///
    /// It also writes again what a failed way out may have left held: a
    /// release that gave up (the store out of reach until past the lease), a
    /// dropped guard's background release, or an abandoned acquire's
    /// clean-up that failed. Each is written conditional on the versions the
    /// record may be at, so a record anyone wrote since is not touched; a
    /// lock still within its min hold gets its final write (held to the min
    /// hold's end) instead of a release. The report counts each with the
    /// releases.
    ///
    /// The shutdown runs to its end even if this future is dropped: a
    /// shutdown awaited inside [`with_lock`](Self::with_lock)'s work (or
    /// [`Election::lead`](crate::Election::lead)'s) cancels that work, future
    /// and all, and the releases it started must not be cancelled with it.
    pub async fn shutdown(&self) -> Result<ShutdownReport, LockError> {
        // Begun here, at the call: acquires and hand-offs see it at once.
        if !self.inner.begin_shutdown() {
            return Err(LockError::Shutdown);
        }
        let inner = self.inner.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Ok(inner.shutdown_begun().await);
        };
        match runtime
            .spawn(async move { inner.shutdown_begun().await })
            .await
        {
            Ok(report) => Ok(report),
            Err(ended) if ended.is_panic() => std::panic::resume_unwind(ended.into_panic()),
            // Cancelled with its runtime: nothing is left to release on it.
            Err(_) => Err(LockError::Shutdown),
        }
    }
}

impl LockClientBuilder {
    /// Validate the settings and build the client. Writes nothing.
    pub fn build(self) -> Result<LockClient, LockError> {
        let config = self.validate()?;
        let (store, clock) = self.parts();
        let shared = Arc::new(Shared::new(store, clock, config));
        // A hand-off whose waiter left before taking it is released by its RVN.
        let weak = Arc::downgrade(&shared);
        shared
            .turns
            .on_orphaned(Box::new(move |key, handoff: crate::turns::Handoff| {
                if let Some(shared) = weak.upgrade() {
                    shared.release_handoff(key, handoff);
                }
            }));
        let handle = Arc::new(LastHandle::new(&shared));
        let _ = shared.handle.set(Arc::downgrade(&handle));
        Ok(LockClient {
            inner: shared,
            _handle: handle,
        })
    }
}

/// Run `work` while `view`'s lease is safe: its output, or why the lease
/// stopped being safe (then `work` is dropped at once). Counted as work in
/// progress while it runs: a release by anyone else (a shutdown) waits for it
/// to be dropped before writing.
pub(crate) async fn while_safe<T>(
    view: &LockView,
    work: impl Future<Output = T>,
) -> Result<T, crate::LostReason> {
    let untrusted = view.until_unsafe();
    let _working = view.begin_work();
    tokio::select! {
        biased;
        reason = untrusted => Err(reason),
        value = work => Ok(value),
    }
}
