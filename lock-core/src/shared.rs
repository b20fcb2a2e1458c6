//! The state a client's API, its acquires, its writes and its heartbeat task
//! share: one [`Shared`] per client, behind every clone of the `LockClient`,
//! every guard and the heartbeat task.
//!
//! This module holds the state and the small helpers every part uses; each part
//! adds its own methods in its own module, and the calls between parts go one
//! way, in this order: the API (`client`, `guard`) calls `acquire`,
//! `heartbeat`, `release`, `detached` and `write`; `acquire` calls `heartbeat`
//! (to register a lock it took) and `release` (to clean up after an attempt
//! that gave up); `heartbeat` and `release` call `write`; every part calls
//! the helpers here, the decisions of `replies` and `timing`, and the retries
//! of `retry`. No part calls one before it in that order.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

use crate::clock::{Instant, later};
use crate::config::ClientConfig;
use crate::held::Held;
use crate::leaving::Leftovers;
use crate::metrics::{ClientMetrics, ObservedStore};
use crate::registry::Registry;
use crate::retry::Backoff;
use crate::sightings::Sightings;
use crate::turns::Turns;
use crate::{
    Capabilities, Clock, ConditionalStore, LockError, LockKey, LockRecord, LostReason, StoreError,
};

/// What one background clean-up did: a release (of a dropped guard or of a
/// release whose caller stopped waiting) reports its lock and result, so
/// shutdown can count it; other clean-ups report nothing.
pub(crate) type Cleanup = Option<(LockKey, Result<(), LockError>)>;

/// Clean-ups running in the background, and the lock each release is for (so a
/// shutdown that runs out of time can name the ones it gave up on).
#[derive(Debug, Default)]
pub(crate) struct Background {
    pub tasks: JoinSet<Cleanup>,
    pub keys: HashMap<tokio::task::Id, LockKey>,
}

impl Background {
    /// Start `task` (a release of `key`, or another clean-up) on `runtime`.
    pub(crate) fn spawn(
        &mut self,
        key: Option<LockKey>,
        task: impl Future<Output = Cleanup> + Send + 'static,
        runtime: &tokio::runtime::Handle,
    ) {
        let id = self.tasks.spawn_on(task, runtime).id();
        if let Some(key) = key {
            self.keys.insert(id, key);
        }
    }

    /// Forget the finished tasks.
    fn reap(&mut self) {
        while let Some(done) = self.tasks.try_join_next_with_id() {
            self.forget(&done);
        }
    }

    /// Wait for every task to end, forgetting each as it does.
    pub(crate) async fn join_all(&mut self) {
        while let Some(done) = self.tasks.join_next_with_id().await {
            self.forget(&done);
        }
    }

    /// Forget the lock of a task that ended.
    fn forget(&mut self, done: &Result<(tokio::task::Id, Cleanup), tokio::task::JoinError>) {
        let id = match done {
            Ok((id, _)) => *id,
            Err(error) => error.id(),
        };
        self.keys.remove(&id);
    }

    /// The locks whose releases are still running, sorted.
    pub(crate) fn sorted_keys(&self) -> Vec<LockKey> {
        let mut keys: Vec<LockKey> = self.keys.values().cloned().collect();
        keys.sort();
        keys
    }
}

/// State shared by the client, its guards and its heartbeat task.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The user's store, every call counted, timed and traced.
    pub store: ObservedStore,
    /// This client's metric handles (see `metrics`).
    pub metrics: Arc<ClientMetrics>,
    pub clock: Arc<dyn Clock>,
    pub config: ClientConfig,
    pub caps: Capabilities,
    /// Jitter and backoff of every retry and poll.
    pub backoff: Backoff,
    /// The locks this client holds and when each heartbeats next.
    pub registry: Arc<Registry>,
    /// The releases the store announces, if it does.
    pub release_feed: Option<crate::ReleaseFeed>,
    /// Each key's turn among this client's acquires (local queueing).
    pub turns: Turns,
    /// Other holders' records this client has seen, across acquires.
    pub sightings: Sightings,
    shut_down: AtomicBool,
    /// Woken when shutdown begins: acquires waiting (polling, backing off,
    /// queued for a turn) stop at once.
    stopping: Notify,
    /// Acquires running now, and a wake-up as each ends: shutdown waits for
    /// them, since one whose write is in flight may leave a clean-up behind.
    acquiring: AtomicUsize,
    acquire_ended: Notify,
    /// The heartbeat task, started with the first lock (restarted if it ended).
    pub heartbeats: Mutex<Option<AbortOnDrop>>,
    /// Clean-up writes running in the background (releases of dropped guards and
    /// of abandoned acquisitions); shutdown waits for them.
    background: Mutex<Background>,
    /// What a failed release or clean-up may have left held; shutdown writes
    /// each again.
    pub leftovers: Leftovers,
    /// The token every client clone and guard holds (see `last_handle`).
    pub handle: std::sync::OnceLock<std::sync::Weak<LastHandle>>,
    /// State that the handles of one name share on this client (a
    /// semaphore's local queue), kept while any of them lives.
    named: Mutex<HashMap<(TypeId, String), Weak<dyn Any + Send + Sync>>>,
}

/// An acquire running (see [`Shared::acquiring`]).
pub(crate) struct Acquiring<'a>(&'a Shared);

impl Drop for Acquiring<'_> {
    fn drop(&mut self) {
        self.0.acquire_ended_one();
    }
}

/// [`Acquiring`] that owns its client: for a task waiting in a queue of its
/// own (a semaphore's), which may hold a hand-off shutdown must wait for.
pub(crate) struct AcquiringOwned(Arc<Shared>);

impl Drop for AcquiringOwned {
    fn drop(&mut self) {
        self.0.acquire_ended_one();
    }
}

/// Held by every clone of a `LockClient` and by every `LockGuard`; dropping
/// the last one finishes the releases still running (its `Drop` is in
/// `last_handle`).
#[derive(Debug)]
pub(crate) struct LastHandle {
    pub(crate) shared: std::sync::Weak<Shared>,
}

impl LastHandle {
    pub(crate) fn new(shared: &Arc<Shared>) -> Self {
        Self {
            shared: Arc::downgrade(shared),
        }
    }
}

/// A task that stops when this handle is dropped (with the client).
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Shared {
    /// Someone else's held `record` arrived at `now` (this client's wall clock
    /// read `wall_now` in between, see `ClockTrust::credit`): the sighting,
    /// and when it may be taken over (lock delay included; a final hold's end
    /// is the caller's).
    pub(crate) fn sight(
        &self,
        record: &crate::LockRecord,
        now: crate::Instant,
        wall_now: std::time::SystemTime,
    ) -> (crate::sightings::Sighting, crate::Instant) {
        let credit = self.config.clock_trust.credit(record.written, wall_now);
        let sighting = self.sightings.saw(record, now, credit);
        // The waiter's drift bound on the holder's lease (the observation's).
        let at = self
            .config
            .timing
            .delayed_takeover_at(&sighting.observation, self.config.lock_delay);
        (sighting, at)
    }

    pub(crate) fn new(
        store: Arc<dyn ConditionalStore>,
        clock: Arc<dyn Clock>,
        config: ClientConfig,
    ) -> Self {
        let caps = store.capabilities();
        let release_feed = store.release_feed();
        let metrics = Arc::new(ClientMetrics::new(config.metric_key_labels));
        let store = ObservedStore::new(store, metrics.clone());
        let registry = Arc::new(Registry::new(clock.now(), metrics.clone()));
        let backoff = Backoff::new(config.retry_base, config.retry_max, fastrand::Rng::new());
        Self {
            store,
            metrics,
            clock,
            config,
            caps,
            backoff,
            registry,
            release_feed,
            turns: Turns::default(),
            sightings: Sightings::default(),
            shut_down: AtomicBool::new(false),
            stopping: Notify::new(),
            acquiring: AtomicUsize::new(0),
            acquire_ended: Notify::new(),
            heartbeats: Mutex::new(None),
            background: Mutex::new(Background::default()),
            leftovers: Leftovers::default(),
            handle: std::sync::OnceLock::new(),
            named: Mutex::new(HashMap::new()),
        }
    }

    /// The `T` every handle named `name` shares on this client: the live one,
    /// or a new default one.
    pub(crate) fn named<T: Any + Send + Sync + Default>(&self, name: &str) -> Arc<T> {
        let mut named = self
            .named
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let id = (TypeId::of::<T>(), name.to_owned());
        if let Some(live) = named.get(&id).and_then(Weak::upgrade)
            && let Ok(live) = live.downcast::<T>()
        {
            return live;
        }
        // Names whose handles are all gone go with it.
        named.retain(|_, state| state.strong_count() > 0);
        let state = Arc::new(T::default());
        let erased: Arc<dyn Any + Send + Sync> = state.clone();
        named.insert(id, Arc::downgrade(&erased));
        state
    }

    pub(crate) fn ensure_running(&self) -> Result<(), LockError> {
        if self.shut_down.load(Ordering::Acquire) {
            Err(LockError::Shutdown)
        } else {
            Ok(())
        }
    }

    /// Mark the client shut down and wake every waiting acquire; false when it
    /// already was.
    pub(crate) fn begin_shutdown(&self) -> bool {
        let first = !self.shut_down.swap(true, Ordering::SeqCst);
        self.stopping.notify_waiters();
        first
    }

    /// Sleep until `at` on the client's clock, or until shutdown begins.
    pub(crate) async fn pause_until(&self, at: Instant) {
        let stopped = self.stopping.notified();
        tokio::pin!(stopped);
        stopped.as_mut().enable();
        if self.ensure_running().is_err() {
            return;
        }
        tokio::select! {
            () = self.clock.sleep_until(at) => {}
            () = stopped => {}
        }
    }

    /// Watch the releases the store announces, if it does: subscribe before
    /// the first read of an acquire, so that a release between that read and
    /// the wait is not missed.
    pub(crate) fn watch_releases(&self) -> Option<crate::ReleaseWatch> {
        self.release_feed
            .as_ref()
            .map(crate::ReleaseFeed::subscribe)
    }

    /// [`pause_until`](Self::pause_until), or until the store announces a
    /// release `wanted` picks: true when an announcement woke it. A hint
    /// only; the caller tries with a conditional write as ever.
    pub(crate) async fn pause_until_released(
        &self,
        at: Instant,
        watch: Option<&mut crate::ReleaseWatch>,
        wanted: impl Fn(&LockKey) -> bool,
    ) -> bool {
        let Some(watch) = watch else {
            self.pause_until(at).await;
            return false;
        };
        tokio::select! {
            () = self.pause_until(at) => false,
            () = watch.released(wanted) => {
                tracing::debug!("woken by an announced release");
                true
            }
        }
    }

    /// Count an acquire as running until the returned guard is dropped.
    pub(crate) fn acquiring(&self) -> Acquiring<'_> {
        self.acquiring.fetch_add(1, Ordering::SeqCst);
        Acquiring(self)
    }

    /// [`acquiring`](Self::acquiring), owning the client.
    pub(crate) fn acquiring_owned(self: &Arc<Self>) -> AcquiringOwned {
        self.acquiring.fetch_add(1, Ordering::SeqCst);
        AcquiringOwned(self.clone())
    }

    fn acquire_ended_one(&self) {
        self.acquiring.fetch_sub(1, Ordering::SeqCst);
        // Only a shutdown waits for this; it sets its flag before it reads the
        // count, so either it sees this decrement or this sees its flag.
        if self.shut_down.load(Ordering::SeqCst) {
            self.acquire_ended.notify_waiters();
        }
    }

    /// Resolve once no acquire is running.
    pub(crate) async fn acquires_ended(&self) {
        loop {
            let ended = self.acquire_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.acquiring.load(Ordering::SeqCst) == 0 {
                return;
            }
            ended.await;
        }
    }

    /// This client holds `key` under exactly this record version.
    pub(crate) fn holds_version(&self, key: &LockKey, rvn: &str) -> bool {
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
        let size = key.partition().len()
            + key.sort().map_or(0, str::len)
            + self.config.owner.len()
            + data.map_or(0, <[u8]>::len);
        // The client's own measure of the record (the store adds what it
        // keeps beside): the key, owner and data the caller chose.
        self.caps
            .check_key(key)
            .and_then(|()| self.caps.check_record_size(key, size))
            .map_err(|limit| LockError::InvalidInput {
                reason: limit.to_string(),
                source: None,
            })
    }

    /// `by` after now on this client's clock (saturating: a huge duration means
    /// "never").
    pub(crate) fn after(&self, by: Duration) -> Instant {
        later(self.clock.now(), by)
    }

    /// The record a rejection is about: the one the store returned, or a read
    /// when the store cannot return it.
    pub(crate) async fn current_after_rejection(
        &self,
        key: &LockKey,
        current: Option<LockRecord>,
    ) -> Result<Option<LockRecord>, StoreError> {
        if current.is_some() || self.caps.returns_current_on_conflict {
            Ok(current)
        } else {
            self.store.get(key).await
        }
    }

    /// Mark `held` lost and forget it, so this client can acquire the key again.
    pub(crate) fn lose(&self, held: &Arc<Held>, reason: LostReason) {
        self.metrics.lost(&held.key, &reason);
        held.mark_lost(reason);
        self.forget(held);
        held.end_turn(None);
    }

    /// Forget `held`: no more heartbeats, and the key is no longer listed as held.
    pub(crate) fn forget(&self, held: &Arc<Held>) {
        self.registry.forget(held);
    }

    /// Run a clean-up write (the release of `key`, or another) in the
    /// background, where shutdown will wait for it. `Err` when there is no
    /// runtime to run it on.
    pub(crate) fn in_background(
        &self,
        key: Option<LockKey>,
        task: impl Future<Output = Cleanup> + Send + 'static,
    ) -> Result<(), ()> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ())?;
        let mut background = self.background();
        // Reap finished tasks so a long-lived client does not collect them; not
        // while shutting down, which reports what each one did.
        if self.ensure_running().is_ok() {
            background.reap();
        }
        background.spawn(key, task, &runtime);
        Ok(())
    }

    /// The locks whose background release is still running (sorted), or
    /// `None` when no clean-up at all is running.
    pub(crate) fn background_running(&self) -> Option<Vec<LockKey>> {
        let mut background = self.background();
        background.reap();
        if background.tasks.is_empty() {
            return None;
        }
        Some(background.sorted_keys())
    }

    /// The background clean-ups started so far, taken out for shutdown to wait on.
    pub(crate) fn take_background(&self) -> Background {
        std::mem::take(&mut *self.background())
    }

    fn background(&self) -> std::sync::MutexGuard<'_, Background> {
        self.background
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
