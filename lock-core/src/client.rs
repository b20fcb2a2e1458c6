//! [`LockClient`]: the user-facing API, and the state it shares with its guards and
//! its heartbeat task.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinSet;
use tracing::Instrument;

use crate::clock::Instant;
use crate::config::{ClientConfig, LockClientBuilder};
use crate::heartbeat::Heartbeats;
use crate::held::Held;
use crate::registry::Registry;
use crate::write::{HeldWrite, WriteEnd};
use crate::{
    AcquireOptions, Capabilities, Clock, ConditionalStore, Expect, FenceUpdate, ListOptions,
    LockError, LockGuard, LockInfo, LockKey, LockPage, LockView, LostReason, NewRecord, Outcome,
    Rvn,
};

/// A client of one lock store: acquires locks, heartbeats them from one background
/// task, releases them.
///
/// Cheap to clone (all clones share the same held locks and heartbeat task). Build
/// one with [`LockClient::builder`].
#[derive(Clone, Debug)]
pub struct LockClient {
    inner: Arc<Inner>,
}

/// What [`LockClient::shutdown`] did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Locks released (or already gone).
    pub released: Vec<LockKey>,
    /// Locks whose release failed, with the error.
    pub failed: Vec<(LockKey, LockError)>,
    /// Locks whose release did not finish within the shutdown timeout.
    pub timed_out: Vec<LockKey>,
}

/// Attempts to release one abandoned acquisition before leaving it to expire.
const ABANDONED_RELEASE_ATTEMPTS: u32 = 4;

/// State shared by the client, its guards and its heartbeat task.
#[derive(Debug)]
pub(crate) struct Inner {
    pub store: Arc<dyn ConditionalStore>,
    pub clock: Arc<dyn Clock>,
    pub config: ClientConfig,
    pub caps: Capabilities,
    /// The locks this client holds and when each heartbeats next.
    pub registry: Arc<Registry>,
    shut_down: AtomicBool,
    /// The heartbeat task, started with the first lock (restarted if it ended).
    heartbeats: Mutex<Option<Heartbeats>>,
    /// Clean-up writes running in the background (releases of dropped guards and
    /// of abandoned acquisitions); shutdown waits for them.
    background: Mutex<JoinSet<()>>,
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

    pub(crate) fn from_parts(
        store: Arc<dyn ConditionalStore>,
        clock: Arc<dyn Clock>,
        config: ClientConfig,
    ) -> Self {
        let caps = store.capabilities();
        let registry = Arc::new(Registry::new(clock.now(), fastrand::Rng::new()));
        Self {
            inner: Arc::new(Inner {
                store,
                clock,
                config,
                caps,
                registry,
                shut_down: AtomicBool::new(false),
                heartbeats: Mutex::new(None),
                background: Mutex::new(JoinSet::new()),
            }),
        }
    }

    /// The owner name this client writes.
    pub fn owner(&self) -> &str {
        &self.inner.config.owner
    }

    /// The lease duration this client writes.
    pub fn lease(&self) -> Duration {
        self.inner.config.timing.lease
    }

    /// Acquire `key`, waiting up to the options' budget.
    ///
    /// A vacant lock (absent or released) costs one store write. A held lock is
    /// polled every refresh period (jittered) and taken over once its record has kept
    /// the same version for the holder's lease × (1 + max drift). When the budget
    /// runs out, [`LockError::AcquireTimeout`] names the holder and the time waited.
    pub async fn acquire(
        &self,
        key: impl Into<LockKey>,
        options: AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        self.inner.acquire(key.into(), options).await
    }

    /// One attempt: `Ok(None)` when someone else holds the lock.
    pub async fn try_acquire(
        &self,
        key: impl Into<LockKey>,
    ) -> Result<Option<LockGuard>, LockError> {
        match self.inner.acquire(key.into(), AcquireOptions::new()).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::AcquireTimeout { .. }) => Ok(None),
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
        let untrusted = view.until_unsafe();
        let outcome = tokio::select! {
            biased;
            reason = untrusted => Err(reason),
            value = work(view) => Ok(value),
        };
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
                // a store that is probably failing: release in the background.
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
            .map_err(|error| {
                let key = LockKey::new(options.partition.clone().unwrap_or_else(|| "*".into()));
                LockError::from_store(&key, error)
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
    /// heartbeats between the read and the write makes it fail with
    /// [`LockError::NotOwned`]; try again.
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
    pub async fn shutdown(&self) -> Result<ShutdownReport, LockError> {
        self.inner.shutdown().await
    }
}

impl Inner {
    pub(crate) fn ensure_running(&self) -> Result<(), LockError> {
        if self.shut_down.load(Ordering::Acquire) {
            Err(LockError::Shutdown)
        } else {
            Ok(())
        }
    }

    fn holds_version(&self, key: &LockKey, rvn: &str) -> bool {
        self.registry
            .get(key)
            .is_some_and(|held| held.state().rvn.as_str() == rvn)
    }

    /// Check a key and data against the store's limits before anything is written.
    pub(crate) fn validate_input(
        &self,
        key: &LockKey,
        data: Option<&[u8]>,
    ) -> Result<(), LockError> {
        let invalid = |reason: String| {
            Err(LockError::InvalidInput {
                reason,
                source: None,
            })
        };
        if key.partition().is_empty() {
            return invalid("the partition key is empty".into());
        }
        if key.partition().len() > self.caps.max_partition_key_bytes {
            return invalid(format!(
                "the partition key is {} bytes; this store allows at most {}",
                key.partition().len(),
                self.caps.max_partition_key_bytes
            ));
        }
        if let Some(sort) = key.sort() {
            if !self.caps.sort_keys {
                return invalid(format!("lock {key}: this store does not support sort keys"));
            }
            if sort.is_empty() {
                return invalid(format!("lock {key}: the sort key is empty"));
            }
            if sort.len() > self.caps.max_sort_key_bytes {
                return invalid(format!(
                    "the sort key is {} bytes; this store allows at most {}",
                    sort.len(),
                    self.caps.max_sort_key_bytes
                ));
            }
        }
        let size = key.partition().len()
            + key.sort().map_or(0, str::len)
            + self.config.owner.len()
            + data.map_or(0, <[u8]>::len);
        if size > self.caps.max_record_bytes {
            return invalid(format!(
                "lock {key}: key, owner and data take {size} bytes; this store allows records of at most {} bytes",
                self.caps.max_record_bytes
            ));
        }
        Ok(())
    }

    /// A random fraction in `[0, 1)`.
    pub(crate) fn random(&self) -> f64 {
        self.registry.random()
    }

    /// Between half and all of `period`.
    pub(crate) fn jitter(&self, period: Duration) -> Duration {
        let half = period / 2;
        half + half.mul_f64(self.random())
    }

    /// Record a fresh acquisition and queue its first heartbeat.
    pub(crate) fn register(self: &Arc<Self>, held: &Arc<Held>, sent: Instant) {
        if !self.registry.is_served() {
            self.start_heartbeats();
        }
        self.registry.hold(held, sent, self.config.heartbeat_period);
    }

    /// Start the heartbeat task, or restart one that ended (its runtime went away,
    /// or it panicked): the schedule stays, and the locks whose heartbeat was in
    /// flight in the old task are added back.
    fn start_heartbeats(self: &Arc<Self>) {
        let mut heartbeats = self
            .heartbeats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Started or restarted meanwhile; or shutting down: an acquire racing
        // shutdown is undone, and needs no task.
        if self.registry.is_served() || self.ensure_running().is_err() {
            return;
        }
        let restarted = heartbeats.take().is_some();
        let beats = Heartbeats::start(
            Arc::downgrade(self),
            self.clock.clone(),
            self.config.heartbeat_rate_limit,
            self.registry.clone(),
        );
        if restarted {
            let now = self.clock.now();
            let mut wake = false;
            {
                let mut book = self.registry.lock();
                let unscheduled: Vec<Arc<Held>> = book
                    .held_locks()
                    .filter(|held| !held.slot.is_scheduled() && held.wants_heartbeat())
                    .cloned()
                    .collect();
                for held in &unscheduled {
                    wake |= book.schedule(held, now);
                }
            }
            // The new task may already have armed its timer (on another worker
            // thread) before these went in.
            if wake {
                self.registry.wake.notify_one();
            }
        }
        *heartbeats = Some(beats);
    }

    /// Mark `held` lost and forget it, so this client can acquire the key again.
    pub(crate) fn lose(&self, held: &Arc<Held>, reason: LostReason) {
        held.mark_lost(reason);
        self.forget(held);
    }

    /// Forget `held`: no more heartbeats, and the key may be acquired again.
    pub(crate) fn forget(&self, held: &Arc<Held>) {
        self.registry.forget(held);
    }

    pub(crate) async fn set_data(
        &self,
        held: &Arc<Held>,
        data: Option<Vec<u8>>,
    ) -> Result<(), LockError> {
        self.ensure_running()?;
        self.validate_input(&held.key, data.as_deref())?;
        let _writing = held.writing().await;
        let snapshot = held.snapshot();
        if let Some(reason) = snapshot.lost {
            return Err(LockError::Lost {
                key: held.key.clone(),
                reason,
            });
        }
        let now = self.clock.now();
        let expires = snapshot.expires;
        match self
            .write_held(held, HeldWrite::SetData(data), expires, now, snapshot)
            .await
        {
            WriteEnd::Confirmed => Ok(()),
            WriteEnd::Stolen { owner } => {
                let reason = LostReason::Stolen { owner };
                self.lose(held, reason.clone());
                Err(LockError::Lost {
                    key: held.key.clone(),
                    reason,
                })
            }
            WriteEnd::GaveUp(_) | WriteEnd::Stopped => {
                self.lose(held, LostReason::Expired);
                Err(LockError::Lost {
                    key: held.key.clone(),
                    reason: LostReason::Expired,
                })
            }
            WriteEnd::Failed(error) => Err(LockError::from_store(&held.key, error)),
        }
    }

    /// Drop one guard of `held`; the last one releases the lock.
    pub(crate) async fn release(&self, held: &Arc<Held>, delete: bool) -> Result<(), LockError> {
        if !held.drop_guard() {
            return Ok(());
        }
        self.forget(held);
        let span = tracing::info_span!("release", key = %held.key, fence = %held.fence);
        self.write_release(held, delete).instrument(span).await
    }

    async fn write_release(&self, held: &Arc<Held>, delete: bool) -> Result<(), LockError> {
        let _writing = held.writing().await;
        let snapshot = held.snapshot();
        match &snapshot.lost {
            Some(LostReason::Released) => return Ok(()),
            Some(reason @ LostReason::Stolen { .. }) => {
                return Err(LockError::Lost {
                    key: held.key.clone(),
                    reason: reason.clone(),
                });
            }
            // Expired or in danger: the record may still be ours; try to vacate it.
            _ => {}
        }
        let now = self.clock.now();
        let give_up_at = snapshot.expires.max(now + self.config.retry_max * 4);
        let write = if delete {
            HeldWrite::Delete
        } else {
            HeldWrite::Release
        };
        match self
            .write_held(held, write, give_up_at, now, snapshot)
            .await
        {
            WriteEnd::Confirmed => {
                tracing::info!("released");
                Ok(())
            }
            WriteEnd::Stolen { owner } => {
                let reason = LostReason::Stolen { owner };
                held.mark_lost(reason.clone());
                Err(LockError::Lost {
                    key: held.key.clone(),
                    reason,
                })
            }
            WriteEnd::GaveUp(error) => Err(LockError::Store {
                key: held.key.clone(),
                source: error.unwrap_or_else(|| {
                    crate::StoreError::unavailable("release did not complete before its deadline")
                }),
            }),
            WriteEnd::Failed(error) => Err(LockError::from_store(&held.key, error)),
            WriteEnd::Stopped => Ok(()),
        }
    }

    /// A guard was dropped without release: release it in the background, best
    /// effort. Without a runtime, heartbeats stop and the lease runs out.
    pub(crate) fn release_in_background(self: &Arc<Self>, held: Arc<Held>) {
        let inner = self.clone();
        let release = {
            let held = held.clone();
            async move {
                let key = held.key.clone();
                if let Err(error) = inner.release(&held, false).await {
                    tracing::debug!(%key, %error, "background release failed");
                }
            }
        };
        match self.in_background(release) {
            Ok(()) => {}
            Err(()) => {
                if held.drop_guard() {
                    self.forget(&held);
                }
            }
        }
    }

    /// Run a clean-up write in the background, where shutdown will wait for it.
    /// `Err` when there is no runtime to run it on.
    pub(crate) fn in_background(
        &self,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ()> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ())?;
        let mut background = self
            .background
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Reap finished tasks so a long-lived client does not collect them.
        while background.try_join_next().is_some() {}
        background.spawn_on(task, &runtime);
        Ok(())
    }

    /// An acquire gave up (timed out, failed or was cancelled) after writes whose
    /// outcome it never learned. Any of them may have applied and hold the lock
    /// for a full lease with nobody heartbeating it: release each, conditional on
    /// its RVN, so waiters need not wait the lease out. A write that did not apply
    /// is rejected and nothing changes.
    pub(crate) fn release_abandoned(self: &Arc<Self>, key: LockKey, rvns: Vec<Rvn>) {
        let inner = self.clone();
        let cleanup = async move {
            // Past a lease the write, if it applied, has expired for every waiter
            // anyway; a store that hangs must not keep this task (and the client) alive.
            let give_up = inner.clock.now() + inner.config.timing.lease;
            for rvn in rvns {
                let new = NewRecord {
                    owner: inner.config.owner.clone(),
                    rvn: Rvn::fresh(),
                    lease: inner.config.timing.lease,
                    released: true,
                    fence: FenceUpdate::Keep,
                    data: None,
                    expires_at: None,
                };
                for attempt in 0..ABANDONED_RELEASE_ATTEMPTS {
                    let put = inner
                        .store
                        .put(&key, Expect::Version(rvn.clone()), new.clone());
                    match inner.before(give_up, put).await {
                        Ok(Outcome::Applied(_)) => {
                            tracing::info!(%key, "released an acquisition whose reply was lost");
                            break;
                        }
                        Ok(Outcome::Rejected { .. }) => break,
                        Err(error) if error.is_retryable() && inner.clock.now() < give_up => {
                            inner
                                .clock
                                .sleep_until(inner.clock.now() + inner.backoff(attempt))
                                .await;
                        }
                        Err(error) => {
                            tracing::debug!(%key, %error, "could not release an abandoned acquisition");
                            break;
                        }
                    }
                }
            }
        };
        if self.in_background(cleanup).is_err() {
            tracing::debug!(
                "no runtime to release an abandoned acquisition on; it expires with its lease"
            );
        }
    }

    async fn shutdown(self: &Arc<Self>) -> Result<ShutdownReport, LockError> {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return Err(LockError::Shutdown);
        }
        let span = tracing::info_span!("shutdown", owner = %self.config.owner);
        async {
            if let Some(beats) = self
                .heartbeats
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take()
            {
                beats.task.abort();
            }
            let held = self.registry.lock().drain_held();
            let mut pending: Vec<LockKey> = held.iter().map(|held| held.key.clone()).collect();
            let mut releases = JoinSet::new();
            for held in held {
                held.update(|state| state.stopping = true);
                let inner = self.clone();
                releases.spawn(async move {
                    let result = inner.write_release(&held, held.delete_on_release).await;
                    (held.key.clone(), result)
                });
            }
            let mut report = ShutdownReport::default();
            let deadline = self
                .clock
                .sleep_until(self.clock.now() + self.config.shutdown_timeout);
            tokio::pin!(deadline);
            let mut expired = false;
            loop {
                tokio::select! {
                    next = releases.join_next() => match next {
                        Some(Ok((key, result))) => {
                            pending.retain(|k| *k != key);
                            match result {
                                Ok(()) => report.released.push(key),
                                Err(error) => report.failed.push((key, error)),
                            }
                        }
                        Some(Err(_)) => {}
                        None => break,
                    },
                    () = &mut deadline => {
                        releases.abort_all();
                        report.timed_out = pending;
                        expired = true;
                        break;
                    }
                }
            }
            // Background clean-ups share the deadline; ones started meanwhile (a
            // guard dropped, an acquire ending) are waited for too.
            loop {
                let mut background = std::mem::take(
                    &mut *self
                        .background
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner()),
                );
                if background.is_empty() {
                    break;
                }
                if expired {
                    background.abort_all();
                    break;
                }
                loop {
                    tokio::select! {
                        next = background.join_next() => if next.is_none() { break },
                        () = &mut deadline => {
                            background.abort_all();
                            expired = true;
                            break;
                        }
                    }
                }
            }
            tracing::info!(
                released = report.released.len(),
                failed = report.failed.len(),
                "shut down"
            );
            Ok(report)
        }
        .instrument(span)
        .await
    }
}
