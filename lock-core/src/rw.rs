//! Reader-writer locks: many readers or one writer per name
//! ([`LockClient::rw_lock`]), built from ordinary locks and conditional
//! writes only, so they work on every store.
//!
//! A lock named `name` keeps, in one partition (or under `name#…` without
//! sort keys):
//!
//! * `writer`: the write lock. Whoever holds it is the writer, or is waiting
//!   for the readers to leave before it writes; its fence is the writer fence.
//! * `upgrade`: taken by a writer before `writer`, and held by an upgradeable
//!   reader for its whole read, so one of them at a time may go on to take
//!   `writer` (a writer holding `writer` while an upgradeable reader waited
//!   for it would wait for that reader to leave: a deadlock).
//! * `reader-00003-of-8`: one slot per reader, taken as a semaphore's permit,
//!   each with its own lease and heartbeats.
//!
//! **Admission.** A reader first takes a slot (it *announces* itself), then
//! reads `writer`: vacant or released, it reads; held, it gives the slot
//! back and waits for `writer` to be released. A writer first takes
//! `writer`, then reads every slot and waits until none is held. The store
//! orders the two writes: if the reader's read of `writer` came first, its
//! slot was taken before `writer` was, and the writer's read of the slots
//! (after `writer`) sees it and waits; otherwise the reader sees `writer`
//! held and backs off. Never both. A writer waiting for readers to leave
//! holds `writer`, so new readers wait behind it: writers are not starved.
//!
//! **Crashed holders.** A slot or `writer` record whose holder stopped
//! writing is cleared, once the usual takeover rule says the holder can no
//! longer believe its lease safe, by one write conditional on the version
//! read: released, with the next fence. A late heartbeat from the holder is
//! then refused, so it learns its lease is gone.
//!
//! **Fences.** A writer's fence is `writer`'s. A reader is admitted with the
//! fence `writer` had when it was read: the last writer's, raised by one if
//! a crashed writer's record was cleared. A resource that checks readers'
//! fences the way it checks writers' (at least the highest seen, reads
//! raising the floor too) refuses a reader admitted before a later writer,
//! and a crashed writer that comes back after readers were let in.
//!
//! **The name a reader-writer lock fences under** is its write lock's key,
//! [`RwLock::writer_key`], printed (`name/writer`, or `name#writer` on a
//! store without sort keys), for writers ([`WriteGuard`]'s key) and readers
//! ([`ReadView::writer_key`]) alike: the lock whose counter issues every
//! fence they present. Not the bare `name`, which a plain lock of that name
//! (with its own counter) prints as too.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::clock::{Instant, later};
use crate::retry::Retry;
use crate::semaphore::SlotKind;
use crate::{
    AcquireOptions, DataUpdate, Expect, Fence, FenceUpdate, LeaseState, LockClient, LockError,
    LockGuard, LockKey, LockRecord, LockView, LostReason, NewRecord, Outcome, Permit, Rvn,
    Semaphore,
};

/// A reader-writer lock on one name; see [`LockClient::rw_lock`]. Cheap to
/// clone.
#[derive(Clone, Debug)]
pub struct RwLock {
    shared: Arc<RwShared>,
}

#[derive(Debug)]
struct RwShared {
    client: LockClient,
    name: String,
    /// The readers' slots.
    readers: Semaphore,
    writer_key: LockKey,
    upgrade_key: LockKey,
    /// Shared by every handle of this lock on this client.
    local: Arc<OnClient>,
}

/// What the handles of one reader-writer lock on one client share.
#[derive(Debug, Default)]
struct OnClient {
    /// A writer of this client released the lock: its waiting readers look
    /// at once instead of at their next poll.
    writer_left: Notify,
}

impl LockClient {
    /// A reader-writer lock named `name` with room for `max_readers` readers
    /// at once: any number of readers up to that, or one writer. Every client
    /// must open it with the same count; one that does not is refused on its
    /// first read ([`LockError::ReadersMismatch`]) once the store shows the
    /// other count, as a [semaphore](Self::semaphore) is.
    ///
    /// Refused before anything is written with
    /// [`LockError::TooManyReaders`] when `max_readers` is 0 or more than the
    /// store allows ([`Capabilities::max_readers`](crate::Capabilities::max_readers)),
    /// and with [`LockError::InvalidInput`] when the name does not fit the
    /// store's keys or the store deletes released records (the writer fences
    /// readers carry would restart).
    ///
    /// ```
    /// # use lock_core::{AcquireOptions, LockClient};
    /// # use lock_memory::MemoryStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let client = LockClient::builder(MemoryStore::new()).owner("app-1").build()?;
    /// let config = client.rw_lock("config", 16)?;
    ///
    /// let writer = config.write(AcquireOptions::new()).await?;
    /// let fence = writer.fence(); // goes with every write to the config
    /// writer.release_with_data("version 7").await?;
    ///
    /// let a = config.read(AcquireOptions::new()).await?;
    /// let b = config.read(AcquireOptions::new()).await?; // readers share it
    /// assert_eq!(a.fence(), fence); // the fence of the last writer
    /// assert_eq!(b.writer_data().as_deref(), Some(&b"version 7"[..]));
    /// // A writer now would wait for both readers to leave.
    /// assert!(config.try_write(AcquireOptions::new()).await?.is_none());
    /// a.release().await?;
    /// b.release().await?;
    /// client.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rw_lock(&self, name: impl Into<String>, max_readers: u32) -> Result<RwLock, LockError> {
        let name = name.into();
        self.inner.ensure_running()?;
        if !self.inner.caps.keeps_released_records {
            return Err(LockError::InvalidInput {
                reason: format!(
                    "reader-writer lock {name}: this store deletes released records, and readers' slots and the writer's record must be kept for readers to be admitted with the writer fence; use a store (or table layout) that keeps released records"
                ),
                source: None,
            });
        }
        let max = self.inner.caps.max_readers();
        if max_readers == 0 || max_readers > max {
            return Err(LockError::TooManyReaders {
                name,
                readers: max_readers,
                max,
            });
        }
        let (writer_key, upgrade_key) = if self.inner.caps.sort_keys {
            (
                LockKey::with_sort(name.clone(), "writer"),
                LockKey::with_sort(name.clone(), "upgrade"),
            )
        } else {
            (
                LockKey::new(format!("{name}#writer")),
                LockKey::new(format!("{name}#upgrade")),
            )
        };
        self.inner.validate_input(&writer_key, None)?;
        self.inner.validate_input(&upgrade_key, None)?;
        let readers = self.slots(name.clone(), max_readers, SlotKind::Reader)?;
        let local = self.inner.named::<OnClient>(&name);
        Ok(RwLock {
            shared: Arc::new(RwShared {
                client: self.clone(),
                name,
                readers,
                writer_key,
                upgrade_key,
                local,
            }),
        })
    }
}

/// Where a wait for the lock ends: a deadline, or one attempt only.
#[derive(Clone, Copy)]
struct Budget {
    deadline: Instant,
    once: bool,
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How many readers it has room for.
    pub fn max_readers(&self) -> u32 {
        self.shared.readers.permits()
    }

    /// The key of its write lock: the lock whose fence a writer holds and
    /// whose fence readers are admitted with, and so the key every writer
    /// and reader of this lock presents its fence with at a resource (on
    /// every surface: a [`WriteGuard`]'s key, [`ReadView::writer_key`],
    /// `lockctl run --shared`/`--exclusive`'s `LOCK_FENCE_KEY`, Python's
    /// fencing helpers given a read or write).
    pub fn writer_key(&self) -> &LockKey {
        &self.shared.writer_key
    }

    /// Read: wait while a writer holds the lock or waits for it, and while
    /// all reader slots are held, up to the options' wait budget (by default
    /// long enough to clear a crashed writer). The options' lease, data and
    /// hold limits apply to the reader's slot; `reentrant`, `only_if_exists`,
    /// `busy_unless_dead` and `delete_on_release` are refused.
    pub async fn read(&self, options: AcquireOptions) -> Result<ReadGuard, LockError> {
        let wait = self.wait_of(&options);
        let budget = self.budget(wait, false);
        self.admit_reader(options, budget)
            .await?
            .ok_or_else(|| self.timeout(wait))
    }

    /// One attempt to read: `None` when a writer holds the lock or waits for
    /// it, or every reader slot is held. Options that ask to wait are
    /// refused, as for [`LockClient::try_acquire`].
    pub async fn try_read(&self, options: AcquireOptions) -> Result<Option<ReadGuard>, LockError> {
        refuse_wait(&options)?;
        self.admit_reader(options, self.budget(Duration::ZERO, true))
            .await
    }

    /// Write: take the write lock (new readers now wait), then wait for the
    /// readers inside to leave, all within the options' wait budget. The
    /// options' lease, data and hold limits apply to the write lock, whose
    /// record keeps the data for readers to see
    /// ([`ReadView::writer_data`]). On a timeout or any error, whatever was
    /// taken is released before the error is returned.
    pub async fn write(&self, options: AcquireOptions) -> Result<WriteGuard, LockError> {
        let wait = self.wait_of(&options);
        let budget = self.budget(wait, false);
        self.take_writer(options, budget)
            .await?
            .ok_or_else(|| self.timeout(wait))
    }

    /// One attempt to write: `None` when another writer or an upgradeable
    /// reader holds the lock, or a live reader is inside (a crashed one is
    /// cleared once the takeover rule allows).
    pub async fn try_write(
        &self,
        options: AcquireOptions,
    ) -> Result<Option<WriteGuard>, LockError> {
        refuse_wait(&options)?;
        self.take_writer(options, self.budget(Duration::ZERO, true))
            .await
    }

    /// Read, with the right to become the writer later
    /// ([`UpgradeableReadGuard::upgrade`]) without letting another writer in
    /// between. One upgradeable reader at a time (it holds the `upgrade`
    /// lock, which writers take first); plain readers share the lock with it.
    pub async fn upgradeable_read(
        &self,
        options: AcquireOptions,
    ) -> Result<UpgradeableReadGuard, LockError> {
        let wait = self.wait_of(&options);
        let budget = self.budget(wait, false);
        self.take_upgradeable(options, budget)
            .await?
            .ok_or_else(|| self.timeout(wait))
    }

    /// One attempt at [`upgradeable_read`](Self::upgradeable_read).
    pub async fn try_upgradeable_read(
        &self,
        options: AcquireOptions,
    ) -> Result<Option<UpgradeableReadGuard>, LockError> {
        refuse_wait(&options)?;
        self.take_upgradeable(options, self.budget(Duration::ZERO, true))
            .await
    }

    /// Read, run `work` while the read lease is safe, then release. `work`
    /// is cancelled (its future dropped) as soon as the lease stops being
    /// safe, and the call returns [`LockError::Lost`]; otherwise it returns
    /// what `work` returned (as [`LockClient::with_lock`] does).
    pub async fn with_read<F, Fut, T>(
        &self,
        options: AcquireOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(ReadView) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.read(options).await?;
        let view = guard.view.clone();
        let outcome = crate::client::while_safe(&view.slot, work(view.clone())).await;
        finish_work(outcome, guard.view.slot.key().clone(), guard.release()).await
    }

    /// Write, run `work` while the write lease is safe, then release; as
    /// [`with_read`](Self::with_read).
    pub async fn with_write<F, Fut, T>(
        &self,
        options: AcquireOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(LockView) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.write(options).await?;
        let view = guard.writer.view();
        let outcome = crate::client::while_safe(&view, work(view.clone())).await;
        finish_work(outcome, view.key().clone(), guard.release()).await
    }

    fn wait_of(&self, options: &AcquireOptions) -> Duration {
        self.shared.client.inner.config.wait_for(options)
    }

    fn budget(&self, wait: Duration, once: bool) -> Budget {
        Budget {
            deadline: later(self.shared.client.inner.clock.now(), wait),
            once,
        }
    }

    fn timeout(&self, waited: Duration) -> LockError {
        LockError::AcquireTimeout {
            key: LockKey::new(self.shared.name.clone()),
            holder: None,
            waited,
        }
    }

    /// Options a reader-writer lock cannot honour, refused before anything
    /// is read or written.
    fn check(&self, options: &AcquireOptions) -> Result<(), LockError> {
        let refused = if options.reentrant {
            Some("reentrant")
        } else if options.only_if_exists {
            Some("only-if-exists")
        } else if options.busy_unless_dead {
            Some("busy-unless-dead")
        } else if options.delete_on_release {
            Some("delete-on-release (the writer's record must be kept for readers' fences)")
        } else {
            None
        };
        match refused {
            Some(what) => Err(LockError::InvalidInput {
                reason: format!(
                    "reader-writer lock {}: a read or write cannot be {what}",
                    self.shared.name
                ),
                source: None,
            }),
            None => self
                .shared
                .client
                .inner
                .check_acquire(&self.shared.writer_key, options),
        }
    }

    /// The wait left before `budget` ends (zero for one attempt).
    fn left(&self, budget: Budget) -> Duration {
        if budget.once {
            return Duration::ZERO;
        }
        budget
            .deadline
            .saturating_duration_since(self.shared.client.inner.clock.now())
    }

    /// `key` taken within `budget`, or `None` when it stayed held.
    async fn take_lock(
        &self,
        key: &LockKey,
        options: AcquireOptions,
        budget: Budget,
    ) -> Result<Option<LockGuard>, LockError> {
        let client = &self.shared.client;
        if budget.once {
            return client
                .try_acquire(key.clone(), options.wait(Duration::ZERO))
                .await;
        }
        match client
            .acquire(key.clone(), options.wait(self.left(budget)))
            .await
        {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::AcquireTimeout { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn admit_reader(
        &self,
        options: AcquireOptions,
        budget: Budget,
    ) -> Result<Option<ReadGuard>, LockError> {
        self.check(&options)?;
        let shared = &self.shared.client.inner;
        loop {
            // Announce: a slot of our own, before looking at the writer.
            let Some(permit) = self
                .shared
                .readers
                .take(options.clone(), self.left(budget))
                .await?
            else {
                return Ok(None);
            };
            let writer = self.read_writer(budget.deadline).await;
            let writer = match writer {
                Ok(writer) => writer,
                Err(error) => {
                    release_quietly(permit.release().await, &self.shared.name);
                    return Err(error);
                }
            };
            match writer {
                // The slot's lease ran out while the read retried: take a
                // slot again (or time out).
                _ if !permit.is_safe() => {
                    release_quietly(permit.release().await, &self.shared.name);
                    if budget.once || shared.clock.now() >= budget.deadline {
                        return Ok(None);
                    }
                }
                None => {
                    let key = self.shared.writer_key.clone();
                    return Ok(Some(ReadGuard::new(permit, key, Fence(0), None)));
                }
                Some(record) if record.released => {
                    let key = self.shared.writer_key.clone();
                    return Ok(Some(ReadGuard::new(permit, key, record.fence, record.data)));
                }
                Some(record) => {
                    // A writer holds it or waits for it: make way (the
                    // writer may be waiting for this very slot).
                    release_quietly(permit.release().await, &self.shared.name);
                    if !self.until_writer_leaves(record, budget).await? {
                        return Ok(None);
                    }
                    shared.ensure_running()?;
                }
            }
        }
    }

    /// The write lock's record, read with retries until `deadline`.
    async fn read_writer(&self, deadline: Instant) -> Result<Option<LockRecord>, LockError> {
        let shared = &self.shared.client.inner;
        let key = &self.shared.writer_key;
        let mut retry = Retry::until(&shared.backoff, deadline);
        loop {
            match shared.store.get(key).await {
                Ok(record) => return Ok(record),
                Err(error) => match retry.after(error, shared.clock.now()) {
                    Ok(wake) => {
                        shared.pause_until(wake).await;
                        shared.ensure_running()?;
                    }
                    Err(error) => return Err(LockError::from_store(key, error)),
                },
            }
        }
    }

    /// Wait for the write lock (held as `record`) to be released, or its
    /// crashed holder's record to be cleared: `true` then, `false` when the
    /// budget ended first.
    async fn until_writer_leaves(
        &self,
        mut record: LockRecord,
        budget: Budget,
    ) -> Result<bool, LockError> {
        let shared = &self.shared.client.inner;
        let refresh = shared.config.refresh_period;
        let mut releases = shared.watch_releases();
        let writer_key = self.shared.writer_key.clone();
        loop {
            let wall_now = shared.clock.wall_now();
            let now = shared.clock.now();
            let (_, at) = shared.sight(&record, now, wall_now);
            if at <= now && !self.is_mine(&record) {
                self.clear(&self.shared.writer_key, &record).await?;
                return Ok(true);
            }
            if budget.once || now >= budget.deadline {
                return Ok(false);
            }
            let wake = later(now, shared.backoff.jitter(refresh))
                .min(at)
                .min(budget.deadline);
            tokio::select! {
                _ = shared.pause_until_released(wake, releases.as_mut(), |key| *key == writer_key) => {}
                () = self.shared.local.writer_left.notified() => {}
            }
            shared.ensure_running()?;
            match self.read_writer(budget.deadline).await? {
                Some(current) if !current.released => record = current,
                _ => return Ok(true),
            }
        }
    }

    /// A record this client holds at its current version.
    fn is_mine(&self, record: &LockRecord) -> bool {
        let shared = &self.shared.client.inner;
        record.owner == shared.config.owner
            && shared.holds_version(&record.key, record.rvn.as_str())
    }

    /// Clear a crashed holder's `record`: released, with the next fence, in
    /// one write conditional on its version. Refused (the holder wrote since)
    /// or lost on the way, the caller reads again and decides again.
    async fn clear(&self, key: &LockKey, record: &LockRecord) -> Result<(), LockError> {
        let shared = &self.shared.client.inner;
        let new = NewRecord {
            owner: shared.config.owner.clone(),
            rvn: Rvn::fresh(),
            lease: record.lease,
            released: true,
            fence: FenceUpdate::Next,
            data: DataUpdate::Keep,
            expires_at: None,
        };
        match shared
            .store
            .put(key, Expect::Version(record.rvn.clone()), new)
            .await
        {
            Ok(Outcome::Applied(_) | Outcome::Rejected { .. }) => Ok(()),
            Err(error) if error.kind() == crate::StoreErrorKind::Invalid => {
                Err(LockError::from_store(key, error))
            }
            // Unavailable, throttled or ambiguous: the next read says.
            Err(_) => Ok(()),
        }
    }

    async fn take_writer(
        &self,
        options: AcquireOptions,
        budget: Budget,
    ) -> Result<Option<WriteGuard>, LockError> {
        self.check(&options)?;
        // The upgrade lock first, as an upgradeable reader holds it (see the
        // module's comment); its data stays as it is.
        let Some(upgrade) = self
            .take_lock(
                &self.shared.upgrade_key,
                options.clone().data_update(DataUpdate::Keep),
                budget,
            )
            .await?
        else {
            return Ok(None);
        };
        let writer = match self
            .take_lock(&self.shared.writer_key, options, budget)
            .await
        {
            Ok(Some(writer)) => writer,
            other => {
                release_quietly(upgrade.release().await, &self.shared.name);
                return other.map(|_| None);
            }
        };
        match self.drain(None, budget).await {
            // Safe at the end of the wait, or not returned at all (its lease
            // may have run out while the readers left).
            Ok(true) if writer.is_safe() && upgrade.is_safe() => Ok(Some(WriteGuard {
                writer,
                upgrade,
                reader: None,
                local: self.shared.local.clone(),
            })),
            other => {
                release_quietly(writer.release().await, &self.shared.name);
                self.shared.local.writer_left.notify_waiters();
                release_quietly(upgrade.release().await, &self.shared.name);
                other.map(|_| None)
            }
        }
    }

    /// With the write lock held: wait until no reader but `own` (an
    /// upgrading reader's slot, and the read that holds it) holds a slot,
    /// clearing crashed readers' slots once the takeover rule allows. `false`
    /// when the budget ended first.
    async fn drain(
        &self,
        own: Option<(u32, &LockView)>,
        budget: Budget,
    ) -> Result<bool, LockError> {
        let shared = &self.shared.client.inner;
        let readers = &self.shared.readers;
        let refresh = shared.config.refresh_period;
        // A reader of another process leaving: announced where the store
        // can, so the writer drains at once.
        let mut releases = shared.watch_releases();
        let in_lock = crate::released::in_partition(&self.shared.name);
        loop {
            shared.ensure_running()?;
            let slots = readers.read_slots(budget.deadline).await?;
            let wall_now = shared.clock.wall_now();
            let now = shared.clock.now();
            let mut inside = false;
            let mut next: Option<Instant> = None;
            for (slot, record) in (0u32..).zip(&slots) {
                let Some(record) = record.as_ref().filter(|record| !record.released) else {
                    continue;
                };
                // The upgrading reader's own read: still safe, and still the
                // acquisition this client holds the slot with (not another
                // task of this client that took the slot after that read was
                // lost). Not by version: one of its heartbeats may be on its
                // way.
                if let Some((own, view)) = own
                    && own == slot
                    && view.is_safe()
                    && record.owner == shared.config.owner
                    && shared
                        .registry
                        .get(&record.key)
                        .is_some_and(|held| Arc::ptr_eq(&held, &view.held))
                {
                    continue;
                }
                // A reader keeping its slot to the end of a min hold has
                // left once that hold ends.
                if let Some(until) = record.rvn.final_until()
                    && crate::timing::final_hold_ends_at(now, wall_now, until) <= now
                {
                    continue;
                }
                let (_, at) = shared.sight(record, now, wall_now);
                if at <= now && !self.is_mine(record) {
                    self.clear(&readers.slot_key(slot), record).await?;
                }
                // Read again next round, cleared or not.
                inside = true;
                next = Some(next.map_or(at, |next| next.min(at)));
            }
            if !inside {
                return Ok(true);
            }
            let now = shared.clock.now();
            // One attempt goes on only to read again after clearing a slot.
            let over = if budget.once {
                next.is_none_or(|next| next > now)
            } else {
                now >= budget.deadline
            };
            if over {
                return Ok(false);
            }
            let wake = next
                .unwrap_or(budget.deadline)
                .max(now)
                .min(later(now, shared.backoff.jitter(refresh)))
                .min(budget.deadline);
            tokio::select! {
                _ = shared.pause_until_released(wake, releases.as_mut(), &in_lock) => {}
                () = readers.released_here() => {}
            }
        }
    }

    async fn take_upgradeable(
        &self,
        options: AcquireOptions,
        budget: Budget,
    ) -> Result<Option<UpgradeableReadGuard>, LockError> {
        self.check(&options)?;
        let Some(upgrade) = self
            .take_lock(
                &self.shared.upgrade_key,
                options.clone().data_update(DataUpdate::Keep),
                budget,
            )
            .await?
        else {
            return Ok(None);
        };
        match self.admit_reader(options, budget).await {
            Ok(Some(read)) => Ok(Some(UpgradeableReadGuard {
                read,
                upgrade,
                lock: self.clone(),
            })),
            other => {
                release_quietly(upgrade.release().await, &self.shared.name);
                other.map(|_| None)
            }
        }
    }
}

fn refuse_wait(options: &AcquireOptions) -> Result<(), LockError> {
    match options.wait.filter(|wait| !wait.is_zero()) {
        Some(wait) => Err(crate::ConfigError::WaitOnTryAcquire { wait }.into()),
        None => Ok(()),
    }
}

/// A release on a path that already has its answer (a timeout, an error,
/// backing off for a writer): its own failure is logged, and the record's
/// lease runs out on its own.
fn release_quietly(released: Result<(), LockError>, name: &str) {
    if let Err(error) = released {
        tracing::warn!(lock = %name, %error, "reader-writer lock: a release failed; its lease will run out");
    }
}

/// What `with_read` / `with_write` return once `work` ended or was cancelled.
async fn finish_work<T>(
    outcome: Result<T, LostReason>,
    key: LockKey,
    release: impl Future<Output = Result<(), LockError>>,
) -> Result<T, LockError> {
    match outcome {
        Ok(value) => {
            if let Err(error) = release.await {
                tracing::warn!(%key, %error, "release after the work failed");
            }
            Ok(value)
        }
        Err(reason) => {
            tracing::warn!(%key, %reason, "work cancelled: lease no longer safe");
            // Released in the background: the caller learns now.
            drop(release);
            Err(LockError::Lost { key, reason })
        }
    }
}

/// What a reader holds, cheap to clone: the writer fence it was admitted
/// with, the data the last writer left, and its slot's lease.
#[derive(Clone, Debug)]
pub struct ReadView {
    fence: Fence,
    /// The lock's write lock, whose fence `fence` is.
    writer_key: LockKey,
    writer_data: Option<Vec<u8>>,
    slot: LockView,
}

impl ReadView {
    /// The writer fence this reader was admitted with: the last writer's
    /// (raised by one when a crashed writer's record was cleared; 0 when no
    /// writer ever held the lock). Present it with every read of the
    /// protected resource; a resource that saw a higher writer fence refuses
    /// a reader that outlived that writer's arrival.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// The key the reader's [`fence`](Self::fence) goes with at a resource:
    /// the lock's [write lock](RwLock::writer_key), the same key a
    /// [`WriteGuard`] of this lock has, so that readers and writers of one
    /// resource present fences of one lock. (The reader slot's own key and
    /// fence, [`slot`](Self::slot), are not for fence checks: each slot is a
    /// lock of its own.)
    pub fn writer_key(&self) -> &LockKey {
        &self.writer_key
    }

    /// The data the write lock's record held when this reader was admitted
    /// (what the last writer left, e.g. with
    /// [`WriteGuard::release_with_data`]).
    pub fn writer_data(&self) -> Option<Vec<u8>> {
        self.writer_data.clone()
    }

    /// The reader's slot: its key, lease, heartbeats and data.
    pub fn slot(&self) -> &LockView {
        &self.slot
    }

    /// The read lease's state.
    pub fn state(&self) -> LeaseState {
        self.slot.state()
    }

    /// True while the read lease is safe: no writer can be writing.
    pub fn is_safe(&self) -> bool {
        self.slot.is_safe()
    }

    /// Resolves when the read lease stops being safe, with why.
    pub fn until_unsafe(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.slot.until_unsafe()
    }

    /// Resolves when the read lease has ended (see [`LockView::until_ended`]).
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.slot.until_ended()
    }
}

/// A read of a [`RwLock`]: a held reader slot, admitted while no writer held
/// the lock. Derefs to [`ReadView`]. Released by
/// [`release`](Self::release) or, in the background, when dropped.
#[derive(Debug)]
#[must_use = "dropping a read guard releases it"]
pub struct ReadGuard {
    view: ReadView,
    permit: Permit,
}

impl ReadGuard {
    fn new(
        permit: Permit,
        writer_key: LockKey,
        fence: Fence,
        writer_data: Option<Vec<u8>>,
    ) -> Self {
        let slot = LockView::clone(&*permit);
        Self {
            view: ReadView {
                fence,
                writer_key,
                writer_data,
                slot,
            },
            permit,
        }
    }

    /// Which reader slot it holds (from 0).
    pub fn slot_index(&self) -> u32 {
        self.permit.slot()
    }

    /// A clonable handle to this read.
    pub fn view(&self) -> ReadView {
        self.view.clone()
    }

    /// Leave: release the reader slot (one conditional write).
    pub async fn release(self) -> Result<(), LockError> {
        self.permit.release().await
    }
}

impl std::ops::Deref for ReadGuard {
    type Target = ReadView;

    fn deref(&self) -> &ReadView {
        &self.view
    }
}

/// The write of a [`RwLock`]: its write lock held and every other reader
/// gone. Derefs to the write lock's [`LockView`] (its
/// [`fence`](LockView::fence), [`state`](LockView::state),
/// [`until_unsafe`](LockView::until_unsafe), data). Released by
/// [`release`](Self::release) or, in the background, when dropped.
#[derive(Debug)]
#[must_use = "dropping a write guard releases it"]
pub struct WriteGuard {
    writer: LockGuard,
    upgrade: LockGuard,
    /// An upgraded reader's own slot, held until the write ends.
    reader: Option<ReadGuard>,
    local: Arc<OnClient>,
}

impl WriteGuard {
    /// A clonable handle to the write lock (fence, state, data).
    pub fn view(&self) -> LockView {
        self.writer.view()
    }

    /// The write lock's guard.
    pub fn guard(&self) -> &LockGuard {
        &self.writer
    }

    /// Leave: release the write lock (readers may come in), then the rest
    /// (an upgraded reader's slot, the upgrade lock). The first error is
    /// returned after every release was tried.
    pub async fn release(self) -> Result<(), LockError> {
        let Self {
            writer,
            upgrade,
            reader,
            local,
        } = self;
        let released = writer.release().await;
        local.writer_left.notify_waiters();
        self::release_rest(released, reader, upgrade).await
    }

    /// [`release`](Self::release), leaving `data` in the write lock's record
    /// in the same write, for the readers that come next
    /// ([`ReadView::writer_data`]).
    pub async fn release_with_data(self, data: impl Into<Vec<u8>>) -> Result<(), LockError> {
        let Self {
            writer,
            upgrade,
            reader,
            local,
        } = self;
        let released = writer.release_with_data(data).await;
        local.writer_left.notify_waiters();
        self::release_rest(released, reader, upgrade).await
    }
}

async fn release_rest(
    mut first: Result<(), LockError>,
    reader: Option<ReadGuard>,
    upgrade: LockGuard,
) -> Result<(), LockError> {
    if let Some(reader) = reader {
        let released = reader.release().await;
        if first.is_ok() {
            first = released;
        }
    }
    let released = upgrade.release().await;
    if first.is_ok() {
        first = released;
    }
    first
}

impl std::ops::Deref for WriteGuard {
    type Target = LockView;

    fn deref(&self) -> &LockView {
        &self.writer
    }
}

/// An upgradeable read of a [`RwLock`]: a read ([`ReadView`], by deref)
/// that holds the lock's `upgrade` lock too, so that no writer comes in
/// before it [upgrades](Self::upgrade).
#[derive(Debug)]
#[must_use = "dropping an upgradeable read guard releases it"]
pub struct UpgradeableReadGuard {
    read: ReadGuard,
    upgrade: LockGuard,
    lock: RwLock,
}

/// An [`UpgradeableReadGuard::upgrade`] that did not complete: why, and the
/// read, still held.
#[derive(Debug, thiserror::Error)]
#[error("the upgrade to a write did not complete")]
pub struct UpgradeFailed {
    /// The upgradeable read, still held.
    pub guard: UpgradeableReadGuard,
    /// Why.
    #[source]
    pub error: LockError,
}

impl UpgradeableReadGuard {
    /// Which reader slot it holds (from 0).
    pub fn slot_index(&self) -> u32 {
        self.read.slot_index()
    }

    /// A clonable handle to the read.
    pub fn view(&self) -> ReadView {
        self.read.view()
    }

    /// True while the read lease and the upgrade lock are both safe.
    pub fn is_safe(&self) -> bool {
        self.read.is_safe() && self.upgrade.is_safe()
    }

    /// Resolves when the read lease or the upgrade lock stops being safe.
    pub fn until_unsafe(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let read = self.read.until_unsafe();
        let upgrade = self.upgrade.until_unsafe();
        async move {
            tokio::select! {
                reason = read => reason,
                reason = upgrade => reason,
            }
        }
    }

    /// Become the writer: take the write lock (new readers now wait), then
    /// wait for the other readers to leave, within the options' wait budget
    /// (the options' lease, data and hold limits apply to the write lock).
    /// The read stays held until the write is released. On failure the
    /// write lock is released and the read handed back in the error.
    pub async fn upgrade(self, options: AcquireOptions) -> Result<WriteGuard, UpgradeFailed> {
        let lock = self.lock.clone();
        if let Err(error) = lock.check(&options) {
            return Err(UpgradeFailed { guard: self, error });
        }
        // A read no longer safe cannot become a write: its slot may be
        // another reader's by now.
        if !self.is_safe() {
            let reason = match self.read.state() {
                LeaseState::Lost { reason } => reason,
                _ => match self.upgrade.state() {
                    LeaseState::Lost { reason } => reason,
                    _ => LostReason::InDanger,
                },
            };
            let error = LockError::Lost {
                key: self.read.slot().key().clone(),
                reason,
            };
            return Err(UpgradeFailed { guard: self, error });
        }
        let wait = lock.wait_of(&options);
        let budget = lock.budget(wait, false);
        let writer = match lock
            .take_lock(&lock.shared.writer_key, options, budget)
            .await
        {
            Ok(Some(writer)) => writer,
            Ok(None) => {
                return Err(UpgradeFailed {
                    guard: self,
                    error: lock.timeout(wait),
                });
            }
            Err(error) => return Err(UpgradeFailed { guard: self, error }),
        };
        let own = self.read.slot().clone();
        match lock
            .drain(Some((self.read.slot_index(), &own)), budget)
            .await
        {
            Ok(true) if writer.is_safe() && self.is_safe() => Ok(WriteGuard {
                writer,
                upgrade: self.upgrade,
                reader: Some(self.read),
                local: lock.shared.local.clone(),
            }),
            other => {
                release_quietly(writer.release().await, &lock.shared.name);
                lock.shared.local.writer_left.notify_waiters();
                let error = match other {
                    Err(error) => error,
                    Ok(_) => lock.timeout(wait),
                };
                Err(UpgradeFailed { guard: self, error })
            }
        }
    }

    /// Leave: release the read, then the upgrade lock.
    pub async fn release(self) -> Result<(), LockError> {
        let released = self.read.release().await;
        let upgraded = self.upgrade.release().await;
        released.and(upgraded)
    }
}

impl std::ops::Deref for UpgradeableReadGuard {
    type Target = ReadView;

    fn deref(&self) -> &ReadView {
        &self.read
    }
}
